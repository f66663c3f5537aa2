"""verifiers.steps: hand-written steps, GSM8K calculator annotations and reference rationales."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from verifiers.steps import StepVerdict, check_step

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

# fmt: off
STEPS: list[tuple[str, str]] = [
    # right arithmetic, in the many ways models write it
    ("Janet sells 16 - 3 - 4 = 9 duck eggs a day.", "correct"),
    ("She makes 9 * 2 = $18 every day at the farmer's market.", "correct"),
    ("3 x 4 = 12", "correct"), ("3x4=12", "correct"), ("12 / 4 = 3", "correct"),
    ("The total is $80,000 + $50,000 = $130,000.", "correct"), ("25% * 80 = 20", "correct"),
    ("0.2 * 100 = 20%", "correct"), ("50% + 10% = 60%", "correct"), ("2^10 = 1024", "correct"),
    (r"$\frac{3}{4} \times 8 = 6$", "correct"), (r"$12 \div 4 = 3$", "correct"),
    (r"$3 \cdot 5 = 15$", "correct"), ("10 / 3 = 3.33", "correct"), ("-3 + 5 = 2", "correct"),
    ("So (3 + 4 = 7).", "correct"), ("2 * (3 + 4) = 14", "correct"), ("¾ x 8 = 6", "correct"),
    ("12 × 3 = 36 and 36 ÷ 4 = 9", "correct"), ("1.5 * 4 = 6.0", "correct"),
    # wrong arithmetic
    ("Janet sells 16 - 3 - 4 = 8 duck eggs a day.", "wrong"), ("9 * 2 = $19", "wrong"),
    ("7/2 = 3", "wrong"), ("3 x 4 = 13", "wrong"), ("So, Suzzane has $32 - $20 = $300 left.", "wrong"),
    ("10 / 3 = 3.4", "wrong"), ("1,000 + 2,000 = 4,000", "wrong"), ("5 + 5 = 10 and 2 * 3 = 5", "wrong"),
    # calculator annotations (GSM8K)
    ("Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.", "correct"),
    ("He spent <<80000+50000=130000>>130,000 in total", "correct"), ("<<2+2=5>>5", "wrong"),
    ("<<12*.5=6>>", "correct"), ("<<10/4=2.5>>", "correct"), ("<<3*4=11>>", "wrong"),
    # chains: each link is checked; a value carried on ("= 5 + 1") counts as the running total
    ("2 + 3 = 5 + 1 = 6", "correct"), ("2 + 3 = 5 + 1 = 7", "wrong"), ("2 + 3 = 6 + 1 = 7", "wrong"),
    ("(2+3)*4 = 5*4 = 20", "correct"), ("x = 2 + 3 = 5", "correct"), ("4 * 5 = 20 = 4 + 16", "correct"),
    # nothing to check: algebra, labels, prose, repeating decimals, tuples
    ("x + 2 = 5", "none"), ("2x = 6", "none"), ("Day 1 = 5", "none"), ("no math here", "none"),
    ("", "none"), ("x - 3 = 5", "none"), ("250=(5/2)x", "none"), ("48 = 100% + 20%", "none"),
    (r"$279/99999 = 0.\overline{00279}$", "none"), ("(5 + 4, 0 + 3) = (9, 3)", "none"),
    ("Let y = mx + b.", "none"), ("15 pages x 1/3 = 5 pages", "none"), ("9^9^9^9 = 1", "none"),
]
# fmt: on


@pytest.mark.parametrize("text, status", STEPS)
def test_steps(text: str, status: str) -> None:
    verdict = check_step(text)
    assert verdict.status == status, verdict
    assert (verdict.status == "none") == (verdict.equations == ())


def test_equations_are_reported() -> None:
    assert check_step("Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs.") == StepVerdict(
        "correct", (("16-3-4", "9", True),)
    )  # the annotation and the text around it are one equation, not two
    assert check_step("2 + 3 = 5 + 1 = 7").equations == (
        ("2 + 3", "5", True),
        ("5 + 1", "7", False),
    )
    assert check_step("She makes 9 * 2 = $18, then 18 + 1 = 20.").equations == (
        ("9 * 2", "18", True),
        ("18 + 1", "20", False),
    )


def test_random_arithmetic() -> None:
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies

    @hypothesis.settings(max_examples=300, deadline=None)
    @hypothesis.given(st.integers(-(10**6), 10**6), st.integers(1, 10**4), st.sampled_from("+-*/"))
    def check(a: int, b: int, op: str) -> None:
        value = {"+": a + b, "-": a - b, "*": a * b, "/": a / b}[op]
        if op == "/" and a % b:
            return
        text = f"We get {a} {op} {b} = {int(value)} items."
        assert check_step(text).status == "correct", text
        assert check_step(f"We get {a} {op} {b} = {int(value) + 1} items.").status == "wrong"

    check()


@pytest.mark.parametrize(
    "text",
    ["1 + " * 200_000 + "1 = 5", "(" * 100_000 + "1=1", "<<" + "9**" * 1000 + "9=1>>",
     "9 ** 9 ** 9 = 1", "<<10**100000=1>>", "=" * 100_000, "1e999999999 + 1 = 2", "\x00" * 1000],
    ids=lambda t: t[:15],
)  # fmt: skip
def test_bounded_time(text: str) -> None:
    start = time.monotonic()
    verdict = check_step(text)
    assert time.monotonic() - start < 2.0
    assert verdict.status in ("correct", "wrong", "none")


@pytest.mark.parametrize("bad", [None, 12, b"2+2=4", ["2+2=4"]])
def test_never_raises(bad) -> None:
    assert isinstance(check_step(bad), StepVerdict)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- datasets


def _rows(name: str) -> list[dict]:
    path = DATA / name
    if not path.exists():
        pytest.skip(f"benchmark data not found at {path} (see ../shared/data/README.md)")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_gsm8k_calculator_annotations_check_out() -> None:
    rows = _rows("gsm8k_test.jsonl")[:300]
    annotations = [a for r in rows for a in re.findall(r"<<[^>]*>>", r["answer"])]
    computed = [a for a in annotations if re.search(r"\d\s*[-+*/]", a)]  # not "<<125=125>>"
    assert len(computed) > 900
    assert [a for a in computed if check_step(a).status != "correct"] == []
    assert all(check_step(a).status == "none" for a in annotations if a not in computed)


# Reference rationales whose text (not annotation) has wrong arithmetic as written.
GSM8K_WRONG_TEXT = {
    501: "'364 / 4 = <<3/4*364=273>>273': the text drops the 3 of 3/4",
    1024: "'$32 - $20 = $300 left': a typo for $12",
}
MATH500_WRONG_TEXT = {
    "test/algebra/351.json": "'(-4)^2 + 4 * 1 * (-1) = 20': the sign should be minus",
}


def test_gsm8k_reference_rationales() -> None:
    rows = _rows("gsm8k_test.jsonl")
    verdicts = {r["idx"]: [check_step(line) for line in r["answer"].splitlines()] for r in rows}
    wrong = {idx for idx, vs in verdicts.items() if any(v.status == "wrong" for v in vs)}
    assert wrong == set(GSM8K_WRONG_TEXT)
    checked = sum(v.status == "correct" for vs in verdicts.values() for v in vs)
    assert checked > 4000  # nearly every line with an equation is found and checked


def test_math500_reference_solutions() -> None:
    rows = _rows("math500.jsonl")
    wrong = {
        r["unique_id"]
        for r in rows
        if any(check_step(line).status == "wrong" for line in r["solution"].splitlines())
    }
    assert wrong == set(MATH500_WRONG_TEXT)
