r"""The phrases that state an answer ("the answer is", "Final Answer:", "答案是", "la réponse
est", "Ответ:") and the answer each states: the math of its sentence, or the sentence's words
when it has none ("The answer is Evelyn"). The markers of other languages are
verifiers/_math/lexicon.py's; the reading is one for all: the sentence ends at a full stop
(also "。"), and a word in any script ends the math before it ("25です", "25 яблок").
"""

from __future__ import annotations

import bisect
import re

from verifiers._math.conclusion import SENTENCE_END, Candidate, committed, negated_before
from verifiers._math.items import CONNECTOR, MATH_SPAN, math_items, run
from verifiers._math.lexicon import (
    ANSWER_MARKERS,
    CJK_FILLER,
    CJK_VERDICTS,
    CONNECTOR_WORDS,
    DECIMAL_COMMA,
    FILLER_WORDS,
    FINAL_MARKER,
    MARKER_KEYS,
    NEGATED_VALUE,
    POINT_THOUSANDS,
    VERDICT_WORDS,
)
from verifiers._math.quantity import COMPOUND, parts

_AFTER_MARK = r"\s*:?(?:\s*\*\*)?"
PHRASE = re.compile(
    r"\b(?:final\s+answer\b(?:\s*(?:is\b|:|=))?|answer\s*(?:is\b|:|=)"
    r"|answer\s+(?:must|should|would|will|has\s+to|ought\s+to)\s+be\b|answer\s+(?:equals|becomes)\b"
    rf"|answer\b(?=\s*[$\\\d(\[{{-])){_AFTER_MARK}",
    re.I,
)
# the other languages' markers, searched only in a text holding one of their keys
OTHER_PHRASE = re.compile(rf"(?:{ANSWER_MARKERS}){_AFTER_MARK}", re.I)
# words between "the answer is" and its math ("is therefore $\frac{14}{3}$")
_FILLER = re.compile(
    r"(?:(?:(?:therefore|thus|hence|so|then|now|simply|just|indeed|clearly|exactly|precisely|"
    r"actually|really|still|finally|definitely|certainly|surely|obviously|evidently|in\s+fact|"
    rf"of\s+course|equal\s+to|given\s+by|the\s+(?:value|number|result)|most|very|quite|[a-z]+ly|{FILLER_WORDS})\b"
    rf"|{CJK_FILLER})[\s,:*]*)+",
    re.I,
)
# what "the answer is" may be followed by that is a verdict on it, not an answer
_VERDICT_WORDS = {"correct", "right", "wrong", "incorrect", "reasonable", "valid", "accurate",
                  "plausible", "consistent", "clear", "obvious", "below", "above", "follows",
                  "unclear", "unknown", "sensible", "confirmed", "verified", "checked", "sound",
                  "good", "fine", "ok", "okay"} | VERDICT_WORDS
_MAX_PHRASES = 50  # "the answer is" phrases read, the last ones
_LINE = 400  # characters of the sentence after "the answer is" that its answer is read from
_READ = 2000  # characters after "the answer is" in which its answer is read
# words that make a text prose rather than an answer: English words of three or more letters
# and the common two-letter ones ("is", "so"), and any word of another script but Greek;
# "AB", "cm", "sin", "π" and \text{...} are not prose
_MATH_WORDS = {
    "sqrt", "sin", "cos", "tan", "cot", "sec", "csc", "log", "ln", "exp", "arcsin", "arccos",
    "arctan", "sinh", "cosh", "tanh", "pi", "oo", "inf", "gcd", "lcm", "det", "mod", "and", "or",
    "approx", "infty", "infinity",
}  # fmt: skip
_SHORT_WORDS = {"no", "is", "so", "we", "to", "of", "be", "it", "in", "at", "on", "by", "an", "if",
                "as", "my", "he", "she", "do", "get", "got", "has", "the", "are", "was",
                # the two-letter words of the other languages read ("7 (et non 8)", "Es bleiben 10")
                "et", "ou", "la", "le", "de", "du", "un", "il", "es", "er", "zu", "im", "el", "en",
                "di", "da", "um"}  # fmt: skip
