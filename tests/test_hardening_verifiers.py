r"""Fuzzing the verifiers (issue 9, item 2) with hypothesis.

- Random LaTeX-ish, numeric and arbitrary Unicode strings: `extract_answer`, `normalize`,
  `verify` and `check_step` never raise and return the documented types; what bounds their
  time on any machine: `verify` makes at most one sympy worker call, killed at its own
  timeout, and the in-process functions none (the in-process speed is timed by
  `python -m reports.bench.grader`).
- Equivalence is reflexive on what it accepts (an answer it finds verifies against itself,
  bare or boxed in a solution) and symmetric.
- Against an independent reference: random rationals written in random forms (\frac, \dfrac,
  a/b, decimals, thousands separators, $...$, \boxed{}, "The answer is", "####", signs,
  roots) verify exactly when the Fraction values agree (a decimal against an exact value:
  when it is that value rounded at the places written, finely enough, as the module
  documents), in both argument orders.
"""

from __future__ import annotations

import re
from fractions import Fraction

import pytest
from helpers import worker_calls
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from verifiers.math import MAX_ANSWER_CHARS, Verdict, extract_answer, normalize, verify
from verifiers.steps import StepVerdict, check_step

TIMEOUT = 1.0
REL_TOL = 1e-4

TOKENS = [*"0123456789", *"+-*/^_=()[]{},.%$!<> ", "x", "y", "i", "e", "a", "b", "\n",
          r"\frac", r"\dfrac", r"\tfrac", r"\sqrt", r"\boxed{", r"\pi", r"\infty", r"\cdot",
          r"\times", r"\pm", r"\left(", r"\right)", r"\text{", r"\mbox{ cm}", r"\circ",
          r"\begin{pmatrix}", r"\end{pmatrix}", "&", r"\\", r"\cup", r"\le", r"\ge", r"\%",
          r"\$", r"\!", r"\,", "The answer is ", "Final answer: ", "#### ", "**", "<<", ">>",
          "1,000", "0.5", "-", "^{", "}"]
latexish = st.lists(st.sampled_from(TOKENS), max_size=30).map("".join)
numeric = st.one_of(
    st.integers(-10**30, 10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.decimals(allow_nan=False, allow_infinity=False, places=6).map(str),
    st.fractions(max_denominator=10**6).map(str),
    st.tuples(st.integers(-999, 999), st.integers(1, 999)).map(
        lambda t: rf"\frac{{{t[0]}}}{{{t[1]}}}"),
)
anything = st.one_of(latexish, numeric, st.text(max_size=60))


WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}")  # a word, not a LaTeX command


def bounded_verify(gold: str, prediction: str) -> Verdict:
    """verify, which must make at most one sympy worker call, under this call's timeout (with
    no options, a choice answer compares one text at most)."""
    with worker_calls() as calls:
        verdict = verify(gold, prediction, timeout=TIMEOUT, rel_tol=REL_TOL)
    assert calls in ([], [TIMEOUT]), (gold, prediction, calls, verdict)
    assert isinstance(verdict, Verdict) and isinstance(verdict.correct, bool)
    assert verdict.reason, verdict
    return verdict


@pytest.fixture(scope="module", autouse=True)
def warm_worker():
    """The first sympy call starts the worker pool; that start-up is no call's timeout."""
    assert verify("x^2+1", "1+x^2").correct


def in_process(fn, text):
    """fn(text), which must call no sympy worker: extraction, normalisation and the step
    checker run in this process."""
    with worker_calls() as calls:
        out = fn(text)
    assert calls == [], (fn.__name__, text, calls)
    return out


def never_raises(text: str, other: str) -> None:
    answer = in_process(extract_answer, text)
    assert answer is None or isinstance(answer, str)
    assert isinstance(in_process(normalize, text), str)
    step = in_process(check_step, text)
    assert isinstance(step, StepVerdict) and step.status in ("correct", "wrong", "none")
    bounded_verify(text, other)
    bounded_verify(other, text)


def reflexive(text: str) -> None:
    verdict = bounded_verify(text, text)
    answer = extract_answer(text)
    if verdict.gold_parsed and verdict.pred_parsed:
        assert verdict.correct, verdict  # found, and not empty once normalised: equals itself
    if answer is not None and answer.strip() and len(answer) <= MAX_ANSWER_CHARS:
        boxed = rf"So we get $\boxed{{{answer}}}$."
        # the box held it whole; no word in it ("1The", "0+The"): as a gold a word is dropped
        # as prose, in a box read as a product of symbols (a known gap)
        if extract_answer(boxed) == answer.strip() and not WORD.search(answer):
            v = bounded_verify(answer, boxed)
            # an answer that normalises to nothing (a lone "\circ") is reported empty, not wrong
            assert v.correct or not v.pred_parsed or "timed out" in v.reason, (answer, v)


def symmetric(a: str, b: str) -> None:
    forward, backward = bounded_verify(a, b), bounded_verify(b, a)
    if "timed out" not in forward.reason + backward.reason:
        assert forward.correct == backward.correct, (a, b, forward, backward)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(text=anything, other=anything)
