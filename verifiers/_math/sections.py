r"""The structure around a conclusion: checks of it, refusals, a final marked line.

- A check section ("Verification:", "**Check**", "To double-check:", "验证：", "Vérification :",
  "Überprüfung:", "Проверка:", "検証：") starts at the head of a sentence made of such a word
  (with a lead such as "Let's", "Pour") and ends in a colon, a full stop or the line's end
  before any math. `check_start` finds the first one after a given point. After a stated
  conclusion, what a check computes never replaces the answer: its numbers are the check's
  (extract.py drops a check's restatements, and reads a different answer stated in a check
  without a correction between as a hedge). A check's verdict on a value it tries ("if the
  answer is 3 ... too large") is on that value, not on the conclusion (conclusion.py).
- A refusal ("I cannot determine the answer", "无法确定", "impossible de déterminer") with no
  answer stated after it is an abstention: no answer, with its words as the reason.
- A final line that is marked ("**D**", "**(B) 27**", "**42**") or is a choice letter alone
  states the answer, as a weak marker would.
"""

from __future__ import annotations

import re

from verifiers._math.lexicon import CAPABLE, CHECK_LEAD, CHECK_WORDS, KNOWING, NEGATIONS, REFUSALS

_CHECK = re.compile(CHECK_WORDS, re.I)
_CHECK_REACH = 4000  # characters from the end in which a check of the conclusion is looked for
_REFUSAL_REACH = 1000  # ... and a refusal that ends the reasoning
_LEAD = re.compile(rf"[^\w\n]*(?:(?:{CHECK_LEAD})[\s,]*){{0,3}}[\s*_]*", re.I)  # "### ✅ Verification"
# after the head word: a few words, then ":" / "." / the line's end, before any math
_HEAD_END = re.compile(r"[^\n\d$\\=]{0,50}?(?:[:：.。]|\*\*|\n|$)")
_BREAK = re.compile(r"\n|[.!?](?=\s)|[。！？：:]")
_REFUSAL = re.compile(REFUSALS, re.I)
# what a refusal is about, when it is the answer and not one step ("we cannot find x alone")
_ABOUT_ANSWER = re.compile(
    r"answer|question|problem|information|data|how\s+many|how\s+much|the\s+number\s+of|combien|"
    r"wie\s+viele|cu[áa]nt[oa]s|quant[oa]s|сколько|多少|几|いくつ|r[ée]ponse|probl[èe]me|informations?|donn[ée]es|"
    r"antwort|frage|aufgabe|angaben|respuesta|pregunta|problema|informaci[óo]n|datos|resposta|"
    r"pergunta|informa[çc]|ответ|вопрос|задач|информац|данных|答案|问题|题目|信息|条件|答え|問題|情報",
    re.I,
)
# a final line that states the answer by its form: bold, or a choice letter alone
_MARKED_LINE = re.compile(r"[ \t>#]*(\*\*|__|\*)\s*(.{1,60}?)\s*\1\s*\.?[ \t]*")
CHOICE_ALONE = re.compile(r"[ \t>#*]*\(?([A-E])\)?\.?[ \t*]*")


def _head(text: str, pos: int, reach: int = 80) -> int | None:
    """Where the sentence holding `pos` starts (after a line break, a full stop or a colon),
    or None when that is more than `reach` characters back."""
    start, head = max(0, pos - reach), None
    for b in _BREAK.finditer(text, start, pos):
        head = b.end()
    return head if head is not None else (0 if start == 0 else None)


def check_start(text: str, after: int) -> int | None:
    """Where the first check section's head at or after `after` starts, or None."""
    for m in _CHECK.finditer(text, max(after, len(text) - _CHECK_REACH)):
        head = _head(text, m.start())
        if head is not None and _LEAD.fullmatch(text, head, m.start()) and _HEAD_END.match(text, m.end()):
            return head
    return None


_NEGATION = re.compile(NEGATIONS, re.I)
_KNOWING = re.compile(KNOWING, re.I)
_CAPABLE = re.compile(CAPABLE, re.I)
_SENTENCE = re.compile(r"[^.!?。！？\n]+")


def declined(text: str) -> str | None:
    """With no answer stated: a sentence (or its rest) after all the math that declines in other words (a
    negation, a word of knowing or answering, and one of being able or of the answer: "we
    can't give a definitive answer", "reste sans réponse"), its words; else None."""
    digits = [m.end() for m in re.finditer(r"\d", text[-_REFUSAL_REACH:])]
    start = len(text) - min(len(text), _REFUSAL_REACH) + (digits[-1] if digits else 0)
    for sentence in _SENTENCE.finditer(text, start):  # the rest of the last number's sentence, and on
        words = sentence.group(0)
        if _NEGATION.search(words) and _KNOWING.search(words) and _CAPABLE.search(words):
            return sentence.group(0).strip()
    return None


def abstention(text: str, last_answer: int) -> str | None:
    """The words of a refusal that ends the text's reasoning ("so I cannot determine the
    answer"), or None. `last_answer`: where the last answer stated starts (-1 for none); a
    refusal before it is a step, not an abstention ("we cannot find x alone, but the answer is
    10"), and so is one about a step ("we cannot determine x directly") that math follows."""
    last = None
    for m in _REFUSAL.finditer(text, max(0, last_answer, len(text) - _REFUSAL_REACH)):
        last = m
    if last is None:
        return None
    end = re.compile(r"[.!?。！？](?=\s|$)|\n").search(text, last.end())
    stop = end.end() if end else len(text)
    sentence = text[_head(text, last.start(), 300) or max(0, last.start() - 300) : stop]
    if not _ABOUT_ANSWER.search(sentence) and re.search(r"\d", text[last.end() :]):
        return None
    return last.group(0)


def final_line(text: str) -> tuple[int, int, str] | None:
    """(start, end, content) of a last line that states an answer by its form, or None:
    "**D**", "**(B) 27**", "**42**" (bold, with no prose in it: `prose` tells), or a choice
    letter alone ("D", "(D)")."""
    stripped = text.rstrip()
    start = stripped.rfind("\n") + 1
    line = stripped[start:]
    marked = _MARKED_LINE.fullmatch(line)
    if marked:
        return start + marked.start(2), start + marked.end(2), marked.group(2).strip()
    alone = CHOICE_ALONE.fullmatch(line)
    if alone and start > 0:
        return start + alone.start(1), start + alone.end(1), alone.group(1)
    return None


def abstains(answer: str) -> bool:
    """Whether an answer (a gold's) is itself a refusal: "cannot be determined"."""
    return bool(_REFUSAL.search(answer))
