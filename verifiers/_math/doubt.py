r"""When the conclusion is not read with confidence: the reasons to abstain ("unread").

A reading is unread, with its reason, when
- the text's language is one no table reads (a script outside them: Georgian, Amharic; or
  Latin words no table knows well enough) and three words or more follow the last stated
  answer, or there is none: a hedge, refusal or negation in that language could not be seen;
- the text stops mid-sentence (its last sentence ends in a word that needs more, such as "of",
  "is", "which gives", or holds math but no full stop): a cut-off output, whatever it
  computed before the cut;
- with no answer marker, box or final line (the last statement of prose is read): nothing
  asserted at all ("if 3 × 20 = 60"); a word of doubt in that statement's clause (might,
  would, if, "or" before it, a question) or a maybe in its sentence; a negation after it that
  is not of another value ("120, not 60" names the answer; "60 değil", "but we don't know"
  do not); a sentence with a negation and no digit shortly before it (in English and the
  languages of lexicon.py, one that says what is not known: "We don't know how many girls
  there are.", "It is unclear how many ..."); and, in a language read from the tables, a
  refusal anywhere near the end ("nie można ustalić") or four words after the statement that
  neither its table nor English lists ("... 120 byłoby tylko zgadywaniem").
Readers run on the text after verifiers._math.languages has put its table words in English,
so these rules are the same in every language read.
"""

from __future__ import annotations

import re

from verifiers._math import lexicon
from verifiers._math.conclusion import replacement, sentence_bounds
from verifiers._math.items import math_items
from verifiers._math.languages import MARKS, TABLES, WORD
from verifiers._math.sections import check_start

_REFUSAL = re.compile(lexicon.REFUSALS, re.I)
_DOUBT = re.compile(
    r"\b(?:maybe|perhaps|possibly|probably|might|could|would|unless|guess\w*|estimat\w*|approximate\w*|"
    r"roughly|assum\w*|unsure|uncertain)\b|[?？]"
    rf"|{lexicon.HEDGE_BEFORE}|{lexicon.SUPPOSED}|\bif\b",
    re.I,
)
# a negation, unless what it negates is another value ("not 60", "nicht 60", "не 60")
_NEGATION = re.compile(
    r"(?:\b(?:not|isnot|no|never|cannot|nicht|kein\w*|pas|n[ãa]o|nunca|не|нет)\b|n't|不|没|ない|ません)(?!\s*[-\d$\\])",
    re.I,
)
# words a sentence cannot end on: it was cut off there
_DANGLING = re.compile(
    r"\b(?:the|a|an|of|to|in|on|at|by|for|with|from|and|or|but|so|then|is|are|was|were|be|we|it|"
    r"this|that|which|gives?|get|gets|equals?|yields?|becomes?|makes?|has|have|its|their|our|"
    r"total|leaves?|leaving|giving|into|as|than|per)\s*$|[,;:=+\-*/×÷(\[{\\]\s*$",
    re.I,
)
_OPEN_END = re.compile(f"[^\\W\\d_][{MARKS}]*\\s*$|[,;=+\\-*/×÷(\\[{{\\\\]\\s*$")
_CLOSED_LINE = re.compile(r"^\s*(?:#|\*\*|__|\||>|~|[-*]\s?)")  # a heading, bold, a table, a signature
_DIGIT_OR_OPERATOR = re.compile(r"\d|[=+×÷]")


_UNKNOWN_WORDS = 4  # unknown words after an unmarked last statement that make it unread
_MAYBE = re.compile(r"\b(?:maybe|perhaps|possibly|probably)\b", re.I)
_OR_BEFORE = re.compile(
    r"\bor\b(?!\s+(?:about|approximately|approx|roughly|around|nearly|equivalently|simply|in\s+other))", re.I)  # "..., or 43": a second value offered
_CLAUSE = re.compile(r"[,;:，；：]")


def cut_off(text: str, lang: str | None, last_end: int = -1) -> bool:
    """Whether `text` stops mid-sentence (see the module docstring); never for Thai, which
    ends sentences without a mark, nor for a heading, a bold line, a table row, or a last
    line that states the answer (`last_end`: where the last stated answer ends)."""
    stripped = text.rstrip()
    line = stripped[stripped.rfind("\n") + 1 :]
    if lang == "th" or not _OPEN_END.search(line) or _CLOSED_LINE.match(line):
        return False
    last = re.split(r"[.!?。！？।]\s|।", line)[-1]
    if last_end > len(stripped) - len(last):  # the answer is stated in the last sentence
        return False
    words = WORD.findall(last)
    if len(words) < 3:
        return False
    if _DANGLING.search(last):
        return True
    own = TABLES[lang].words if lang and lang in TABLES else frozenset()
    earlier = re.search(r"[.!?。！？]\s|।|\n", stripped[: len(stripped) - len(last)])  # a text of more than it
    if not earlier:  # one sentence with math in it: a long one, or one whose last clause stops short
        clause = last.rsplit(",", 1)[-1] if "," in last else ""
        stops = bool(clause) and not re.search(r"\d", clause) and len(WORD.findall(clause)) <= 3
        return bool(_DIGIT_OR_OPERATOR.search(last)) and (len(words) >= 8 or stops)
    return len(words) >= 4 or bool(_DIGIT_OR_OPERATOR.search(last)) or words[-1].lower() in own