_WORD = re.compile(r"[^\W\d_]+")  # a word in any script
_GREEK = re.compile(r"[\u0370-\u03ff\u1f00-\u1fffµ]+")
# another language's "or" / "and" between two values
_LISTED = re.compile(rf"(?<=[\d$}}])\s*(?:{CONNECTOR_WORDS})\s*(?=[-\d$\\])", re.I)
# a letter of a script without spaces (Chinese, Japanese, Korean): it ends the math before it
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uff01-\uff5e。、]")


def phrases(text: str, boxes: list[Candidate]) -> list[Candidate]:
    """Every "the answer is" with the answer it states (this line, or the next when it ends
    there). A phrase whose answer is a box hands its rank to the box ("Final Answer:
    \\boxed{5}" is a closing box) and states nothing itself."""
    out: list[Candidate] = []
    box_starts = [b.start for b in boxes]
    for mark in marks(text)[-_MAX_PHRASES:]:  # the conclusion is among the last
        final = bool(FINAL_MARKER.search(mark.group(0)))
        rest = text[mark.end() : mark.end() + _READ].lstrip(" \t*:：")
        offset = min(len(text), mark.end() + _READ) - len(rest)
        display = MATH_SPAN.match(rest.lstrip())  # "Answer:\n\\[ 9 \\]" spans lines
        if display and rest.lstrip()[:2] in ("$$", "\\["):
            value: str | None = next(g for g in display.groups() if g is not None).strip()
            reach = offset + len(rest) - len(rest.lstrip()) + display.end()
        else:
            line, _, after = rest.partition("\n")
            if not line.strip():  # "**Final Answer**\n$$ 5 $$"
                line = after.lstrip("\n").split("\n\n", 1)[0]
            stop = SENTENCE_END.search(line, 0, _LINE)  # its first sentence, 400 characters at most
            value = sentence_answer(line[: stop.end() if stop else _LINE])
            reach = text.find(line, offset) + len(line)
        k = bisect.bisect_left(box_starts, mark.end())
        if k < len(boxes) and boxes[k].start < reach:  # the phrase states a box
            if final and boxes[k].kind == "box":
                boxes[k] = Candidate(boxes[k].start, boxes[k].end, boxes[k].value, "close")
            continue
        if not value or _verdict(rest):  # "the answer is correct"
            continue
        value = _regional(value, mark.group(0))
        tail = value.rsplit(",", 1)[-1].strip()[-12:]
        at = text.find(tail, offset, reach) if tail else -1
        end = at + len(tail) if at >= 0 else reach
        end += len(re.match(r"[$\s]*(?:\\[)\]])?\$*", text[end:end + 4]).group(0))  # type: ignore[union-attr]
        kind = "close" if final and re.search(r"[\d\\]", value) else "phrase"
        stated = committed(text, mark.start(), mark.end()) and not NEGATED_VALUE.match(text, end)
        out.append(Candidate(mark.start(), end, value, kind, stated))
    return out


def marks(text: str) -> list[re.Match[str]]:
    """Every answer marker in `text`, in order."""
    found = list(PHRASE.finditer(text))
    lower = text.lower()
    if any(key in lower for key in MARKER_KEYS):
        found = sorted(found + list(OTHER_PHRASE.finditer(text)), key=lambda m: m.start())
    return found


def _regional(value: str, marker: str) -> str:
    """A number as the marker's language writes it: "3,5" is 3.5 after "la réponse est",
    "Ответ:" (not "2,500", which stays English thousands), and "1.500" is 1500 after "die
    Antwort ist", "la respuesta es" (French and Russian group by spaces)."""
    number = re.match(r"-?\d+(?:(,|\{,\})(?:\d{1,2}|\d{4,})|(\.)\d{3})(?![\d,.])", value)
    if not number or re.search(r"\d", value[number.end() :]):  # one number, a unit after it at most
        return value
    if number.group(1) and DECIMAL_COMMA.search(marker):
        return value.replace(number.group(1), ".", 1)
    if number.group(2) and POINT_THOUSANDS.search(marker):
        return value.replace(".", "", 1)
    return value


