r"""Part (c) of the grader corpus (reports/grader/corpus.py): how models conclude.

`family_rows()`: each family below applied to the MATH-500 and GSM8K golds it fits, about one
gold in `EVERY` per family (keyed by problem id and family, so the set is stable). A family
writes a conclusion the way models hedge, correct themselves and phrase it, with a second
value `w` (the gold's last digit changed) where it needs one, and its expected verdict:
- the answer after an adverb ("The answer is therefore $\frac{14}{3}$"): the whole span;
- hedges (the gold and `w` both offered as final): never correct, whichever comes first;
- suppositions, questions, quotes and negations before the real answer: the real answer;
- corrections ("Wait, that's wrong ... \boxed{a}", "Redoing it gives a"): the corrected
  answer; a withdrawn answer with nothing after it: no answer;
- a format's closing marker ("#### a") after an earlier "**Answer:**" heading: the marker;
- "I hope the answer is correct" after the answer: the answer;
- a base subscript or a percent the gold does not have (gold 52: "52_8", gold 25: "2500\%"):
  another number;
- compound quantities ("n hours and 30 minutes" against n.5 hours, n + 0.5 derived from an
  integer gold n; against n itself: wrong).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable
from pathlib import Path

from reports.grader.corpus_rows import Row, last_digit, pick

EVERY = 12  # a family is applied to about one gold in EVERY
Family = Callable[[str, str], "tuple[str, str, bool] | None"]  # (gold, w) -> (gold, prediction, expected)

ADVERBS = ["therefore", "simply", "indeed", "thus", "clearly", "exactly", "then", "precisely"]
_INTEGER = re.compile(r"[1-9]\d{0,5}")

# name -> (the prediction with {a} the gold and {w} the other value, expected); a name in
# SWAPPED also makes "<name>-wrong": the same text with the two values swapped, expected wrong
TEMPLATES: dict[str, tuple[str, bool]] = {
    # hedges: two final candidates, whichever the gold is
    "hedge-could-also": ("The answer is ${a}$, but it could also be ${w}$.", False),
    "hedge-could-also-second": ("The answer is ${w}$, but it could also be ${a}$.", False),
    "hedge-though": ("Final Answer: ${a}$ (though ${w}$ is also possible)", False),
    "hedge-or-if": ("$\\boxed{{{a}}}$ (or ${w}$ if we count the other case)", False),
    "hedge-maybe-after-box": ("So $\\boxed{{{w}}}$. Hmm, maybe the answer is ${a}$.", False),
    # suppositions, questions, quotes and negations are not the conclusion
    "conditional": ("If the answer is ${w}$, the check fails, so the answer must be ${a}$.", True),
    "question": ("Is the answer ${w}$? No. Counting again, the answer is ${a}$.", True),
    "quoted": ('It is tempting to write "the answer is ${w}$", but the answer is ${a}$.', True),
    "negated": ("The answer is not ${w}$; it is ${a}$.", True),
    # corrections: the answer after it; withdrawn with nothing instead: no answer
    "correction-box": ("So the answer is $\\boxed{{{w}}}$. Wait, that's wrong. "
                       "Rechecking, the answer is $\\boxed{{{a}}}$.", True),
    "correction-verb": ("We get ${w}$. Wait, I made an error. Redoing it gives ${a}$.", True),
    "withdrawn": ("The answer is ${a}$. Wait, that's wrong.", False),
    # a format's closing marker outranks an earlier heading
    "closing-marker": ("**Answer:** {w}\n\nRechecking the sum.\n#### {a}", True),
    "hope-correct": ("The answer is ${a}$. I hope the answer is correct.", True),
}  # fmt: skip
SWAPPED = ("conditional", "correction-box", "closing-marker")


def _template(text: str, expected: bool) -> Family:
    return lambda a, w: (a, text.format(a=a, w=w), expected)


def _templates() -> dict[str, Family]:
    """Each template, and after each one in SWAPPED its "-wrong" twin."""
    out: dict[str, Family] = {}
    for name, (text, expected) in TEMPLATES.items():
        out[name] = _template(text, expected)
        if name in SWAPPED:
            out[f"{name}-wrong"] = _template(text.replace("{a}", "\0").replace("{w}", "{a}").replace("\0", "{w}"), False)
    return out


FAMILIES: dict[str, Family] = {
    # the whole LaTeX span after "the answer is <adverb>"
    "adverb-span": lambda a, w: (a, f"The answer is {pick(a, ADVERBS)} ${a}$.", True),
    "adverb-span-wrong": lambda a, w: (a, f"So the answer is, {pick(w, ADVERBS)}, ${w}$.", False),
    **_templates(),
    # another number: a base the gold does not name, a percent scaled by 100
    "base-added": lambda a, w: (a, f"The answer is ${a}_{{8}}$.", False) if _INTEGER.fullmatch(a) else None,
    "percent-scaled": lambda a, w: (a, f"The answer is ${int(a) * 100}\\%$.", False) if _INTEGER.fullmatch(a) else None,
    # compound quantities, against a gold in their first unit
    "compound": lambda a, w: (f"{a}.5", f"It takes {a} hours and 30 minutes.", True)
    if _INTEGER.fullmatch(a) else None,
    "compound-wrong": lambda a, w: (a, f"It takes {a} hours and 30 minutes.", False)
    if _INTEGER.fullmatch(a) else None,
}  # fmt: skip


def family_rows(data: Path | None = None) -> list[Row]:
    import problems

    golds = [(p.id, str(p.answer)) for name in ("math500", "gsm8k") for p in problems.load(name, path=data)]
    rows: list[Row] = []
    for name, family in FAMILIES.items():
        for pid, gold in golds:
            w = last_digit(gold)
            if w is None or w == gold or zlib.crc32(f"{pid}|{name}".encode()) % EVERY:
                continue
            made = family(gold, w)
            if made is not None:
                rows.append(Row(f"{pid}|family:{name}", made[0], made[1], made[2], f"family:{name}"))
    return rows
