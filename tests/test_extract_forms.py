r"""The written forms of numbers (verifiers/_math/forms.py), number words, and choices
(verifiers/_math/choice.py), each rule against hand-written expectations, including where it
must leave the text alone."""

from __future__ import annotations

import pytest

from search.types import Problem
from verifiers._math.choice import letter_of, options_of
from verifiers._math.forms import rewrite
from verifiers._math.numwords import prose_number, value_of, whole_answer
from verifiers.grade import grade
from verifiers.math import verify


@pytest.mark.parametrize(
    "text, expected",
    [
        ("−5", "-5"), ("x = −3", "x = -3"), ("pages 5–7", "pages 5–7"),  # a dash is no sign
        ("1\u00a0000\u00a0000", "1000000"), ("1\u202f234", "1234"), ("45\u2009000", "45000"),
        ("a\u00a0b", "a b"), ("12\u00a034", "12 34"),  # NBSP elsewhere: a space
        ("12,34,567", "1234567"), ("1,00,000", "100000"), ("(12,34,567)", "(12,34,567)"),
        ("1,234,567", "1,234,567"),  # Western groups are the readers' own rule
        ("1.234,50", "1234.50"), ("1 234,5", "1234.5"), ("1.234.567", "1234567"),
        ("1.234", "1.234"), ("3,5", "3,5"), ("1.234,50.", "1234.50."),
        ("½", "\\frac{1}{2}"), ("4¼", "4\\frac{1}{4}"), ("2 ⅔", "2\\frac{2}{3}"), ("and ¾", "and \\frac{3}{4}"),
        ("1⁄2", "1/2"), ("3 1/2", "3\\frac{1}{2}"), ("137 1/2.", "137\\frac{1}{2}."),
        ("3 5/2", "3 5/2"), ("x 1/2", "x 1/2"), ("1/2 3/4", "1/2 3/4"), ("2 1/0", "2 1/0"),
        ("x²", "x^{2}"), ("10⁵", "10^{5}"), ("10⁻³", "10^{-3}"), ("48 cm²", "48 cm^{2}"),
        ("\\hspace{1pt}1024", "1024"), ("\\kern 2pt 5", " 5"), ("plain 42", "plain 42"),
    ],
)  # fmt: skip
def test_rewrite(text: str, expected: str) -> None:
    assert rewrite(text) == expected


@pytest.mark.parametrize(
    "words, value",
    [("forty-two", "42"), ("forty two", "42"), ("one hundred twenty", "120"), ("one hundred and five", "105"),
     ("three and a half", "3.5"), ("two and a quarter", "2.25"), ("two thirds", "2/3"), ("a half", "0.5"),
     ("minus seven", "-7"), ("seventeen hundred", "1700"), ("zero", "0"),
     ("two three", None), ("twenty thirty", None), ("two and three", None), ("thousand", None)],
)  # fmt: skip
def test_number_words(words: str, value: str | None) -> None:
    assert value_of(words) == value


def test_number_words_in_prose_and_whole_answers() -> None:
    assert prose_number("one") is None and prose_number("a") is None  # pronoun, article
    assert whole_answer("one") == "1" and whole_answer("forty-two apples") == "42 apples"
    assert whole_answer("two x + 3") == "two x + 3" and whole_answer("Evelyn") == "Evelyn"


@pytest.mark.parametrize(
    "answer, letter",
    [("(B)", ("B", "")), ("B", ("B", "")), ("B)", ("B", "")), ("(B) 27", ("B", "27")), ("B. 27", ("B", "27")),
     ("option C", ("C", "")), ("Option (C): 12", ("C", "12")), ("选项B", ("B", "")), ("вариант Б", ("B", "")),
     ("B = 5", None), ("b", None), ("A 12", None), ("12", None), ("x", None)],
)  # fmt: skip
def test_letter_of(answer: str, letter: tuple[str, str] | None) -> None:
    assert letter_of(answer) == letter


def test_options_of() -> None:
    assert options_of("What is 3^3? (A) 9 (B) 27 (C) 81 (D) 3") == {"A": "9", "B": "27", "C": "81", "D": "3"}
    assert options_of("Pick one.\nA. 12\nB) 27\nC: 30") == {"A": "12", "B": "27", "C": "30"}
    assert options_of(["9", "27"]) == {"A": "9", "B": "27"}
    assert options_of({"(a)": "9", "b": "27"}) == {"A": "9", "B": "27"}
    assert options_of("Solve 3x = 9.") == {} and options_of("(A) only one") == {}


@pytest.mark.parametrize(
    "gold, text, correct",
    [("B", "The answer is 27.", True), ("C", "The answer is 27.", False), ("27", "The answer is (B).", True),
     ("81", "The answer is (B).", False), ("B", "**(B) 30**", False), ("B", "**(B) 27**", True),
     ("27", "Thus\n\n**B**", True), ("B", "The answer is 28.", False)],
)  # fmt: skip
def test_choice_against_the_problems_options(gold: str, text: str, correct: bool) -> None:
    """A letter matches its option's text either way round; a prediction whose letter and
    text disagree answers nothing."""
    problem = Problem(prompt="What is 3^3? (A) 9 (B) 27 (C) 81 (D) 3", answer=gold)
    assert grade(problem, text).correct is correct
    listed = Problem(prompt="What is 3^3?", answer=gold, metadata={"choices": ["9", "27", "81", "3"]})
    assert grade(listed, text).correct is correct


def test_choice_without_options() -> None:
    """With no options a letter matches only a letter, and "(B) 27" against a value is its text."""
    assert verify("B", "The correct option is (B).").correct
    assert not verify("B", "The answer is 27.").correct
    assert verify("27", "**(B) 27**").correct and not verify("28", "**(B) 27**").correct
