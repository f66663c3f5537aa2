"""verifiers.grade: one grading entry point for math answers and sandboxed programs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from problems import arith, codegen
from search.types import Problem
from verifiers.grade import grade


def test_math_grades_the_final_answer():
    p = arith.generate(1, seed=5)[0]
    right = grade(p, p.metadata["solution"])
    assert right.correct and right.verified is None and not right.false_positive
    wrong = grade(p, f"The answer is {int(str(p.answer)) + 1}.")
    assert not wrong.correct and wrong.detail


def test_code_grades_by_hidden_tests_and_flags_false_positives():
    p = codegen.generate(1, seed=2, difficulty=3)[0]
    body = p.metadata["solution"][len(p.prompt):]
    ref = grade(p, body)  # a completion of the stub, as the tiny reasoner writes it
    assert ref.correct and ref.verified is True and not ref.false_positive
    decoy = grade(p, f"```python\n{p.metadata['decoy']}\n```")  # a whole program, chat style
    assert decoy.verified is True and not decoy.correct and decoy.false_positive
    broken = grade(p, "    return (\n")
    assert broken.verified is False and not broken.correct


def test_grading_needs_a_gold():
    with pytest.raises(ValueError, match="no gold answer"):
        grade(Problem(prompt="What is 2 + 2?"), "4")
    p = codegen.generate(1, seed=2)[0]
    with pytest.raises(ValueError, match="no hidden tests"):
        grade(replace(p, hidden_tests=()), "    return 0\n")
