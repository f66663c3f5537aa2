r"""Issue 32: the grader reads a model's conclusion, not the first thing that looks like an answer.

Hand-written phrasings, each with the golds it answers and those it does not, in two tables:
tests/data/grader_conclusions.jsonl, per family (each family's rows were measured wrong before
the fix where marked; the rest pin what must not change), and tests/data/grader_phrasings.jsonl,
held out: phrasings of the same families written after the fix passed the first table, in six
rounds (adverbs, hedges, suppositions, corrections, compounds, markers, bases and percents in
new words; ordinary outputs that must still pass; long reasoning that checks itself; LaTeX
without delimiters), each row under its section. Each round was run against the grader before
any change for it; the rows it got wrong were fixed in the grader, not in the table (two
contested rows are left out, README "Math grading" names them).

Expected verdicts are what a careful person reads; where the text is ambiguous (two final
candidates) the verdict is False for every gold, so an ambiguous output is never counted
correct. The families:
    adverb-span      "The answer is <word> $...$": the whole span is the answer, never a number
                     inside LaTeX
    hedge            a second value offered beside the conclusion: never correct, whichever
                     value the gold is (restatements of the same value are no hedge)
    not-stated       answers inside suppositions, questions, quotes and negations are not
                     conclusions
    correction       self-correction: the last committed answer after a correction is the
                     conclusion
    conclusion-verb  conclusions phrased without "the answer is", read where they are the
                     final statement
    compound         compound quantities read whole; against a bare gold, in the compound's
                     first unit
    marker           a format's closing marker outranks earlier headings; verdict words are
                     no answer
    base-percent     numerals in a base and percentages compared one way round
"""

from __future__ import annotations

import pytest
from helpers import verdict_rows

from verifiers import extract_answer, verify

FAMILIES = ("adverb-span", "hedge", "not-stated", "correction", "conclusion-verb", "compound",
            "marker", "base-percent")
TABLES = ("grader_conclusions", "grader_phrasings")
ROWS = {table: verdict_rows(table) for table in TABLES}  # (family, gold, prediction, expected)


@pytest.mark.parametrize("table, family, gold, prediction, expected",
                         [(table, *row) for table in TABLES for row in ROWS[table]])
def test_conclusion(table: str, family: str, gold: str, prediction: str, expected: bool) -> None:
    verdict = verify(gold, prediction)
    assert verdict.correct is expected, (table, family, verdict)


def test_every_family_can_fail() -> None:
    """Each family holds rows that must be rejected, so a grader that accepts all fails it; the
    held-out table rejects at least 40% of its verdicts; both are whole (118 and 312 verdicts)."""
    families, held_out = ROWS["grader_conclusions"], ROWS["grader_phrasings"]
    assert len(families) == 118 and {family for family, *_ in families} == set(FAMILIES)
    for name in FAMILIES:
        assert sum(family == name and not e for family, *_, e in families) >= 2, name
    assert len(held_out) == 312 and sum(not e for *_, e in held_out) >= 0.4 * len(held_out)


@pytest.mark.parametrize(
    "text, answer",
    [
        (r"The answer is therefore $\frac{14}{3}$.", r"\frac{14}{3}"),
        ("The answer is 18, but it could also be 20.", "18, 20"),
        (r"\boxed{16}. Wait, that is wrong. Redoing it gives 18.", "18"),
        ("If the answer is 16, then 48 is too small, so the answer must be 18.", "18"),
        ("It takes 5 hours and 30 minutes.", "5 hours and 30 minutes"),
        ("The answer is 18. I hope the answer is correct.", "18"),
        ("**Answer:** 16\n#### 18", "18"), ("The answer is 16. Wait, that's wrong.", None),
        ('One might say "the answer is 16".', None), ("Is the answer 16?", None),
    ],
)  # fmt: skip
def test_extracted_conclusion(text: str, answer: str | None) -> None:
    assert extract_answer(text) == answer
