"""The rows of the math grader's differential corpus (reports/grader/corpus.py builds them;
reports/grader/styles.py adds part (b)): the row type, a deterministic keyed choice, and the
perturbation both parts use."""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from pathlib import Path

TESTS_DATA = Path(__file__).resolve().parents[2] / "tests" / "data"


@dataclass(frozen=True)
class Row:
    id: str
    gold: str
    prediction: str
    expected: bool
    kind: str  # how the prediction was made: "boxed", "last-digit", "style:think", ...


def pick(key: str, options: list) -> object:
    """A deterministic choice keyed by a string (the same on every machine and run)."""
    return options[zlib.crc32(key.encode()) % len(options)]


def last_digit(gold: str) -> str | None:
    """The last digit changed (9 -> 0, else +1); None when that keeps the value (x^1 -> x^2
    is different, but 1^2 -> 1^3 is not: a digit that is an exponent of 1 or 0 is skipped)."""
    unit = re.search(r"\\(?:text|mbox)\s*\{[^{}]*\}\s*\^?\s*\{?\d*\}?\s*$", gold)
    digits = list(re.finditer(r"\d", gold[: unit.start()] if unit else gold))  # not cm^2
    if not digits:
        return None
    k = digits[-1].start()
    before = gold[:k]
    if re.search(r"(?<![\d.])[01]\s*\^\s*\{?\s*$", before):  # 1^2, 0^{3}: the same value
        return None
    d = int(gold[k])
    return gold[:k] + str((d + 1) % 10) + gold[k + 1 :]
