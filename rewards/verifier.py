"""Verifiers as rewards: the arithmetic step checker as a PRM, the math verifier as an ORM.

StepCheckScorer is an imperfect process verifier on purpose: it knows arithmetic, not
whether the right quantities were used (see verifiers/steps.py). OracleScorer grades a
finished solution against the problem's gold answer: a perfect verifier for studying how
verifier quality caps search, never a fair accuracy number on its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from search.answers import extract
from search.scoring import registered_as
from search.session import Bindable
from search.types import Node, Problem

# step verdict -> reward: an unchecked step is neither trusted nor condemned
STEP_REWARD = {"correct": 1.0, "none": 0.5, "wrong": 0.0}


@registered_as("steps")
class StepCheckScorer(Bindable):
    """Reward of a node's latest step: 1 if every equation in it is right, 0 if one is
    wrong, 0.5 if it has none. The step that finishes a solution is judged with its answer
    (verifiers.steps.check_final): 1 if the answer the solution states (search.answers'
    extraction, what the search and grader read) equals the value of the path's last
    equation and the step's own equations are right, 0 if not, 0.5 without the evidence
    (no number stated, no equation on the path). So finished paths are ranked by whether
    their answer follows from their work, not all scored 0.5 for "The answer is N.".

    path_agg "min": a path is only as sound as its worst step; a slip anywhere makes it 0.
    """

    name = "steps"
    path_agg = "min"


    def score(self, problem: Problem, nodes: Sequence[Node]) -> list[float]:
        from verifiers.steps import check_final, check_step

        self.meter.charge_scorer(calls=len(nodes))
        out = []
        for n in nodes:
            if n.step is None:
                out.append(STEP_REWARD["none"])
            elif n.finished:
                verdict = check_final([s.text for s in n.steps()], extract(problem, n.text))
                out.append(STEP_REWARD[verdict.status])
            else:
                out.append(STEP_REWARD[check_step(n.step.text).status])
        return out


def needs_answer(problem: Problem, model: str) -> None:
    """The oracle's check before any model loads: the problem has a gold answer."""
    del model
    if problem.answer is None:
        raise ValueError(f"scorer 'oracle' compares with the gold answer, but problem "
                         f"{problem.id!r} has none; give Problem(answer=...) (--answer on "
                         "the command line)")


@registered_as("oracle", check=needs_answer)
class OracleScorer(Bindable):
    """1.0 for a finished solution whose answer matches the gold answer, else 0.0
    (unfinished paths score 0). Needs Problem.answer. It judges the leaf: path_agg "last"."""

    name = "oracle"
    path_agg = "last"


    def __init__(self, *, timeout: float = 2.0) -> None:
        self.timeout = timeout

    def score(self, problem: Problem, nodes: Sequence[Node]) -> list[float]:
        from verifiers.math import verify

        if problem.answer is None:
            raise ValueError(f"OracleScorer needs a gold answer; problem {problem.id!r} has none")
        self.meter.charge_scorer(calls=len(nodes))
        return [float(n.finished and verify(problem.answer, n.text, timeout=self.timeout).correct)
                for n in nodes]
