r"""Part (b) of the grader corpus (reports/grader/corpus.py): answers written as models write them.

`style_rows()`: hand-written styles applied to MATH-500 golds, each style to the golds it fits
(a style picks about one gold in `EVERY`, keyed by the problem id, so the set is stable).
`sample_rows()`: real outputs of the embedded reasoner and SmolLM2 (tests/data/grader_samples.jsonl,
written by `python -m reports.grader.samples`), each with the verdict a person gave it.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

from reports.grader.corpus_rows import TESTS_DATA, Row, last_digit

SAMPLES = TESTS_DATA / "grader_samples.jsonl"
EVERY = 6  # a style that fits more than COMMON golds is applied to about 1 in EVERY of them
COMMON = 60

Style = Callable[[str], "tuple[str, bool] | None"]  # gold -> (prediction, expected) or None


def _wrong(a: str) -> str | None:
    return last_digit(a)


def _frac(a: str) -> Fraction | None:
    m = re.fullmatch(r"(-?)\\[dt]?frac\{(\d+)\}\{(\d+)\}", a.strip())
    if not m or int(m.group(3)) == 0:
        return None
    value = Fraction(int(m.group(2)), int(m.group(3)))
    return -value if m.group(1) else value


def _decimal(value: Fraction, places: int) -> str:
    scaled = abs(value) * 10**places
    digits = str(int(scaled + Fraction(1, 2))).rjust(places + 1, "0")  # round half up
    return ("-" if value < 0 else "") + digits[:-places] + "." + digits[-places:]


def _items(a: str) -> list[str] | None:
    """The items of a top-level list or set gold ("1, 3", "\\{1,3\\}"), else None."""
    s = a.strip()
    inner = s[2:-2] if s.startswith("\\{") and s.endswith("\\}") else s
    if s[:1] in "([" or "\\begin" in s or "=" in s or re.search(r"\d,(\\!)?\s*\d{3}", s):
        return None  # a tuple, a matrix, an equation or a number with thousands separators
    parts, depth, start = [], 0, 0
    for k, c in enumerate(inner):
        depth += (c in "([{") - (c in ")]}")
        if c == "," and depth == 0:
            parts.append(inner[start:k].strip())
            start = k + 1
    parts.append(inner[start:].strip())
    return parts if len(parts) > 1 and all(parts) else None


NUMBER = re.compile(r"-?\d+")


def _decimal_style(places: int, expected: bool) -> Style:
    def make(a: str) -> tuple[str, bool] | None:
        value = _frac(a)
        if value is None or (value * 10**places).denominator == 1:  # exact at that precision
            return None
        return f"$\\boxed{{{_decimal(value, places)}}}$", expected

    return make


def _dfrac(a: str) -> str:
    return a.replace("\\frac", "\\dfrac")


def _array(a: str) -> str:
    columns = a.split("\\\\")[0].count("&") + 1
    body = a.replace("\\begin{pmatrix}", "\\left[\\begin{array}{" + "c" * columns + "}")
    return "$" + body.replace("\\end{pmatrix}", "\\end{array}\\right]") + "$"


STYLES: dict[str, Style] = {
    # the answer as the last line models give it
    "final-answer-line": lambda a: (f"Adding the cases gives the total.\nFinal Answer: {a}", True),
    "display-box": lambda a: (f"Hence\n\\[ \\boxed{{{a}}} \\]", True),
    "bold-answer": lambda a: (f"**Answer:** ${a}$", True),
    "answer-is-bare": lambda a: (f"After simplifying, the answer is {a}", True),
    "answer-then-reason": lambda a: (f"The answer is ${a}$ because both cases give it.", True),
    "bare-then-reason": lambda a: (f"So the answer is {a} since the cases agree.", True)
    if NUMBER.fullmatch(a) else None,
    "dfrac": lambda a: (f"$\\boxed{{{_dfrac(a)}}}$", True) if "\\frac" in a else None,
    # reasoning blocks: only what follows </think> is the answer
    "think-then-box": lambda a: (f"<think>\nMaybe it is {_wrong(a)}? No, recheck.\n</think>\n"
                                 f"The answer is $\\boxed{{{a}}}$.", True) if _wrong(a) else None,
    "think-box-then-wrong": lambda a: (f"<think>\nIt is $\\boxed{{{a}}}$.\n</think>\n"
                                       f"So $\\boxed{{{_wrong(a)}}}$.", False) if _wrong(a) else None,
    "think-unclosed": lambda a: (f"<think>\nLet me compute. The answer should be {a}", False),
    # several boxes: the same value repeated is one answer; different values are a hedge
    "repeated-box": lambda a: (f"We find $\\boxed{{{a}}}$. Checking again, $\\boxed{{{a}}}$.", True),
    "hedged-boxes": lambda a: (f"The answer is $\\boxed{{{a}}}$ or $\\boxed{{{_wrong(a)}}}$.", False)
    if _wrong(a) else None,
    # a correction between them makes the later box the answer
    "changed-mind-boxes": lambda a: (f"First I got $\\boxed{{{_wrong(a)}}}$, but after checking, "
                                     f"the final answer is $\\boxed{{{a}}}$.", True) if _wrong(a) else None,
    # equations and approximations around a number
    "equation": lambda a: (f"Solving, we get $x = {a}$.", True) if NUMBER.fullmatch(a) else None,
    "approx": lambda a: (f"The result is $x \\approx {a}$.", True) if NUMBER.fullmatch(a) else None,
    "trailing-zero": lambda a: (f"$\\boxed{{{a}.0}}$", True) if NUMBER.fullmatch(a) else None,
    "wrong-equation": lambda a: (f"so $x = {int(a) + 2}$", False) if NUMBER.fullmatch(a) else None,
    # decimals against exact fractions: right to 6 places passes; too coarse does not
    "decimal-6": _decimal_style(6, True),
    "decimal-2": _decimal_style(2, False),
    # sets and lists: any order, repeats allowed; a missing item is wrong
    "set-reversed": lambda a: (f"$\\boxed{{{', '.join(reversed(_items(a) or []))}}}$", True)
    if _items(a) else None,
    "set-missing": lambda a: (f"$\\boxed{{{', '.join((_items(a) or [])[1:])}}}$", False)
    if _items(a) else None,
    "set-words": lambda a: (" and ".join(f"${x}$" for x in (_items(a) or [])), True)
    if len(_items(a) or []) == 2 else None,
    # intervals: membership notation; matrices: other environments
    "interval-in": lambda a: (f"$x \\in {a}$", True)
    if re.fullmatch(r"(\\left)?[(\[].*,.*[)\]]", a.strip()) and "\\infty" in a else None,
    "bmatrix": lambda a: (f"$\\boxed{{{a.replace('pmatrix', 'bmatrix')}}}$", True) if "pmatrix" in a else None,
    "array-matrix": lambda a: (_array(a), True) if "pmatrix" in a else None,
    # plain-text math as models also write it (this grader's conventions, see verifiers.math)
    "plain-pi": lambda a: (f"The answer is {_plain(a)}", True)
    if "\\pi" in a and "\\begin" not in a else None,
    "plain-infinity": lambda a: (f"The answer is {a.replace(chr(92) + 'infty', 'oo')}", True)
    if "\\infty" in a else None,
    "e-notation": lambda a: (f"The answer is {_scientific(int(a))}.", True)
    if re.fullmatch(r"[1-9]\d{3,}", a) else None,
}  # fmt: skip


def _plain(a: str) -> str:
    """ "\\frac{\\pi}{2}" -> "pi/2", "2\\pi" -> "2pi": LaTeX fractions and \\pi as plain text."""
    s = re.sub(r"\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}", r"(\1)/(\2)", a)
    return s.replace("\\pi", "pi").replace("\\sqrt", "sqrt").replace("{", "(").replace("}", ")")


def _scientific(n: int) -> str:
    digits = str(n).rstrip("0")
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{mantissa}e{len(str(n)) - 1}"


def style_rows(data: Path | None = None) -> list[Row]:
    import problems

    golds = [(p.id, str(p.answer)) for p in problems.load("math500", path=data)]
    rows: list[Row] = []
    for name, style in STYLES.items():
        fits = [(pid, gold, made) for pid, gold in golds if (made := style(gold)) is not None]
        if len(fits) > COMMON:  # a style most golds fit: about one in EVERY of them
            fits = [f for f in fits if zlib.crc32(f"{f[0]}|{name}".encode()) % EVERY == 0]
        rows += [Row(f"{pid}|style:{name}", gold, made[0], made[1], f"style:{name}")
                 for pid, gold, made in fits]
    return rows


def sample_rows(data: Path | None = None) -> list[Row]:
    """Sampled model outputs; the gold is the problem's (embedded generators or ../shared/data)."""
    if not SAMPLES.exists():
        return []
    samples = [json.loads(line) for line in SAMPLES.read_text().splitlines() if line.strip()]
    samples = [s for s in samples if s["expected"] is not None]  # labelled by a person only
    golds = _golds({s["problem"] for s in samples}, data)
    return [Row(s["id"], golds[s["problem"]] if s.get("gold") is None else s["gold"], s["text"],
                s["expected"], f"sample:{s['model']}") for s in samples
            if s.get("gold") is not None or s["problem"] in golds]


def _golds(ids: set[str], data: Path | None) -> dict[str, str]:
    import problems

    out = {}
    for name in {i.split("/", 1)[0] for i in ids} & {"math500", "gsm8k", "aime24", "amc23"}:
        out.update({p.id: str(p.answer) for p in problems.load(name, path=data) if p.id in ids})
    return out
