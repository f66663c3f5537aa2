"""The oracle step scorer (rewards.oracle_steps) on hand-built paths of one arith problem."""

from __future__ import annotations

import pytest

from problems import arith
from search.types import Node, Problem, Step


def problem() -> Problem:
    # 'Mia has 5 * 8 = 40 apples.' / 'Ana has 40 - 17 = 23 apples.' /
    # 'Ivy has 23 * 7 = 161 apples.' / 'The answer is 161.' (the arith module's example)
    return arith.generate(2, seed=1, difficulty=3)[1]


def path(p: Problem, texts: list[str], *, finished: bool) -> list[Node]:
    """The nodes of a path with these step texts (the last finished or not)."""
    nodes = [Node(problem=p)]
    for i, text in enumerate(texts):
        last = i == len(texts) - 1
        reason = "eos" if last and finished else "stop"
        nodes.append(Node(parent=nodes[-1], step=Step(text, (1,), (0.0,), reason)))
    return nodes[1:]


def scores(p: Problem, texts: list[str], *, finished: bool) -> list[float]:
    from rewards.oracle_steps import OracleStepScorer

    return OracleStepScorer().score(p, path(p, texts, finished=finished))


def test_gold_steps_score_one_and_a_departure_scores_zero_from_there():
    p = problem()
    gold = p.metadata["solution"].split(arith.STEP_DELIMITER)
    assert gold == ["Mia has 5 * 8 = 40 apples.", "Ana has 40 - 17 = 23 apples.",
                    "Ivy has 23 * 7 = 161 apples.", "The answer is 161."]
    assert scores(p, gold, finished=True) == [1.0, 1.0, 1.0, 1.0]
    # every prefix of the gold derivation is on it, though it states no answer yet
    assert scores(p, gold[:2], finished=False) == [1.0, 1.0]
    # operands of * in either order are the same quantity
    assert scores(p, ["Mia has 8 * 5 = 40 apples."], finished=False) == [1.0]
    # right arithmetic with a wrong quantity (Mia's age, 47): the step checker's 1, here 0
    wrong = ["Mia has 5 * 8 = 40 apples.", "Ana has 47 - 17 = 30 apples.",
             "Ivy has 30 * 7 = 210 apples.", "The answer is 210."]
    assert scores(p, wrong, finished=True) == [1.0, 0.0, 0.0, 0.0]
    from rewards.verifier import StepCheckScorer
    assert StepCheckScorer().score(p, path(p, wrong, finished=True)) == [1.0, 1.0, 1.0, 1.0]


def test_wrong_arithmetic_early_answers_and_unfinished_ends():
    p = problem()
    assert scores(p, ["Mia has 5 * 8 = 41 apples."], finished=False) == [0.0]
    # the right answer stated before the chain is complete departs from the derivation
    assert scores(p, ["Mia has 5 * 8 = 40 apples.", "The answer is 161."],
                  finished=True) == [1.0, 0.0]
    # a step with neither an equation nor an answer departs too
    assert scores(p, ["Let us think."], finished=False) == [0.0]
    # a finished path whose chain is right but that never states the answer errs last
    steps = ["Mia has 5 * 8 = 40 apples.", "Ana has 40 - 17 = 23 apples.",
             "Ivy has 23 * 7 = 161 apples."]
    assert scores(p, steps, finished=True) == [1.0, 1.0, 0.0]
    assert scores(p, steps, finished=False) == [1.0, 1.0, 1.0]


def test_a_problem_without_a_gold_derivation_is_refused():
    from rewards.oracle_steps import OracleStepScorer

    p = Problem(prompt="q", answer="3")
    with pytest.raises(ValueError, match="gold derivation"):
        OracleStepScorer().score(p, path(p, ["1 + 2 = 3."], finished=False))


def test_registered_by_name():
    from search.scoring import known

    assert "oracle_steps" in known()
