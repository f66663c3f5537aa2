r"""Math answer checking: `extract_answer`, `normalize` and `verify`.

    >>> verify(r"\frac{3}{4}", r"Let's compute... so the answer is $\boxed{\frac{3}{4}}$.").correct
    True

How a verdict is reached. (1) The answer is found in each text (verifiers/_math/extract.py): the
conclusion among the boxes after the last </think>, the "final answer" / "the answer is"
phrases and GSM8K's "####" (verifiers/_math/conclusion.py), else a bare answer, else the last run
of math asserted in prose. (2) Cheap cases are decided here,
in-process: identical normal forms (`normalize`), compound quantities, text answers, choice
letters, plain numbers, numerals in a base. (3) Everything else goes to a worker process, killed after
`timeout` seconds, where math-verify's LaTeX parser (latex2sympy2-extended) reads each whole
answer and math-verify's `verify` compares them (verifiers/_math/compare.py).

Why math-verify decides equivalence. Both routes measured side by side with the same
extraction in front, by
`python -m reports.bench.grader --reference --math-verify-tests DIR`; the hand-written route
is commit 8b1ec85's verifiers/_compare.py (sympy over this project's own plain form):
                                        hand-written sympy    math-verify (this module)
  differential corpus, 11,204 rows      0 FP, 0 FN            0 FP, 0 FN
  agreement with math-verify on it      96.4%                 96.4%
  math-verify's own test tables (257)   84.0%                 96.9%
  23 reported misgradings              5 still wrong         all right
The corpus mostly tests answer extraction, which both routes share; on equivalence
(math-verify's tables: equations such as "(p,q)=(3,2)" or "|AB|=1" against a value,
relations "x<1" vs "-x>-1", sets with repeats, sets of equations) the hand-written route is
13 points behind and would have to re-implement what math-verify's maintainers keep up. It
costs more time (ANTLR parsing; each worker caches parses, since a problem's gold and its
candidates' answers repeat): docs/grader.md has the measurement.

Conventions where this grader differs from math-verify, each right for model output and
tested (tests/test_grader_reproductions.py, tests/test_grader_corpus.py,
tests/test_grader_conclusions.py):
- The answer is the text's conclusion (verifiers/_math/conclusion.py): answers in questions,
  suppositions ("If the answer is 16, ..."), quotes or after "not" are not stated; a later
  answer replaces an earlier one across a correction ("Wait, that's wrong ... \boxed{18}");
  an answer withdrawn with nothing instead ("The answer is 16. Wait, that's wrong.") is none
  (a gold is never withdrawn); two different boxes with no correction between, or a second
  value offered beside the answer ("$X$, but it could also be $Y$", "\boxed{X} (or $Y$ if
  ...)"), are a hedge (a list), never correct against one value; a closing "####" or "Final
  Answer" outranks an earlier "**Answer:**"; "I hope the answer is correct" states nothing.
- An unclosed <think> is a cut-off output with no answer; a bare answer after "Final
  Answer:" needs no $...$; "Answer $9$" and "Result 5" are 9 and 5; \framebox is a box;
  "\textbf{(C)} 12" is choice C; an unclosed "\boxed{12" falls back to the last number; no
  number is read out of LaTeX written without delimiters (the 3 of "\frac{14}{3}").
- Plain text as models write it: "pi", "oo", "sqrt(2)", "6.72e-5", "\sqrt51" (sqrt(51), as
  meant), units after a number ("15 cm^2", "9 dollars"), currency ("\$36"), digit groups
  ("1 000", "10\,080", "14{,}916"; "2 3" is no number at all); "12.5%" is 12.5 as "10%" is 10.
- Compound quantities ("5 hours and 30 minutes", "18 feet 6 inches", "16 dollars and 50
  cents") are one value: in the gold's unit when the gold names one ("330 minutes"), else in
  their own first unit (5.5), so a bare gold 330 or 5 is wrong (verifiers/_math/quantity.py).
- Numerals: a gold "52_8" accepts "52_8" and "52", never "52_9"; a gold "52" never accepts
  "52_8" (a base the gold does not name makes another number; "52_{10}" is 52). math-verify
  drops subscripts. Intervals are never closed at infinity. Two decimals are equal only when
  equal.
- Percent: "25%" is the gold 25 (the percent is the question's unit), and "10%" is also 0.1,
  but only against a gold that is no integer: "2500%" is not the gold 25 (math-verify reads
  any p% as p/100 too). A percent below one keeps its sign: "0.25%" is 0.0025, never the
  gold 0.25 (no question's 0.25 is asked as 0.25%).
- Abstention: where the conclusion is not read with confidence (a language no table reads,
  a text cut off mid-sentence, doubt around an unmarked last statement; verifiers/_math/doubt.py),
  the verdict is unread (`Verdict.unread`, its reason), never correct; `guess=True` reads
  the last statement instead, as before.
- A decimal against an exact number (either side the gold) must be that number rounded at the
  precision written, to 6 decimal places or finer than `rel_tol` of its value: 1/3 matches
  0.333333 but not 0.333 or 0.33333; 100000 does not match 100009.9. (math-verify rounds both
  sides to 6 places, so it calls 0.0000672 and 0.0000673 equal; inside tuples, sets and
  matrices its rule is the one that applies.)
- Any model's conclusion (docs/grader.md): answer markers in Chinese, French, German, Spanish,
  Portuguese, Russian, Japanese (and Italian, Korean) as in English; a check section after
  the conclusion ("Verification:", "验证：", "Vérification :") never replaces it; a refusal
  ("cannot determine", "无法确定") is no answer, its words in the verdict's reason, and is
  right only against a gold that is itself one; number words, Unicode fractions, superscripts
  and minus, NBSP / Indian / German digit groups ("1.234" alone stays 1.234), "3 1/2", units
  as letters ("60 km/h"); a choice letter matches its option's text when `options` are given
  ("(B) 27" whose text is not option B's answers nothing).
Shared with math-verify: "10%" is 10; "x=5" and 5 match either way round; a gold
equation's right side is its value ("f(x)=1" accepts 1); sets ignore order and repeats; a
gold inequality accepts its interval, but an interval gold wants an interval; "^\circ" is
dropped; "(C)", "\text{(C)}" and "C" are one choice; mixed numbers ("1\frac{4}{5}" is 9/5).

Nothing here raises on model output: bad input gives `Verdict(correct=False, reason=...)`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from verifiers._math import choice, quantity
from verifiers._math.exact import eval_rational
from verifiers._math.extract import answer_of, read
from verifiers._math.latex import is_text, to_plain
from verifiers._math.sections import abstains

MAX_ANSWER_CHARS = 1000  # a longer "answer" is not an answer; refuse it rather than parse it
_MAX_NORMALIZE_CHARS = 5000


@dataclass(frozen=True)
class Verdict:
    correct: bool
    reason: str
    gold_parsed: str | None  # normalised gold answer (None when none was found)
    pred_parsed: str | None  # normalised predicted answer
    # why the prediction's conclusion was not read with confidence (verifiers._math.doubt):
    # an abstention, never correct, counted apart from wrong answers; None when it was read
    unread: str | None = None


def extract_answer(text: str) -> str | None:
    """The final answer of a solution, or None (see verifiers._math.extract for the order read).

    Boxes that disagree come back as one list ("\\boxed{1} or \\boxed{3}" -> "1, 3"), so a
    hedge is never taken for its last box; a text of words alone gives None.
    """
    try:
        answer = answer_of(str(text), words=False)
    except Exception:  # never raise on model output
        return None
    # a bare computation "17 * 23 - 5 = 386" answers with its value: what follows its last
    # "=" when everything before is numbers and operators (not "x = 5", not a list)
    computed = _COMPUTATION.match(answer or "")
    return computed.group(1).strip() if computed else answer


def unread_reason(text: str) -> str | None:
    """Why the conclusion of a solution text is not read with confidence (a language no table
    reads, a cut-off text, doubt around an unmarked last statement), or None when it is read."""
    try:
        return read(str(text), abstain=True).unread
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


def verify(gold: str, prediction: str, *, timeout: float = 2.0, rel_tol: float = 1e-6,
           options: Mapping[str, str] | None = None, guess: bool = False) -> Verdict:
    """Whether `prediction` (a full solution or a bare answer) matches the `gold` answer (which
    may itself be a solution: its answer is found the same way).

    Plain numbers and identical forms are decided in-process; the rest goes to math-verify in
    a worker process that is killed after `timeout` seconds (the first such call in a process
    also waits a second or two for the worker to start, which the timeout does not count).
    `rel_tol`: a decimal written to fewer than 6 places still stands for an exact number when
    half a unit of its last place is within `rel_tol` of it (see `_numbers_equal`).
    `options`: a multiple-choice problem's options, {letter: text} (verifiers._math.choice
    reads them out of a problem); a letter then matches its option's text either way round.
    `guess`: where the conclusion is not read with confidence (a language no table reads, a
    cut-off text, doubt around an unmarked last statement: verifiers._math.doubt), grade the
    last statement anyway, as the grader did before it could abstain; by default such a
    prediction is `unread` (correct False, `unread` its reason).
    """
    try:
        return _verify(str(gold), str(prediction), timeout, rel_tol, dict(options or {}), guess)
    except Exception as exc:
        return Verdict(False, f"internal error ({type(exc).__name__})", None, None)


def _verify(gold: str, prediction: str, timeout: float, rel_tol: float,
            options: dict[str, str], guess: bool = True) -> Verdict:
    g_raw, reading = answer_of(gold, withdraw=False), read(prediction, abstain=not guess)
    p_raw = reading.answer
    if g_raw is None:
        return Verdict(False, "no answer found in gold", None, None)
    if reading.unread:
        return Verdict(False, f"unread: {reading.unread}", normalize(g_raw), None, reading.unread)
    if reading.abstained:
        both = abstains(g_raw)  # a gold "cannot be determined" is answered by a refusal
        return Verdict(both, f"the prediction abstains ({reading.abstained!r})"
                       + (", as the gold does" if both else ": no answer"), normalize(g_raw), None)
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

    chosen = choice.compare(g_raw, p_raw, options, lambda a, b: _verify(a, b, timeout, rel_tol, {}).correct, (g, p))
    if chosen is not None:  # "(B) 27" against "B", or against option B's text
        return verdict(*chosen)
    percent = _percent_below_one(g_raw, p_raw, g, p)
    if percent is not None:  # "0.25%" is not the gold 0.25
        return verdict(*percent)
    if g == p:
        return verdict(True, "identical after normalisation")
    compound = quantity.compare(g_raw, p_raw, gold_text=gold)  # "5 hours and 30 minutes" against 5.5 or 330 minutes
    if compound is not None:
        return verdict(*compound)
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
    from verifiers._math.pool import pool  # lazy: importing verifiers.math starts no process

    correct, reason = pool().run((g_raw, p_raw), timeout)
    return verdict(correct, reason)


def worker_startup_seconds() -> float:
    """Seconds this process has waited so far for verify's sympy workers to start (a
    benchmark reports it apart from the grading itself)."""
    from verifiers._math.pool import pool

    return pool().startup_wait


_COMPUTATION = re.compile(r"^\s*[-+*/×÷·^().\d\s=]*\d[-+*/×÷·^().\d\s=]*=\s*(-?[\d.,]+)\s*$")
_NUMERAL = re.compile(r"(\d+)_(\w+)")  # a numeral with its base as a subscript (plain form)
_CLOSED_AT_INFINITY = re.compile(r"\[-?oo\b|\boo\]")


def _percent_below_one(g_raw: str, p_raw: str, g: str, p: str) -> tuple[bool, str] | None:
    """A percent sign on one side only, on a number below one: "0.25%" is 0.0025, so it is
    that value or nothing (a percent question's gold is its number, "25" for "25%", but no
    question's gold of 0.25 is asked as 0.25%); None when the rule does not apply."""
    for (a_raw, a), (b_raw, b) in (((p_raw, p), (g_raw, g)), ((g_raw, g), (p_raw, p))):
        if "%" not in a_raw or "%" in b_raw:
            continue
        x, y = _rational(a), _rational(b)
        if x is not None and y is not None and 0 < abs(x) < 1:
            if x / 100 == y:
                return True, "equal as a percentage"
            return False, "a percent below one is not the number without its sign"
    return None


def _numerals_equal(g: str, p: str) -> tuple[bool, str]:
    """A gold "52_8" accepts "52_8" and "52" (the base is the question's), nothing else; a gold
    "52" does not accept "52_8" (a base the gold does not name makes another number)."""
    a, b = _NUMERAL.fullmatch(g), _NUMERAL.fullmatch(p)
    if b and not a and b.group(2) != "10":  # 52_{10} is 52
        return False, "the prediction names a base the gold does not"
    digits = [m.group(1) if m else s for m, s in ((a, g), (b, p))]
    bases = {m.group(2) for m in (a, b) if m}
    if digits[0] == digits[1] and (len(bases) == 1 or bases == {"10"} and not a):
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
        # "10%" is 10 and is also 0.1 (as math-verify reads it), but only against a number
        # that is no integer: against 25 (a percent question's gold), "2500%" is not 25
        if pct and b / 100 == a and a.denominator != 1:
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
