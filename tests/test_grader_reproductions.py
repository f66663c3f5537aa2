r"""Issue 18's reproductions (each measured wrong on main before the fix), the rest of each bug
class they stand for, and the conventions in which this grader differs from math-verify.

The reproductions were facts on main at 1c296a1: every row below gave the other verdict
there (tests/test_grader_corpus.py holds the thousands of generated rows).
"""

from __future__ import annotations

import pytest

from verifiers import verify

T, F = True, False
# fmt: off
# (gold, prediction, expected): the issue's reproductions, verbatim
REPRODUCTIONS = [
    # space-separated digit groups were multiplied ("1 000" -> 1*000 = 0)
    ("0", "1 000", F), ("6", "2 3", F), ("800", r"\boxed{10 080}", F), ("1000", "1 000", T),
    # a gold with several parts collapsed to its last number
    ("$AB=4,CD=5$", "5", F), ("$1$ and $2$ and $3$", "3", F), ("2 or 3 or 5", "5", F),
    # hedged or partial answers
    ("3", r"so the answer is \boxed{1} or \boxed{3}", F), (r"\boxed{1} and \boxed{2}", "2", F),
    # relative tolerance against an exact gold
    ("100000", "100009.9", F),
    # false negatives
    ("9", "Answer $9$", T), ("5", "Result 5", T), ("34", "Final Answer: The largest $n$ is 34.", T),
    ("(p,q)=(3,2)", "(3,2)", T), ("f(x)=1", "1", T), ("|AB|=1", "1", T),
    ("14916", r"\boxed{14{,}916}", T), ("11", r"x \approx 11", T), ("x<1", "-x>-1", T),
    (r"\left[\begin{array}{cc}1&2\\3&4\end{array}\right]", r"\begin{pmatrix}1&2\\3&4\end{pmatrix}", T),
    (r"\{1,3\}", r"\{1,3,3\}", T), ("1;2", "1,2", T), ("2 or 3", "2or3", T),
]

# the rest of each class: other spellings of the same failure
CLASSES = [
    # digit groups: spaces, TeX spaces and ties join 3-digit groups; anything else is no number
    ("12345678", "12 345 678", T), ("1000", r"1\,000", T), ("10080", "10~080", T),
    ("1000", r"1\;000", T), ("1234", "12 34", F), ("408", "12 34", F), ("46", "12 34", F),
    ("1000", "The total is 1 000 dollars.", T), ("23", "2 3", F), ("6", r"$2\ 3$", F),
    # golds with several parts keep all of them
    ("x=1, y=2", "2", F), ("3 and 4", "4", F), ("1, 2, 3", "3", F), ("$1$, $2$ or $3$", "1, 2, 3", T),
    (r"x=2 \text{ or } x=3", "3", F), ("2 or 3 or 5", "5, 3, 2", T),
    # two different boxes are a hedge: never correct against one value; the same box twice is
    (r"\boxed{3}", r"$\boxed{1}$, $\boxed{3}$", F), ("3", r"\boxed{3} \text{ or } \boxed{4}", F),
    ("3", r"We get \boxed{3}. Double-checking: \boxed{3}.", T),
    ("3", r"\boxed{3}, i.e. \boxed{\dfrac{6}{2}}", T), ("1, 3", r"\boxed{1} or \boxed{3}", T),
    ("3", r"so \boxed{1 \text{ or } 3}", F),
    # decimals against exact numbers: the exact value rounded at the precision written, to at
    # least 6 places (or finer than rel_tol of the value)
    ("100000", "100000.4", F), ("100000", "1.00001e5", F), ("100000", "100000.0", T),
    (r"\frac{1}{3}", "0.333333", T), (r"\frac{2}{3}", "0.666667", T), (r"\frac{2}{3}", "0.666666", F),
    (r"\frac{1}{3}", "0.333", F), (r"\frac{1}{3}", "0.3", F), ("2.5", "2.50", T), ("0.25", "0.3", F),
    ("0.3", r"\frac{1}{3}", F), ("0.333333", r"\frac{1}{3}", T), ("123456789", "123456789.4", F),
    (r"\frac{1}{7}", "0.14285714", T), (r"\frac{1}{7}", "0.14285715", F),
    # a leading word or phrase is not part of the answer
    ("12", "Total 12", T), ("12", "Answer: 12", T), ("3", "Solution: $x = 3$", T),
    ("7", "Final answer: 7", T), ("7", "FINAL ANSWER: $7$", T), ("7", "Result: 8", F),
    # gold equations whose left side is not a bare variable
    ("(x, y) = (1, 2)", "(1,2)", T), ("g(x) = 3x", "3x", T), ("|z| = 5", "5", T), ("f(x)=1", "2", F),
    ("(p,q)=(3,2)", "(2,3)", F),
    # TeX thousands separators, \approx, relations, matrices, sets, separators
    (r"14{,}916", "14916", T), ("14916", r"14{,}915", F), ("11", r"x \approx 12", F),
    (r"x \ge 2", r"2 \le x", T), ("x<1", "x<2", F), (r"x \le 1", "x<1", F),
    (r"\begin{pmatrix}1&2\\3&4\end{pmatrix}", r"\left[\begin{array}{cc}1&2\\3&5\end{array}\right]", F),
    (r"\{1,2\}", r"\{1,2,2,1\}", T), (r"\{1,2\}", r"\{1,2,3\}", F), ("1; 2; 3", "3, 2, 1", T),
    ("2 or 3", "2 and 4", F), ("1,-2", "1or-2", T),
]

