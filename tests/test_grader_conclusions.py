r"""Issue 32: the grader reads a model's conclusion, not the first thing that looks like an answer.

Hand-written phrasings per family (each family's rows were measured wrong before the fix
where marked; the rest pin what must not change). Expected verdicts are what a careful
person reads; where the text is ambiguous (two final candidates) the verdict is False for
every gold, so an ambiguous output is never counted correct.
"""

from __future__ import annotations

import pytest

from verifiers import extract_answer, verify

T, F = True, False


def judged(prediction: str, right: str | tuple[str, ...] | None, *wrong: str) -> list[tuple[str, str, bool]]:
    """One prediction against the golds it answers (`right`; None for a hedge or a withdrawn
    answer, which answers none) and golds it does not."""
    rights = (right,) if isinstance(right, str) else right or ()
    return [(g, prediction, True) for g in rights] + [(g, prediction, False) for g in wrong]


# fmt: off
# "The answer is <word> $...$": the whole span is the answer, never a number inside LaTeX
ADVERB_SPAN = [
    *judged(r"The answer is therefore $\frac{14}{3}$.", r"\frac{14}{3}", "3"),
    (r"\frac{14}{3}", r"The answer is simply $\frac{14}{3}$.", T),
    *judged(r"The answer is indeed $2\sqrt{3}$.", r"2\sqrt{3}", "3", "2"),
    *judged(r"Thus the answer is clearly $\pi/6$.", r"\frac{\pi}{6}", "6"),
    *judged(r"So the answer is, therefore, $\frac{\pi}{6}$", r"\frac{\pi}{6}", "6"),
    *judged(r"The answer is then exactly \(\frac{5}{2}\).", r"\frac{5}{2}", "2"),
    *judged(r"The answer is just $\sqrt{7}$, as claimed.", r"\sqrt{7}", "7"),
    *judged("The answer is obviously $3^2$.", "9", "3"),
    ("3", r"so the area is \frac{14}{3", F),  # LaTeX without delimiters, cut off: no number in it
    ("2", r"hence x = 2\sqrt{3}", F),
]

# a second value offered beside the conclusion: never correct, whichever value the gold is
HEDGES = [
    *judged("The answer is 18, but it could also be 20.", None, "18", "20"),
    *judged(r"$\frac{14}{3}$, but it could also be $\frac{13}{3}$", None, r"\frac{14}{3}", r"\frac{13}{3}"),
    *judged("Final Answer: $5$ (though $6$ is also possible if we count the endpoint)", None, "5", "6"),
    *judged(r"\boxed{5} (or $6$ if zero counts)", None, "5", "6"),
    ("12", r"So we get $\boxed{12}$ — or possibly $13$.", F),
    *judged("The answer is 12. But it might be 13.", None, "12", "13"),
    ("7", "I believe it is 7, although 8 is also plausible.", F),
    *judged("It is 7, unless we count the empty set, in which case it is 8.", None, "7", "8"),
    ("4", "The final answer is $4$; alternatively $5$.", F),
    *judged(r"I get \boxed{4}. Hmm, maybe the answer is 5.", None, "4", "5"),
    *judged("The answer is 4. Hmm, maybe it is 5.", None, "4", "5"),
    ("3", "The answer is either 3 or 4.", F),
    # restatements of the same value are no hedge
    (r"\frac{14}{3}", r"The answer is $\frac{14}{3}$ (or about $4.67$).", T),
    (r"\frac{14}{3}", r"The answer is $\frac{14}{3}$ (or $4.67$).", T),
    (r"\frac{1}{2}", r"\boxed{\frac{1}{2}} (or equivalently $0.5$)", T),
    ("18", r"\boxed{18} (or 18 dollars)", T),
    ("18", r"The answer is $\boxed{18}$. We could also check it: $3 \times 6 = 18$.", T),
]

# answers inside suppositions, questions, quotes and negations are not conclusions
NOT_STATED = [
    *judged("If the answer is 16, then 16 * 3 = 48, which is not 50, so the answer must be 18.", "18", "16"),
    *judged("Suppose the answer is 16. Then the total is 48, too small. So the answer is 18.", "18", "16"),
    *judged("Is the answer 16? No. Counting again, the answer is 18.", "18", "16"),
    *judged('One might say "the answer is 16", but the answer is 18.', "18", "16"),
    *judged("The answer is not 16; it is 18.", "18", "16"),
    ("16", "At first I thought the answer is 16.", F),
    ("16", "Could the answer be 16?", F),
    ("16", "Is it 16?", F),
    *judged("So the total is 18. Is it possible that the answer is 16? No.", "18", "16"),
    *judged("Redoing it gives 18, not 16.", "18", "16"),
]