def _verdict(rest: str) -> bool:
    """Whether what follows a marker is a verdict on the answer ("correct", "正确"), not one."""
    first = re.match(r"[\s*:]*(?:(?:very|quite|probably|definitely|surely|indeed|also|bien|auch|"
                     r"tamb[ié]n|tamb[ée]m)\s+)*([^\W\d_]+)", rest, re.I)
    if not first:
        return False
    word = first.group(1).lower()
    return word in _VERDICT_WORDS or word.startswith(CJK_VERDICTS)


def sentence_answer(sentence: str) -> str | None:
    """ "$\\frac{3}{4}$. Done" -> "\\frac{3}{4}"; "42 apples." -> "42 apples"; "therefore
    $\\frac{14}{3}$." -> "\\frac{14}{3}" (adverbs before the math are skipped); "5 hours and 30
    minutes" whole; "The largest $n$ is 34." -> "34" (a sentence that starts in words: its
    last math); "25です。" -> "25"."""
    s = sentence.replace("\\$", "").strip().lstrip("*").strip()
    s = re.sub(r"^[#\s]+|^__", "", s)  # "The answer is #### 5": the GSM8K marker is not part of it
    s = re.sub(r'^\\?["\'“「]|\\?["\'”」]\s*[.。]?$', "", s.strip())  # quoted: "\"$12$ and $13$\""
    s = _LISTED.sub(" or ", s)  # "8 или 9": a list in any language
    filler = _FILLER.match(s)
    if filler and re.match(r"[\d$\\(\[{-]", s[filler.end() :]):  # "is simply $\\frac{14}{3}$"
        s = s[filler.end() :]
    if MATH_SPAN.match(s):  # "$12$ and $13$.": the spans joined to the first one
        items = math_items(s)
        joined = [items[0]]
        for item in items[1:]:
            if not CONNECTOR.fullmatch(s[joined[-1][1] : item[0]]):
                break
            joined.append(item)
        return ", ".join(it[2] for it in joined)
    compound = COMPOUND.match(s)
    if compound and parts(compound.group(0)):  # "5 hours and 30 minutes"
        return compound.group(0)
    cut = re.split(r"\.(?:\s|$)|\*\*|__|[。！？।]", s)[0].strip()
    s = cut.strip("$").rstrip(".").strip()
    if not s:
        return None
    head = _WORD.match(s)
    if head and has_prose(head.group(0)):  # "The answer is Evelyn."; "the sum, 10, not 12"; "小明有 68 个"
        items = [it for it in math_items(cut) if not negated_before(cut, it[0])]
        return run(cut, items) if items else s
    return before_prose(s)


def before_prose(s: str) -> str:
    """ "12 because x = 5" -> "12": math ends at the first prose word outside braces (units
    such as "cm" and words inside \\text{...} are no prose), or at a letter of a script
    without spaces ("25です")."""
    depth = 0
    for k, c in enumerate(s):
        depth += (c == "{") - (c == "}")
        if depth == 0 and k > 0 and _CJK.match(c):
            return s[:k].strip()
        if depth == 0 and c.isspace():
            word = re.match(r"\s+[(—–]?\s*([^\W\d_]+)", s[k:])
            if word and has_prose(word.group(1)) and k > 0:  # "... and she wins": no "and"
                if s.count("(", 0, k) > s.count(")", 0, k):  # "30 (24 from the crates": before the aside
                    k = s.rindex("(", 0, k)
                return re.sub(r"(?:\s*[,;:(\[—–]|\s+-|\s+(?:and|or))+\s*$", "", s[:k]).strip()
    return s


def has_prose(text: str) -> bool:
    """Whether `text` has words: a LaTeX command and its {letters} argument are not words."""
    text = re.sub(r"\\[A-Za-z]+\*?(?:\s*\{[^{}]*\})?", " ", text)
    for word in _WORD.findall(text):
        lower = word.lower()
        if lower in _MATH_WORDS or _GREEK.fullmatch(word) and len(word) <= 2:  # "θ", not "ευρώ"
            continue
        if not word.isascii() or len(word) >= 3 or lower in _SHORT_WORDS:
            return True
    return False
