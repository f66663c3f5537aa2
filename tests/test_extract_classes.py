r"""The grader reads any model's conclusion: hand-written outputs of every class the English-only
reader got wrong, each with the golds it answers (`right`) and those it does not (`wrong`), in
two tables: tests/data/extract_classes.jsonl (written with the readers) and
tests/data/extract_held_out.jsonl, held out: new phrasings of the same classes written after
the first table passed, in ten rounds, each run against the grader before any change for it
(round 1, 80 outputs: 3 false positives, a hedge "could also be correct" and refusals in
German and Russian word order, and 1 false negative, "36 m²"; round 2, 53 outputs: 3 false
positives, a hedge "also a reasonable answer", "8 или 9", a count after "at first;", and 1
false negative; round 3, 55 longer outputs: 3 false positives, hedges a blank line after the
answer and in German word order, "I need more information", and 1 false negative, "la (B)";
round 4, 55 outputs: 10 false positives, refusals in words no list held ("we can't give a
definitive answer", "no hay forma de saberlo"; now also read as a negation and a word of
knowing in one sentence after all the math), hedges ("one could argue for 10", "10 is equally
defensible", "voire 10", "也可以是 10"), a German "Ergebnis:" before a "Gegenprobe", and 3
false negatives; round 5, 36 outputs, many of them right ones that must stay right: 6 false
positives, refusals ("we cannot say how many", "无法作答", "keine eindeutige Antwort möglich")
and hedges in a supposing parenthesis ("（若每袋 5 个，则为 15）", "bzw. 15, falls"), and 6
false negatives, 4 of them round 4's refusal-in-other-words rule reading "we don't need to
know x" (it now also needs a word of being able, or of the answer), "7 (et non 8)", "Antwort:
Es bleiben 10 Äpfel"; round 6, 43 outputs: 6 false positives, hedges with a unit between the
values ("24 m², or 28 m²", "24 м² (либо 28 м²)", "wobei auch 28 m²") and "je ne peux pas
conclure", and no false negative; round 7, 36 outputs: 11 false positives, hedges with no
marker in other languages ("58 moutons, voire 60", "58 Schafe, eventuell auch 60", "也有可能是
60 只", "One might also say 64"), a check head after an emoji ("### ✅ Verification"),
refusals ("the remaining count is undetermined", "不确定"), "58 sheep, i.e. ⅞ of the flock",
and 3 false negatives; round 8, 36 short outputs in the issue's own style: 5 false
positives, hedges ("30 might be what the question intends", "30 也说得通", "30 ginge aber
auch", "aunque 30 también") and "eine Lösung ist so nicht möglich", and no false negative;
round 9, 33 outputs: 6 false positives, hedges with a unit written with "/" between the
values ("80 km/h (or 60 km/h ...)"), "则是 60", "mit Pause 60 km/h", and refusals "can't be
pinned down", "lässt sich ... nicht angeben", and no false negative; round 10, 27 outputs,
mostly right ones: 1 false positive, a breakdown in a parenthesis after the answer read as
it ("So he has 30 bottles. (24 from the crates and 6 from the cellar.)"), and 5 false
negatives, "La réponse est 30 (24 dans les caisses ...)" in three languages (main reads
English the same way), "30 L").
Each miss was fixed in the rule of its class, never in the table. Expected
verdicts are what a careful reader of the language concludes; where a text offers two
answers, or declines to answer, no gold is right.

    language              answer markers in Chinese, French, German, Spanish, Portuguese,
                          Russian, Japanese, Italian, Korean; a check after the conclusion
                          ("Vérification : 80 ÷ 2 = 40") never replaces it; questions,
                          suppositions and negations in those languages state nothing;
                          numbers as the marker's language writes them ("La réponse est
                          3,5", "La respuesta es 1.500")
    language-wrong-final  a right intermediate, then a wrong conclusion: the conclusion
    check-structure       no marker: the last statement before a check section that checks it
    recheck               a check that tries another value ("if the answer were 5 ... too
                          large") is neither the answer nor a retraction
    hedge                 a second value offered as valid beside the answer, in any language
    correction            a correction (in any language) still replaces the answer
    refusal               "cannot determine", "无法确定", "impossible de déterminer": no answer
    not-refusal           a refusal about one step, then the answer: the answer
    number-words          "forty-two", "one hundred twenty", "three and a half"
    unicode               ½, 4¼, 2⅔, x², 3.2 × 10⁵, 10⁻³, U+2212 minus
    digit-groups          NBSP / narrow NBSP / thin-space groups, Indian 12,34,567, German
                          1.234,50 and 1.234.567 (a lone "1.234" is the decimal)
    units                 "48 cm²", "60 km/h", "9.8 m/s²", "25 °C"
    mixed                 "3 1/2", "137 1/2"
    choice                "The correct option is (B).", "**(B) 27**", a last line "**D**"
    markup                "#### **120**", \boxed{5 = x}, \hspace{1pt}1024
"""