# (gold, prediction, our verdict, why): where this grader and math-verify 0.9.0 differ on
# purpose (verifiers.math's docstring lists them); math-verify gives the other verdict on each
CONVENTIONS = [
    (r"2\pi", "2pi", T, "plain-text pi, as models write it"),
    (r"(2, \infty)", "(2, oo)", T, "plain-text oo (sympy's infinity)"),
    ("0.0000672", "6.72e-5", T, "e-notation"), ("120000", "1.2e5", T, "e-notation"),
    (r"\sqrt{51}", r"\sqrt51", T, "\\sqrt51 is sqrt(51) as meant, not TeX's sqrt(5)*1"),
    ("32348", r"\$32,\!348", T, "currency signs are dropped"),
    ("15", "15 cm^2", T, "plain-text units after a number are dropped"),
    ("52_8", "52_9", F, "a base subscript is part of the numeral (math-verify drops it)"),
    (r"(-\infty, 0]", r"[-\infty, 0]", F, "an interval is never closed at infinity"),
    ("5", r"I got $\boxed{3}$, then $\boxed{5}$.", F, "two different boxes are a hedge"),
    ("284", "<think>\nLet me compute. The answer should be 284", F,
     "an unclosed <think> (a cut-off output) holds no final answer"),
    ("p - q", "Adding the cases gives the total.\nFinal Answer: p - q", T,
     "a bare answer after 'Final Answer:' is read without $...$"),
]
# fmt: on


@pytest.mark.parametrize("gold, prediction, expected", REPRODUCTIONS + CLASSES)
def test_issue_18(gold: str, prediction: str, expected: bool) -> None:
    verdict = verify(gold, prediction)
    assert verdict.correct is expected, verdict


@pytest.mark.parametrize("gold, prediction, ours, why", CONVENTIONS)
def test_conventions_differ_from_math_verify_on_purpose(gold, prediction, ours, why) -> None:
    assert verify(gold, prediction).correct is ours, why
    pytest.importorskip("math_verify")
    from reports.grader.corpus import reference_verdict

    assert reference_verdict(gold, prediction) is not ours, f"math-verify agrees now: {why}"


def test_a_gold_decimal_stands_for_itself_both_ways() -> None:
    """The decimal rule is symmetric: exact 1/3 and 0.333333 match whichever is the gold."""
    pairs = [(r"\frac{1}{3}", "0.333333"), ("100000", "100009.9"), (r"\frac{2}{3}", "0.67")]
    for a, b in pairs:
        assert verify(a, b).correct == verify(b, a).correct, (a, b)
