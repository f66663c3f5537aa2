"""An oracle step scorer for studies: a perfect PRM on problems with a gold derivation.

A step scores 1 while its path is a prefix of a correct derivation of the problem's gold
solution and 0 from the first step that departs from it, by problems.arith.first_error's
rule (wrong arithmetic, a quantity other than the gold chain's, an answer before the chain
is complete or other than the gold's). So a step that computes right with the wrong
quantities scores 0, where the arithmetic step checker (rewards.verifier.StepCheckScorer)
gives it 1. It reads the gold solution, so it is never a fair accuracy number on its own:
it bounds what a search gains from a perfect process reward (the papers' oracle-PRM
ablations), beside the step checker and a learned PRM.

An unfinished path is judged as a prefix: its steps are checked followed by a statement of
the gold answer, so a right but incomplete chain is not charged for stopping early. A
finished path is judged as it stands (one that never states the answer errs at its last
step). path_agg "min": once a step departs, every later step of the path scores 0 too.
"""

from __future__ import annotations

from collections.abc import Sequence

from search.scoring import registered_as
from search.session import Bindable
from search.types import Node, Problem


def needs_derivation(problem: Problem, model: str) -> None:
    """The scorer's check before any model loads: the problem carries its gold chain."""
    del model
    if "equations" not in (problem.metadata or {}) or problem.answer is None:
        raise ValueError(f"scorer 'oracle_steps' compares with the gold derivation, but "
                         f"problem {problem.id!r} has none (problems.arith problems carry "
                         "metadata['equations'] and the answer)")


def on_gold_path(problem: Problem, steps: Sequence[str], finished: bool) -> bool:
    """Whether the steps are a correct derivation (finished) or a prefix of one."""
    from problems.arith import first_error

    if finished:
        return first_error(problem, list(steps)) is None
    err = first_error(problem, [*steps, f"The answer is {problem.answer}."])
    return err is None or err >= len(steps)


@registered_as("oracle_steps", check=needs_derivation)
class OracleStepScorer(Bindable):
    """1.0 for a step on a prefix of the gold derivation, 0.0 from the first step that
    departs from it (see the module doc); the root (no step) scores 1."""

    name = "oracle_steps"
    path_agg = "min"

    def score(self, problem: Problem, nodes: Sequence[Node]) -> list[float]:
        needs_derivation(problem, "")
        self.meter.charge_scorer(calls=len(nodes))
        return [1.0 if n.step is None else
                float(on_gold_path(problem, [s.text for s in n.steps()], n.finished))
                for n in nodes]
