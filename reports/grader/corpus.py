r"""The math grader's differential corpus: (gold, prediction, expected) rows built by this project.

    rows = build()                       # list[Row], deterministic, read from ../shared/data
    python -m reports.grader.corpus record   # math-verify's verdicts -> tests/data (a minute)

Rows (ids are stable: "<problem id>|<kind>"; no benchmark text is stored in the repository,
every row is rebuilt from the data files at run time):
  (a) every gold of MATH-500, AIME-24, AMC-23 and GSM8K against its own boxed form, a prose
      form and its reference solution (expected correct), and against perturbations: its last
      digit, its sign, one bracket, a wrong digit grouping (expected wrong), and the same value
      with other digit grouping, units or a base subscript (expected correct);
  (b) answers written the ways models write them: hand-written styles over the MATH-500 golds
      (reports/grader/styles.py: "Final Answer:", "\[ \boxed{} \]", <think> blocks, repeated
      and hedged boxes, equations, intervals, matrices, sets, decimals) and outputs sampled
      from the embedded reasoner and SmolLM2 (tests/data/grader_samples.jsonl, made and
      labelled as `python -m reports.grader.samples` describes);
  (c) how models conclude (reports/grader/families.py): answers after adverbs,
      hedges, suppositions, questions, quotes, negations, corrections, withdrawn answers,
      closing markers after headings, "I hope the answer is correct", base subscripts and
      percents the gold does not have, compound quantities, over MATH-500 and GSM8K golds.
`expected` comes from how a row was built, never from a grader.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import zlib
from collections.abc import Callable, Iterable
from dataclasses import asdict
from pathlib import Path

from reports.grader.corpus_rows import TESTS_DATA, Row, last_digit, pick
from reports.grader.families import family_rows
from reports.grader.styles import sample_rows, style_rows

RECORD = TESTS_DATA / "grader_corpus_math_verify.jsonl"
DATASETS = ("math500", "aime24", "amc23", "gsm8k")


# -- (a) golds against their own forms and against perturbations ----------------------------------

BOXED = [
    lambda a: f"Putting it together, the answer is $\\boxed{{{a}}}$.",
    lambda a: f"Therefore\n\\[\n\\boxed{{{a}}}\n\\]",
    lambda a: f"We get $\\boxed{{{a}}}$",
    lambda a: f"**Final Answer**\n\\[ \\boxed{{{a}}} \\]",
]
PROSE = [
    lambda a: f"So the answer is ${a}$.",
    lambda a: f"Final Answer: The final answer is ${a}$. I hope it is correct.",
    lambda a: f"The answer is: ${a}$",
    lambda a: f"Answer: ${a}$",
]


def _own_forms(pid: str, gold: str, solution: str | None) -> Iterable[Row]:
    yield Row(f"{pid}|boxed", gold, pick(pid + "b", BOXED)(gold), True, "boxed")  # type: ignore[operator]
    yield Row(f"{pid}|prose", gold, pick(pid + "p", PROSE)(gold), True, "prose")  # type: ignore[operator]
    if solution:
        yield Row(f"{pid}|solution", gold, solution, True, "solution")


def _sign(gold: str) -> str | None:
    """The sign flipped; None for answers whose negation is no different or is not an answer
    (zero, \\pm, text, tuples, sets, intervals, matrices, equations with several sides)."""
    s = gold.strip()
    if re.fullmatch(r"-?0*(\.0*)?", s) or re.search(r"\\[pm]m|\\text|\\begin|[(\[{]|=|,|<|>", s):
        return None
    if not re.search(r"\d|\\pi|[a-z]", s):
        return None
    return s[1:].lstrip() if s.startswith("-") else "-" + s


def _bracket(gold: str) -> str | None:
    """One bracket of a tuple or interval changed: "(1,2]" -> "[1,2]"."""
    s = gold.strip()
    m = re.fullmatch(r"(\\left)?([(\[])(.*?)(\\right)?([)\]])", s, re.S)
    if m and "," in m.group(3):
        opening = "[" if m.group(2) == "(" else "("
        return (m.group(1) or "") + opening + m.group(3) + (m.group(4) or "") + m.group(5)
    return None  # a set written as a tuple is a judgement call, not a plain error: not made


def _integer(gold: str) -> int | None:
    s = gold.strip().replace("\\!", "").replace(" ", "")
    if not re.fullmatch(r"-?\d{1,3}(?:,\d{3})+|-?\d+", s):  # "-2,1" is a list
        return None
    return int(s.replace(",", ""))


def _grouped(n: int, key: str) -> str:
    """n with thousands groups, written one of the ways people write them."""
    sep = pick(key, [",", " ", "{,}", "\\,", ",\\!"])
    digits = f"{abs(n):,}".replace(",", sep)  # type: ignore[str-bytes-safe]
    return ("-" if n < 0 else "") + digits


UNITS = [" \\text{ cm}", " dollars", "\\text{ meters}", " \\mbox{ inches}", "^\\circ", " apples"]


_SIMPLE_FRAC = re.compile(r"\\[dt]?frac\{(-?\d+)\}\{(\d+)\}")


def _rewrites(gold: str) -> Iterable[tuple[str, str]]:
    """(kind, the same value written another way): what equivalence, not extraction, decides."""
    s = gold.strip()
    if _SIMPLE_FRAC.search(s) and not re.search(r"\d\s*\\[dt]?frac", s):  # not 1\frac{4}{5}
        yield "frac-slash", _SIMPLE_FRAC.sub(lambda m: f"({m[1]})/({m[2]})", s)
        yield "frac-scaled", _SIMPLE_FRAC.sub(lambda m: f"\\frac{{{2 * int(m[1])}}}{{{2 * int(m[2])}}}", s)
    m = _SIMPLE_FRAC.fullmatch(s)
    if m and int(m[2]) and all(f in (2, 5) for f in _factors(int(m[2]))):
        value = int(m[1]) / int(m[2])
        yield "frac-decimal", f"{value:.10f}".rstrip("0").rstrip(".")
    root = re.fullmatch(r"(\d+)\\sqrt\{(\d+)\}", s)
    if root:
        yield "root-inside", f"\\sqrt{{{int(root[1]) ** 2 * int(root[2])}}}"
    terms = re.fullmatch(r"([^+\-{}()\[\],=]+?)\s*([+-])\s*([^+\-{}()\[\],=]+)", s)
    if terms and not re.search(r"[\^_\\]", s):  # "a + b" -> "b + a"
        first, op, second = terms.groups()
        yield "sum-swapped", f"{'-' if op == '-' else ''}{second.strip()} + {first.strip()}"
    n = _integer(gold)
    if n is not None:
        yield "integer-as-fraction", f"\\frac{{{2 * n}}}{{2}}"


def _factors(n: int) -> list[int]:
    out, k = [], 2
    while k * k <= n:
        while n % k == 0:
            out.append(k)
            n //= k
        k += 1
    return out + ([n] if n > 1 else [])


def _perturbations(pid: str, gold: str) -> Iterable[Row]:
    for kind, same in _rewrites(gold):
        yield Row(f"{pid}|{kind}", gold, _wrap(pid + kind, same), True, kind)
    for kind, make, expected in (("last-digit", last_digit, False), ("sign", _sign, False),
                                 ("bracket", _bracket, False)):
        wrong = make(gold)
        if wrong is not None and wrong != gold:
            yield Row(f"{pid}|{kind}", gold, _wrap(pid + kind, wrong), expected, kind)
    n = _integer(gold)
    if n is not None and abs(n) >= 1000:
        yield Row(f"{pid}|grouping", gold, _wrap(pid + "g", _grouped(n, pid)), True, "grouping")
    if n is not None and abs(n) >= 100:  # a space inside a group: "10 080" is no thousands group
        digits = str(abs(n))
        cut = len(digits) - 2 if len(digits) % 3 != 2 else len(digits) - 1
        bad = ("-" if n < 0 else "") + digits[:cut] + " " + digits[cut:]
        yield Row(f"{pid}|bad-grouping", gold, _wrap(pid + "bg", bad), False, "bad-grouping")
    if n is not None:
        unit = str(pick(pid + "u", UNITS))
        yield Row(f"{pid}|units", gold, _wrap(pid + "u", f"{gold}{unit}"), True, "units")
    base = re.fullmatch(r"(\d+)_\{?(\d+)\}?", gold.strip())
    if base:
        digits, b = base.groups()
        yield Row(f"{pid}|base-dropped", gold, _wrap(pid + "bd", digits), True, "base-dropped")
        other = str(int(b) + 1)
        yield Row(f"{pid}|base-changed", gold, _wrap(pid + "bc", f"{digits}_{{{other}}}"), False,
                  "base-changed")


def _wrap(key: str, answer: str) -> str:
    """A perturbed answer as a model would hand it in: bare, boxed or in a sentence."""
    form = pick(key, ["bare", "boxed", "prose"])
    if form == "bare":
        return answer
    return pick(key, BOXED if form == "boxed" else PROSE)(answer)  # type: ignore[operator]


def dataset_rows(data: Path | None = None) -> list[Row]:
    import problems

    rows: list[Row] = []
    for name in DATASETS:
        for p in problems.load(name, path=data):
            gold = str(p.answer)
            solution = p.metadata.get("solution")
            if name == "gsm8k" and solution:  # the rationale without its final line: put it back
                solution = f"{solution}\n#### {gold}"
            rows += _own_forms(p.id, gold, solution)
            # GSM8K's 1319 integer golds would drown the rest: a third of their perturbations
            rows += [r for r in _perturbations(p.id, gold)
                     if name != "gsm8k" or zlib.crc32(r.id.encode()) % 3 == 0]
    return rows


# -- the whole corpus -----------------------------------------------------------------------------


def build(data: Path | None = None) -> list[Row]:
    rows = dataset_rows(data) + style_rows(data) + sample_rows(data) + family_rows(data)
    ids = [r.id for r in rows]
    assert len(ids) == len(set(ids)), "corpus row ids must be unique"
    return rows


def _bare(text: str) -> bool:
    """A bare answer (no delimiters, no prose): math-verify reads those only inside $...$."""
    marks = ("$", "\\boxed", "\\fbox", "\\framebox", "\\(", "\\[", "answer", "Answer", "####",
             "\n", "<think>")
    return not any(m in text for m in marks)


def reference_verdict(gold: str, prediction: str) -> bool:
    """math-verify 0.9.0's verdict, called as open evaluation stacks call it: default extraction
    configs, bare answers wrapped in $...$, the gold first. In-process (the caller's timeout)."""
    from math_verify import parse, verify

    def read(text: str) -> list:
        return parse(f"${text}$" if _bare(text) else text, parsing_timeout=None)  # type: ignore[arg-type]

    return bool(verify(read(gold), read(prediction), timeout_seconds=None))


def fingerprint(rows: list[Row]) -> str:
    """A hash of every row's id, texts and label: a record made for other rows is stale."""
    digest = hashlib.sha256()
    for r in rows:
        digest.update(json.dumps([r.id, r.gold, r.prediction, r.expected]).encode())
    return digest.hexdigest()


def load_record() -> tuple[str, dict[str, bool]]:
    """(the corpus fingerprint it was made for, {row id: math-verify's verdict}) for the rows
    where math-verify's verdict is not the row's `expected`; on every other row it is."""
    if not RECORD.exists():
        return "", {}
    head, *lines = RECORD.read_text().splitlines()
    return json.loads(head)["fingerprint"], {
        r["id"]: r["math_verify"] for r in map(json.loads, lines)}


def math_verify_verdicts(rows: list[Row]) -> dict[str, bool]:
    """math-verify's recorded verdict on every row (a row not listed: its `expected`)."""
    _, differ = load_record()
    return {r.id: differ.get(r.id, r.expected) for r in rows}


def record(rows: list[Row], *, progress: Callable[[int], None] | None = None) -> dict[str, bool]:
    """math-verify's verdict on every row (minutes: it runs in this process, one row at a time)."""
    import logging

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    out = {}
    for k, row in enumerate(rows):
        out[row.id] = reference_verdict(row.gold, row.prediction)
        if progress and k % 500 == 0:
            progress(k)
    return out


def main(argv: list[str]) -> None:
    rows = build()
    if argv[:1] == ["record"]:
        verdicts = record(rows, progress=lambda k: print(f"{k}/{len(rows)}", file=sys.stderr))
        differ = [r for r in rows if verdicts[r.id] != r.expected]
        TESTS_DATA.mkdir(exist_ok=True)
        with RECORD.open("w") as f:  # rows not listed: math-verify's verdict is `expected`
            f.write(json.dumps({"fingerprint": fingerprint(rows), "rows": len(rows),
                                "math_verify": "0.9.0", "listed": "rows where its verdict "
                                "is not the row's expected one"}) + "\n")
            for row in differ:
                f.write(json.dumps({"id": row.id, "math_verify": verdicts[row.id]}) + "\n")
        print(f"recorded math-verify's verdict on {len(rows)} rows ({len(differ)} differ from "
              f"expected) in {RECORD}")
    else:
        kinds: dict[str, int] = {}
        for r in rows:
            kinds[r.kind] = kinds.get(r.kind, 0) + 1
        print(json.dumps({"rows": len(rows), "kinds": kinds}, indent=1))
        if argv[:1] == ["dump"]:
            for r in rows:
                print(json.dumps(asdict(r)))


if __name__ == "__main__":
    main(sys.argv[1:])
