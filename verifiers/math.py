r"""Math answer checking: `extract_answer`, `normalize` and `verify`.

    >>> verify(r"\frac{3}{4}", r"Let's compute... so the answer is $\boxed{\frac{3}{4}}$.").correct
    True

Conventions (MATH-style grading; each is tested in tests/test_verifiers_math.py):
- Percent: the % sign is dropped, as MATH's graders do, so "10%" == "10" and "10%" != "0.1".
- Degrees: "^\circ" is dropped ("90^\circ" == "90"); radians are not converted to degrees.
- Decimals: when either side is written as a decimal, numbers match within `rel_tol`
  (relative), so 2/3 == 0.6666667 but 2/3 != 0.67; two exact answers must be exactly equal
  (100000 != 100001), symbolic ones up to simplification ("2\sqrt2" == "\sqrt8").
- Brackets are meaningful: "(1,2)" (open interval or tuple) != "[1,2]"; "{...}" sets and bare
  lists "3, 5, 7" compare as unordered; "1 \pm \sqrt2" is the list of both values.
- Equations: a gold value accepts "x = 3"; a gold "x = 5" accepts a bare 5; two equations
  match when one is a non-zero multiple of the other.
- Units, "\text{...}", "$", "\!" and friends are ignored; text answers compare case- and
  space-insensitively; "(C)", "\text{(C)}" and "C" are the same choice; "52_8" accepts "52".
- Mixed numbers: "1\frac{4}{5}" is 9/5 (MATH convention), not 1 * 4/5.

Nothing here raises on model output: bad input gives `Verdict(correct=False, reason=...)`.
Comparisons that need sympy run in a worker process that is killed after `timeout` seconds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from verifiers._arith import eval_rational
from verifiers._extract import answer_of
from verifiers._latex import is_text, to_plain

MAX_ANSWER_CHARS = 1000  # a longer "answer" is not an answer; refuse it rather than parse it
_MAX_NORMALIZE_CHARS = 5000


@dataclass(frozen=True)
class Verdict:
    correct: bool
    reason: str
    gold_parsed: str | None  # normalised gold answer (None when none was found)
    pred_parsed: str | None  # normalised predicted answer


_BOX = re.compile(r"\\(?:boxed|fbox|framebox)\b")
_PHRASE = re.compile(
    r"(?:final\s+answer|the\s+answer|\banswer)\s*(?:is\b\s*:?|:|=)(?:\s*\*\*)?", re.I
)
_GSM8K = re.compile(r"#{4,}\s*([^\n#]*)")  # "#### #### 0" and "#### 0 ####" hold "0"
_NUMBER = re.compile(r"(?:(?<![\w)])-)?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+)?")


def extract_answer(text: str) -> str | None:
    """The final answer of a solution, or None (see verifiers._extract for the order read).

    Boxes that disagree come back as one list ("\\boxed{1} or \\boxed{3}" -> "1, 3"), so a
    hedge is never taken for its last box; a text of words alone gives None.
    """
    try:
        return answer_of(str(text), words=False)
    except Exception:  # never raise on model output
        return None


def normalize(answer: str) -> str:
    """Canonical string of an extracted answer, for grouping answers in majority voting.

    "1,000" -> "1000", "\\dfrac{1}{2}" / "\\frac12" / "1/2" -> "1/2", "3\\sqrt{13}" ->
    "3*sqrt(13)", "\\text{Evelyn}" -> "evelyn", "90^\\circ" -> "90". Equal strings mean equal
    answers; different strings may still be equivalent ("0.5" vs "1/2"): that is `verify`'s job.
    """
    try:
        text = str(answer).strip()
        if len(text) > _MAX_NORMALIZE_CHARS:
            return " ".join(text.split())
        return to_plain(text)
    except Exception:  # RecursionError on absurd nesting, or a bug: still never raise
        return " ".join(str(answer).split())


def verify(gold: str, prediction: str, *, timeout: float = 2.0, rel_tol: float = 1e-6) -> Verdict:
    """Whether `prediction` (a full solution or a bare answer) matches the `gold` answer.

    Plain numbers are compared in-process; anything needing sympy goes to a worker process
    that is killed after `timeout` seconds (the first such call in a process also waits about
    a second for the worker to start). `rel_tol` applies only when a side is a decimal.
    """
    try:
        return _verify(str(gold), str(prediction), timeout, rel_tol)
    except Exception as exc:
        return Verdict(False, f"internal error ({type(exc).__name__})", None, None)


def _verify(gold: str, prediction: str, timeout: float, rel_tol: float) -> Verdict:
    g_raw, p_raw = answer_of(gold), answer_of(prediction)
    if g_raw is None:
        return Verdict(False, "no answer found in gold", None, None)
    if p_raw is None:
        return Verdict(False, "no answer found in prediction", normalize(g_raw), None)
    for name, raw in (("gold", g_raw), ("prediction", p_raw)):
        if len(raw) > MAX_ANSWER_CHARS:
            return Verdict(False, f"{name} answer too long ({len(raw)} characters)", None, None)
    g, p = normalize(g_raw), normalize(p_raw)
    if not g or not p:
        return Verdict(False, f"empty {'gold' if not g else 'predicted'} answer", g, p)

    def verdict(correct: bool, reason: str) -> Verdict:
        return Verdict(correct, reason, g, p)

    if g == p:
        return verdict(True, "identical after normalisation")
    for name, plain in (("gold", g), ("prediction", p)):
        if _SIDE_BY_SIDE.search(plain):  # "2 3": not 6, not 23, not an answer
            return verdict(False, f"{name} has two numbers side by side")
    if is_text(g) or is_text(p):
        return verdict(False, "different text answers")
    if re.fullmatch(r"[A-E]", g) or re.fullmatch(r"[A-E]", p):
        return verdict(False, "different multiple-choice answers")
    x, y = _rational(g), _rational(p)
    if x is not None and y is not None:  # fast path: plain numbers need no sympy, no worker
        return verdict(*_numbers_equal(x, y, g_raw, p_raw, rel_tol))
    if _NUMERAL.fullmatch(g) or _NUMERAL.fullmatch(p):  # "52_8": math-verify drops the base
        return verdict(*_numerals_equal(g, p))
    if bool(_CLOSED_AT_INFINITY.search(p)) != bool(_CLOSED_AT_INFINITY.search(g)):
        return verdict(False, "an interval is never closed at infinity")
    from verifiers._pool import pool  # lazy: importing verifiers.math starts no process

    correct, reason = pool().run((g_raw, p_raw), timeout)
    return verdict(correct, reason)


_NUMERAL = re.compile(r"(\d+)_(\w+)")  # a numeral with its base as a subscript (plain form)
_CLOSED_AT_INFINITY = re.compile(r"\[-?oo\b|\boo\]")


def _numerals_equal(g: str, p: str) -> tuple[bool, str]:
    """ "52_8" accepts "52_8" and "52" (the base is the question's), nothing else."""
    a, b = _NUMERAL.fullmatch(g), _NUMERAL.fullmatch(p)
    digits = [m.group(1) if m else s for m, s in ((a, g), (b, p))]
    bases = {m.group(2) for m in (a, b) if m}
    if digits[0] == digits[1] and len(bases) == 1:
        return True, "same digits in the given base"
    return False, "different numeral"


_SIX_PLACES = Fraction(1, 2 * 10**6)  # half a unit in the 6th decimal place, as math-verify rounds
_SIDE_BY_SIDE = re.compile(r"[\d.] +[\d.]")
# a decimal as `to_plain(fold=False)` writes it: "-0.33333", "6.72*10**(-5)"
_DECIMAL = re.compile(r"-?\d*\.(\d+)(?:\*10\*\*\(?([+-]?\d+)\)?)?")


def _numbers_equal(
    x: Fraction, y: Fraction, g_raw: str, p_raw: str, rel_tol: float
) -> tuple[bool, str]:
    """Plain numbers are equal exactly, except a decimal against an exact number (either way
    round): it must be that number rounded at the precision the decimal is written to, and
    that precision must be 6 decimal places or finer than `rel_tol` of the value (what stands
    for 1/3 is 0.333333, not 0.333; 100009.9 does not stand for 100000)."""
    if x == y:
        return True, "equal numbers"
    for a, b, pct in ((x, y, "%" in p_raw), (y, x, "%" in g_raw)):
        if pct and b / 100 == a:  # "10%" is 10 and is also 0.1 (as math-verify reads it)
            return True, "equal as a percentage"
    g_dec, p_dec = (_DECIMAL.fullmatch(to_plain(raw, fold=False)) for raw in (g_raw, p_raw))
    if bool(g_dec) == bool(p_dec):
        return False, "different numbers"
    decimal, exact = (p_dec, x) if p_dec else (g_dec, y)
    assert decimal is not None
    places = len(decimal.group(1)) - int(decimal.group(2) or 0)
    half_unit = Fraction(1, 2) / Fraction(10) ** places
    if abs(x - y) > half_unit:
        return False, "different numbers (the decimal is not the other rounded)"
    if half_unit > max(_SIX_PLACES, Fraction(rel_tol) * abs(exact)):
        return False, "the decimal is too coarse to stand for the exact number (under 6 places)"
    return True, "the decimal is the exact number rounded at the precision written"


def _rational(plain: str) -> Fraction | None:
    """Value of a purely numeric answer ("3/2", "0.25", "2**10"), computed without sympy."""
    return eval_rational(plain) if re.fullmatch(r"[\d.+\-*/()]+", plain) else None
