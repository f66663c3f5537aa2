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

from verifiers._arith import eval_rational
from verifiers._latex import is_text, matching_brace, to_plain

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
    """The final answer of a solution, or None.

    In order: the last \\boxed{...} / \\fbox{...} (nested braces allowed), else the last
    "The answer is X" / "Final answer: X", else GSM8K's "#### X", else the last number.
    """
    try:
        return _extract_marked(text) or _last_number(text)
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


def verify(gold: str, prediction: str, *, timeout: float = 2.0, rel_tol: float = 1e-4) -> Verdict:
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
    g_raw, p_raw = _answer_of(gold), _answer_of(prediction)
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
    if is_text(g) or is_text(p):
        return verdict(False, "different text answers")
    if re.fullmatch(r"[A-E]", g) or re.fullmatch(r"[A-E]", p):
        return verdict(False, "different multiple-choice answers")
    x, y = _rational(g), _rational(p)
    if x is not None and y is not None:  # fast path: plain numbers need no sympy, no worker
        if "." not in g + p:
            return verdict(False, "different numbers")
        if abs(x - y) <= rel_tol * max(abs(x), abs(y)):
            return verdict(True, "equal within rel_tol")
        return verdict(False, "different numbers (beyond rel_tol)")
    from verifiers._pool import pool  # lazy: importing verifiers.math starts no process

    correct, reason = pool().run((g, p, rel_tol), timeout)
    return verdict(correct, reason)


def _rational(plain: str):
    """Value of a purely numeric answer ("3/2", "0.25", "2**10"), computed without sympy."""
    return eval_rational(plain) if re.fullmatch(r"[\d.+\-*/()]+", plain) else None


def _answer_of(text: str) -> str | None:
    """The answer in `text`, which is either a whole solution or already a bare answer."""
    marked = _extract_marked(text)
    if marked is not None:
        return marked
    bare = text.strip().strip("$").strip()
    # prose has words; "\begin{pmatrix}" or "\text{cm}" are not prose
    words = re.findall(r"[A-Za-z]{2,}", re.sub(r"\\[A-Za-z]+(?:\{[A-Za-z* ]*\})?", " ", bare))
    if bare and "\n" not in bare and (len(words) <= 1 or _last_number(bare) is None):
        return bare.rstrip(".")
    return _last_number(text)


def _extract_marked(text: str) -> str | None:
    boxed = _last_boxed(text)
    if boxed is not None:
        return boxed
    phrases = list(_PHRASE.finditer(text))
    if phrases:  # the rest of the line after the last "answer is"
        answer = _clean_phrase(text[phrases[-1].end() :].split("\n", 1)[0])
        if answer:
            return answer
    for mark in list(_GSM8K.finditer(text))[::-1]:  # the last marker that is followed by something
        answer = mark.group(1).strip().rstrip(".").strip()
        if answer:
            return answer
    return None


def _last_boxed(text: str) -> str | None:
    """Content of the last closed \\boxed{...}; only the last few are tried (bounded time)."""
    for m in list(_BOX.finditer(text))[-3:][::-1]:
        j = m.end()
        while j < len(text) and text[j] == " ":
            j += 1
        if j < len(text) and text[j] == "{":
            end = matching_brace(text, j)
            content = text[j + 1 : end].strip() if end > 0 else ""
        else:  # "\boxed 5"
            content = re.match(r"[^\s$]*", text[j:]).group(0)  # type: ignore[union-attr]
        content = re.sub(r"^[#\s]+", "", content)  # "\boxed{#### 5}": a GSM8K marker is not the answer
        if content:
            return content
    return None


def _clean_phrase(answer: str) -> str:
    """ "$\\frac{3}{4}$." -> "\\frac{3}{4}"; "42 apples. Done" -> "42 apples"."""
    answer = answer.replace("\\$", "").strip()  # an escaped dollar is currency, not math mode
    answer = re.sub(r"^[#\s]+", "", answer)  # "The answer is #### 5": the GSM8K marker is not part of it
    math = re.match(r"\$+([^$]+)\$+|\\\((.+?)\\\)|\\\[(.+?)\\\]", answer)
    if math:
        return next(g for g in math.groups() if g is not None).strip()
    answer = re.split(r"\.(?:\s|$)|\*\*", answer)[0]
    return answer.strip().strip("$").rstrip(".").strip()


def _last_number(text: str) -> str | None:
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else None