# self-correction: the last committed answer after a correction is the conclusion
CORRECTIONS = [
    *judged(r"So the answer is \boxed{16}. Wait, that's wrong: I dropped a bag. The answer is \boxed{18}.", "18", "16"),
    *judged(r"\boxed{16}. Wait, that is wrong. Redoing it gives 18.", "18", "16"),
    *judged("The answer is 16. Oops, I made an error in the second step; redoing it, we get 18.", "18", "16"),
    *judged("The answer is 16. Actually, it is 18.", "18", "16"),
    *judged("We get 16. Hmm, I miscounted: 3 times 6 is 18, so we get 18.", "18", "16"),
    ("16", "The answer is 16. Wait, that's wrong.", F),  # withdrawn, nothing stated instead
    ("18", "So we get 18. Wait, that is incorrect.", F),
    ("18", "The answer is 18. Let me double-check: 18 - 6 = 12 and 12 + 6 = 18. Yes.", T),
    *judged(r"First I got \boxed{3}, but after checking, the final answer is \boxed{5}.", "5", "3"),
    ("5", r"First I got \boxed{3}, then \boxed{5}.", F),  # no correction between: a hedge
]

# conclusions phrased without "the answer is", read where they are the final statement
CONCLUSION_VERBS = [
    ("18", "Adding the two groups gives 18.", T),
    *judged("6 + 12 = 18, so we get 18.", "18", "6"),
    *judged("The total is 3 + 15, which equals 18.", "18", "15"),
    ("18", "She has 18 apples in the end.", T),
    ("16", "We first had 16. Adding two more gives 18.", F),
]

# compound quantities read whole; against a bare gold, in the compound's first unit
COMPOUNDS = [
    *judged("It takes 5 hours and 30 minutes.", "5.5", "5", "30", "330"),
    *judged("The answer is 5 hours and 30 minutes.", ("330 minutes", r"5.5 \text{ hours}")),
    *judged("The rope is 18 feet 6 inches long.", ("18.5", "222 inches"), "18", "6"),
    *judged("She pays 16 dollars and 50 cents.", ("16.50", r"\$16.50"), "16", "50"),
    ("2.5", "The answer is 2 years and 6 months.", T),
    ("5 hours and 30 minutes", "5.5", T),
    ("5 hours and 30 minutes", "5 h 30 min", T),
    ("5 hours and 30 minutes", "6 hours", F),
]

# a format's closing marker outranks earlier headings; verdict words are no answer
MARKERS = [
    *judged("**Answer:** 16\n\nLet me redo the sum: 6 + 12 = 18.\n#### 18", "18", "16"),
    ("18", "Answer: 16 eggs are sold.\nShe makes 9 * 2 = 18 dollars.\nFinal Answer: The final answer is 18.", T),
    ("18", "The answer is $18$. I hope the answer is correct.", T),
    *judged("Final Answer: The final answer is $18$. I hope the answer is correct.", "18", "19"),
]

# numerals in a base and percentages compared one way round
BASES_AND_PERCENT = [
    *judged("52_8", "52_8", "52"),
    ("52", "The answer is $52_{8}$.", F),
    ("52_8", "52", T),
    ("52_8", "52_9", F),
    ("25", r"2500\%", F),
    ("25", "2500%", F),
    *judged(r"25\%", ("25", "0.25")),
    (r"10\%", "0.1", T),
    ("1.5", "150%", T),
]

# fmt: on

FAMILIES = {
    "adverb-span": ADVERB_SPAN, "hedge": HEDGES, "not-stated": NOT_STATED,
    "correction": CORRECTIONS, "conclusion-verb": CONCLUSION_VERBS, "compound": COMPOUNDS,
    "marker": MARKERS, "base-percent": BASES_AND_PERCENT,
}  # fmt: skip
ROWS = [(name, *row) for name, rows in FAMILIES.items() for row in rows]


@pytest.mark.parametrize("family, gold, prediction, expected", ROWS)
def test_conclusion(family: str, gold: str, prediction: str, expected: bool) -> None:
    verdict = verify(gold, prediction)
    assert verdict.correct is expected, (family, verdict)


def test_every_family_can_fail() -> None:
    """Each family holds rows that must be rejected, so a grader that accepts all fails it."""
    for name, rows in FAMILIES.items():
        assert sum(not e for *_, e in rows) >= 2, name


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
