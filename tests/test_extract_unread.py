r"""The grader abstains where it cannot read the conclusion: "unread", with its reason, is
never correct and is counted apart. The held-out rounds tests/data/extract_unread_round*.jsonl
were each written and run against the grader before any change for them (round 1, 86 outputs
in the classes of the issue, on main: 48 false positives, 27 false negatives; round 2, 97
fresh outputs after round 1's fixes: 4 false positives, a Dutch hedge "waarschijnlijk 45,
mogelijk 46", two cut-off texts and a Tagalog hedge, and 2 false negatives, a short Turkish
decimal comma and "we should not write $\boxed{10}$"; rounds 3 to 6: docs/grader.md). Each row's
prediction answers the golds in its `right` and none in its `wrong`; hedges, refusals,
cut-off texts and unknown scripts have no `right`.

    lang-plain, lang-unmarked  an answer in one of the tables' languages, with or without a
                               marker (Polish, Dutch, Turkish, ..., Bengali, Swahili, Telugu, Thai)
    lang-check                 a check section in that language never replaces the answer
    lang-hedge, lang-refusal   "59 lub 60", "nie można ustalić": no answer
    lang-negation              "odpowiedź to 120, nie 60", "60 değil"
    lang-words                 number words of the language ("czterdzieści dwa")
    prose-math                 "4x³ + 2x" in prose is that polynomial, not 4
    decimal-comma              "3,5" in a language that writes a decimal comma, no marker
    repeating                  0.\overline{3}, 0.1(6)
    table                      a markdown table's total or answer row
    negated-box                "it is not \boxed{5}": the answer is elsewhere
    bold-aside                 "**126** bottles, since ... 18 per case"
    percent                    "\boxed{0.25\%}" is not the gold 0.25
    truncated                  a last sentence that does not end: unread
    run-on                     a "Problem:" / "Question:" head after the answer ends the output
    unknown-script, -latin     a language no table reads: unread
"""

from __future__ import annotations

from collections import Counter

import pytest
from helpers import DATA, verdict_rows

from search.types import Problem
from verifiers.grade import grade
from verifiers.math import extract_answer, unread_reason, verify

ROUNDS = sorted(p.stem for p in DATA.glob("extract_unread_round*.jsonl"))
ROWS = [row for table in ROUNDS for row in verdict_rows(table)]


def test_the_rounds_are_whole() -> None:
    assert [f"extract_unread_round{k}" for k in (1, 2, 3, 4, 5, 6)] == ROUNDS
    right = Counter(family for family, *_, expected in ROWS if expected)
    wrong = Counter(family for family, *_, expected in ROWS if not expected)
    assert len(ROWS) >= 600 and sum(right.values()) >= 150
    assert all(wrong[f] >= 1 for f in {f for f, *_ in ROWS}), wrong


# misses the rounds found and the grader still makes, each with why (main makes them too)
KNOWN_MISSES = {
    "Whether we count from the left or the right, the middle seat is seat number 13.":
        "a 'whether' clause supposes all that follows it in the sentence: nothing is asserted",
}


@pytest.mark.parametrize("family, gold, prediction, expected", ROWS)
def test_round_row(family: str, gold: str, prediction: str, expected: bool) -> None:
    if prediction in KNOWN_MISSES and expected:
        pytest.xfail(KNOWN_MISSES[prediction])
    verdict = verify(gold, prediction)
    assert verdict.correct is expected, (family, verdict)


@pytest.mark.parametrize(
    "text, gold, why",
    [
        ("ნიკოს აქვს 12 ვაშლი და ყიდულობს 8-ს, ამიტომ აქვს 20 ვაშლი. შესაძლოა 21.", "21", "language"),
        ("First, 3 × 40 = 120 dollars for the shirts. Then we subtract the discount of", "120", "mid-sentence"),
        ("Er is niet genoeg informatie om dit te bepalen. Misschien 3 × 20 = 60.", "60", "refusal"),
        ("So x is probably 12.", "12", "doubt"),
    ],
)
def test_unread_is_never_correct_and_says_why(text: str, gold: str, why: str) -> None:
    verdict = verify(gold, text)
    assert not verdict.correct and verdict.unread and why in verdict.unread
    assert verdict.reason == f"unread: {verdict.unread}" and verdict.pred_parsed is None
    assert unread_reason(text) == verdict.unread


def test_guess_restores_the_last_number() -> None:
    """The knob: where the grader would abstain, guess=True reads the last statement, as it did
    before it could abstain; what it reads with confidence is the same either way."""
    georgian = "ნიკოს აქვს 12 ვაშლი და ყიდულობს 8-ს, ამიტომ აქვს 20 ვაშლი. შესაძლოა 21."
    assert verify("21", georgian, guess=True).correct and verify("21", georgian, guess=True).unread is None
    cut = "First, 3 × 40 = 120 dollars for the shirts. Then we subtract the discount of"
    assert verify("120", cut, guess=True).correct
    for gold, text in [("42", "So the answer is $\\boxed{42}$."), ("15", "Hij houdt 15 knikkers over.")]:
        assert verify(gold, text).correct and verify(gold, text, guess=True).correct
    assert extract_answer(cut) == "120"  # a search's vote reads as before


def test_grade_counts_unread_apart() -> None:
    problem = Problem(id="p", prompt="How many?", answer="120", domain="math")
    cut = "First, 3 × 40 = 120 dollars for the shirts. Then we subtract the discount of"
    g = grade(problem, cut)
    assert (g.correct, g.unread) == (False, "the text stops mid-sentence")
    g = grade(problem, "120", solution=cut)  # the grid grades the answer and reads its text
    assert not g.correct and g.unread == "the text stops mid-sentence"
    assert grade(problem, "120", solution=cut, guess=True).correct
    g = grade(problem, "120", solution="So 3 × 40 = 120.")
    assert g.correct and g.unread is None


def test_the_eval_grader_records_unread() -> None:
    from reports.eval.correctness import Grader

    problem = Problem(id="p", prompt="How many?", answer="120", domain="math")
    cut = "First, 3 × 40 = 120 dollars for the shirts. Then we subtract the discount of"
    assert Grader().text(problem, "120", solution=cut).unread == "the text stops mid-sentence"
    assert Grader(guess=True).text(problem, "120", solution=cut).correct