def test_random_strings_never_raise_and_call_sympy_at_most_once(text, other):
    never_raises(text, other)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(text=st.one_of(latexish, numeric))
def test_equivalence_is_reflexive_on_what_it_accepts(text):
    reflexive(text)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(a=st.one_of(latexish, numeric), b=st.one_of(latexish, numeric))
def test_equivalence_is_symmetric(a, b):
    symmetric(a, b)


# -- an independent reference: Fraction values written in random forms -------------------------
def _decimal(value: Fraction) -> str | None:
    """value as an exact decimal string, if it terminates within 6 places."""
    scaled = value * 10**6
    if scaled.denominator != 1:
        return None
    sign, digits = "-" if scaled < 0 else "", str(abs(scaled.numerator)).rjust(7, "0")
    whole, frac = digits[:-6], digits[-6:].rstrip("0")
    return f"{sign}{whole}.{frac}" if frac else f"{sign}{whole}"


def _thousands(n: int) -> str:
    return f"{n:,}"


@st.composite
def written(draw, value: Fraction) -> tuple[str, bool]:
    """(value in a random surface form, whether that form is a decimal)."""
    p, q = value.numerator, value.denominator
    forms: list[tuple[str, bool]] = [(rf"\frac{{{p}}}{{{q}}}", False),
                                     (rf"\dfrac{{{p}}}{{{q}}}", False), (f"{p}/{q}", False)]
    if p < 0:
        forms.append((rf"-\frac{{{-p}}}{{{q}}}", False))
    k = draw(st.integers(2, 5))  # an unreduced fraction
    forms.append((rf"\frac{{{p * k}}}{{{q * k}}}", False))
    if q == 1:
        forms += [(str(p), False), (_thousands(p), False), (f"{p}.0", True)]
    decimal = _decimal(value)
    if decimal is not None and q != 1:
        forms.append((decimal, True))
    text, is_decimal = draw(st.sampled_from(forms))
    wrap = draw(st.sampled_from(["{}", "${}$", r"\boxed{{{}}}", r"The answer is ${}$.",
                                 "So the total is\n#### {}", r"Thus $x = \boxed{{{}}}$",
                                 "{} "]))
    if "####" in wrap and not is_decimal and "\\" in text:
        wrap = "{}"  # GSM8K answers are plain numbers
    return wrap.format(text), is_decimal


values = st.fractions(min_value=-5000, max_value=5000, max_denominator=12)


def expected_equal(x: Fraction, a: str, a_decimal: bool, y: Fraction, b: str, b_decimal: bool) -> bool:
    """Exact values are equal when equal; a decimal against an exact value when it is that value
    rounded at the places written, to 6 places or finer than REL_TOL of it (verifiers.math)."""
    if x == y or a_decimal == b_decimal:
        return x == y
    text, exact = (a, y) if a_decimal else (b, x)
    places = len(re.search(r"\.(\d*)", text).group(1)) if "." in text else 0  # type: ignore[union-attr]
    half_unit = Fraction(1, 2) / 10**places
    return abs(x - y) <= half_unit <= max(Fraction(1, 2 * 10**6), Fraction(REL_TOL) * abs(exact))


@settings(max_examples=120, deadline=None, derandomize=True)
@given(data=st.data(), x=values, same=st.booleans(), y=values)
def test_rationals_in_random_forms_match_the_fraction_reference(data, x, same, y):
    y = x if same else y
    a, a_decimal = data.draw(written(x))
    b, b_decimal = data.draw(written(y))
    expected = expected_equal(x, a, a_decimal, y, b, b_decimal)
    forward, backward = bounded_verify(a, b), bounded_verify(b, a)
    assert forward.correct == backward.correct == expected, (a, b, forward, backward)


@st.composite
def root_pairs(draw) -> tuple[str, str, bool]:
    r"""k\sqrt{m} against \sqrt{k^2 m} (equal) or \sqrt{k^2 m + 1} (not), m square-free."""
    k, m = draw(st.integers(2, 9)), draw(st.sampled_from([2, 3, 5, 6, 7, 10, 11, 13]))
    equal = draw(st.booleans())
    inside = k * k * m + (0 if equal else 1)
    assume(int(inside**0.5) ** 2 != inside)
    return rf"{k}\sqrt{{{m}}}", rf"\sqrt{{{inside}}}", equal


@settings(max_examples=40, deadline=None, derandomize=True)
@given(pair=root_pairs())
def test_roots_match_the_reference(pair):
    a, b, equal = pair
    assert bounded_verify(a, b).correct == bounded_verify(b, a).correct == equal, pair


# -- many examples, for the slow suite ------------------------------------------------------------
@pytest.mark.slow
@settings(max_examples=3000, deadline=None, derandomize=True)
@given(text=anything, other=anything, a=st.one_of(latexish, numeric))
def test_fuzz_many_examples(text, other, a):
    never_raises(text, other)
    reflexive(text)
    symmetric(a, other)