_SENTENCES = re.compile(r"[^.!?。！？।\n]+")
_THAI_SENTENCES = re.compile(r"[^.!?\n]+?(?=[.!?\n]|\s(?=\d)|\s{2}|$)")  # Thai: a space ends one
# what a refusal says is not known or given ("we don't know how many", "it is not given")
_KNOWN = re.compile(r"\b(?:know\w*|sure|certain|given|told|stated|specified|mention\w*|say|says|tell|tells|"
                    r"information|data)\b", re.I)
_UNCLEAR = re.compile(r"\b(?:unclear|unknown|unspecified|ambiguous)\b", re.I)  # a negation in one word
_DECLINE_REACH = 600  # characters before the last statement in which a refusal is looked for


def _declining(text: str, before: int, tabled: bool, lang: str | None) -> str | None:
    """A sentence with a negation and no digit shortly before `before` (a refusal in words no
    table lists: "Не вистачає даних, щоб відповісти.", "Nie mamy wystarczających
    informacji."; in English and the languages of lexicon.py, whose readers know more, only
    one that also says what is not known: "We don't know how many girls there are."): its
    words, else None."""
    sentences = _THAI_SENTENCES if lang == "th" else _SENTENCES
    for m in sentences.finditer(text, max(0, before - _DECLINE_REACH), before):
        words = m.group(0)
        if re.search(r"\d", words) or not (_NEGATION.search(words) or _UNCLEAR.search(words)):
            continue
        if not tabled and not (_KNOWN.search(words) or _UNCLEAR.search(words)):
            continue
        if m.end() <= before and not re.search(r"\d", text[m.end() : m.end() + 1]):
            return words.strip()
    return None


def doubt(text: str, lang: str | None, *, marked: bool, last_end: int) -> str | None:
    """Why the reading of `text` is not confident, or None. marked: the answer was stated
    (a marker, a box, a final line); last_end: where the last one stated ends (-1 for none)."""
    if lang is None and (not marked or len(re.findall(r"[^\W\d_]{2,}", text[max(0, last_end) :])) >= 3):
        return "its language is one the grader has no table for"
    if cut_off(text, lang, last_end):
        return "the text stops mid-sentence"
    if marked:
        hedged = _MAYBE.search(text, *sentence_bounds(text, max(0, last_end - 1))[:2])
        return f"a hedge in the sentence of its answer ({hedged.group(0)!r})" if hedged else None
    tabled = bool(lang) and any(TABLES[lang or "en"].roles["markers"])  # its words are put in English
    refusal = _REFUSAL.search(text, max(0, len(text) - 1500)) if tabled else None
    if refusal:  # the step-or-answer test reads English, French, ... words only
        return f"a refusal before its last statement ({refusal.group(0)!r})"
    found = replacement(text, 0, math_items)
    if found is None:  # "if 3 × 20 = 60": every value supposed, questioned or negated
        return "no value is asserted"
    declining = _declining(text, found.start, tabled, lang)
    if declining:
        return f"a negated sentence with no math before its last statement ({declining!r})"
    start, end, _ = sentence_bounds(text, found.start)
    clause = max([start, *(m.end() for m in _CLAUSE.finditer(text, start, found.start))])
    word = (_DOUBT.search(text, clause, end) or _MAYBE.search(text, start, end)
            or _OR_BEFORE.search(text, clause, found.start) or _NEGATION.search(text, found.end, end))
    if word:
        return f"a word of doubt or negation by its last statement ({word.group(0).strip()!r})"
    if tabled:
        head = check_start(text, found.end)
        after = WORD.findall(text, found.end, head if head is not None else len(text))
        known = TABLES[lang or "en"].words | TABLES["en"].words
        unknown = [w for w in after if w.lower() not in known]
        if len(unknown) >= _UNKNOWN_WORDS:
            return f"words after its last statement that the grader does not know ({' '.join(unknown[:4])!r})"
    return None