from __future__ import annotations

from collections import Counter

import pytest
from helpers import verdict_rows

from verifiers import extract_answer, verify
from verifiers.math import Verdict

TABLES = ("extract_classes", "extract_held_out")
ROWS = [row for table in TABLES for row in verdict_rows(table)]  # (family, gold, prediction, expected)
FAMILIES = {"language", "language-wrong-final", "check-structure", "recheck", "hedge", "correction",
            "refusal", "not-refusal", "number-words", "unicode", "digit-groups", "units", "mixed",
            "choice", "markup"}  # fmt: skip


@pytest.mark.parametrize("family, gold, prediction, expected", ROWS)
def test_class_row(family: str, gold: str, prediction: str, expected: bool) -> None:
    verdict = verify(gold, prediction)
    assert verdict.correct is expected, (family, verdict)


def test_every_class_is_tested_both_ways() -> None:
    """Every class has rows; each has golds it must reject (a grader that accepts everything
    fails), and each but the refusals and hedges has golds it must accept; both tables are
    whole (457 and 969 verdicts)."""
    assert [len(verdict_rows(table)) for table in TABLES] == [457, 969]
    families = {family for family, *_ in ROWS}
    assert families == FAMILIES
    wrong = Counter(family for family, *_, expected in ROWS if not expected)
    right = Counter(family for family, *_, expected in ROWS if expected)
    assert all(wrong[f] >= 3 for f in FAMILIES), wrong
    assert all(right[f] >= 3 for f in FAMILIES - {"refusal", "hedge"}), right


@pytest.mark.parametrize(
    "text, refusal",
    [
        ("20 * 3 = $60. But the question seems to be missing some information, so I cannot "
         "determine the answer.", "cannot determine"),
        ("由于缺少条件，无法确定答案。", "无法确定"),
        ("Il est impossible de déterminer l'âge de Paul.", "impossible de déterminer"),
        ("Мы знаем, что 3 + 5 = 8, но определить возраст невозможно: недостаточно данных.",
         "недостаточно данных"),
    ],
)
def test_refusal_is_recorded_in_the_verdict(text: str, refusal: str) -> None:
    """An abstention is no answer, and the verdict says which words declined."""
    verdict = verify("8", text)
    assert verdict == Verdict(False, f"the prediction abstains ({refusal!r}): no answer", "8", None)
    assert extract_answer(text) is None


def test_a_refusal_answers_a_gold_that_is_one() -> None:
    assert verify("cannot be determined", "There is not enough information to answer.").correct
    assert not verify("cannot be determined", "The answer is 5.").correct


def test_a_gold_is_never_read_as_a_refusal() -> None:
    """A reference solution that mentions a refusal still has its answer."""
    gold = "We cannot determine x alone, but x + y = 10. #### 10"
    assert verify(gold, "The answer is 10.").correct
