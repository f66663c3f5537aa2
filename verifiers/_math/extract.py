r"""Which part of a text is its final answer: plain string work, linear in the text, no sympy.

`answer_of(text)` reads the text after the last `</think>` (an unclosed `<think>` is a cut-off
output with no answer):
  1. its stated answers: the boxes (\boxed, \fbox, \framebox), every "final answer is / the
     answer is / answer: / the answer must be" phrase up to the end of its sentence, GSM8K's
     "#### X". verifiers/_math/conclusion.py picks the conclusion among them: the last committed one
     (not questioned, supposed, quoted or negated), a closing "Final Answer" / "####" over what
     precedes it, a later answer over an earlier one only across a correction; different boxes
     with no correction between, or a second value offered beside the conclusion, are a hedge,
     read as the list of its values (never equal to one gold);
  2. without any: a text with no prose words is the answer itself ("$1$ and $2$", "x \approx 11");
  3. otherwise the last run of math asserted in the text: a $..$ / \(..\) / \[..\] span, a
     compound quantity ("5 hours and 30 minutes") or a number, with runs joined by "and" / "or"
     / "," read as one list ("roots $2$ and $3$"); a question, a supposition, a value after
     "not" are skipped; a correction after it ("We get 18. Wait, that's wrong.") withdraws it.
A number is never read out of LaTeX written without delimiters (the 3 of "\frac{14}{3}").
"""

from __future__ import annotations

import bisect
import re

from verifiers._math.conclusion import (
    CONCLUDING,
    CORRECTION,
    RESTATED,
    SENTENCE_END,
    TURN,
    Candidate,
    about_earlier,
    committed,
    corrected,
    hedge,
    negated_before,
    replacement,
    same,
    turned_at,
)
from verifiers._math.items import BOX, CONNECTOR, MATH_SPAN, math_items, run
from verifiers._math.latex import to_plain
from verifiers._math.quantity import COMPOUND, parts

_PHRASE = re.compile(
    r"\b(?:final\s+answer\b(?:\s*(?:is\b|:|=))?|answer\s*(?:is\b|:|=)"
    r"|answer\s+(?:must|should|would|will|has\s+to|ought\s+to)\s+be\b|answer\s+(?:equals|becomes)\b"
    r"|answer\b(?=\s*[$\\\d(\[{-]))\s*:?(?:\s*\*\*)?",
    re.I,
)
# words between "the answer is" and its math ("is therefore $\frac{14}{3}$")
_FILLER = re.compile(
    r"(?:(?:therefore|thus|hence|so|then|now|simply|just|indeed|clearly|exactly|precisely|"
    r"actually|really|still|finally|definitely|certainly|surely|obviously|evidently|in\s+fact|"
    r"of\s+course|equal\s+to|given\s+by|the\s+(?:value|number|result)|most|very|quite|[a-z]+ly)\b[\s,:*]*)+",
    re.I,
)
# what "the answer is" may be followed by that is a verdict on it, not an answer
_VERDICT_WORDS = {"correct", "right", "wrong", "incorrect", "reasonable", "valid", "accurate",
                  "plausible", "consistent", "clear", "obvious", "below", "above", "follows",
                  "unclear", "unknown", "sensible", "confirmed", "verified", "checked", "sound",
                  "good", "fine", "ok", "okay"}
_WITHDRAWN = 200  # characters after an answer in which "that's wrong" withdraws it
_MAX_PHRASES = 50  # "the answer is" phrases read, the last ones
_LINE = 400  # characters of the sentence after "the answer is" that its answer is read from
_READ = 2000  # characters after "the answer is" in which its answer is read
_MAX_BOXES = 50  # distinct boxed values normalised to tell a repeat from a hedge
_GSM8K = re.compile(r"#{4,}\s*([^\n#]*)")  # "#### #### 0" and "#### 0 ####" hold "0"
_CONTRAST = re.compile(
    r"\b(?:but|or|though|although|alternatively|also|otherwise|maybe|perhaps|possibly|in\s+which\s+case)\b", re.I
)
_ABOUT = re.compile(
    r"\W*(?:or\s+)?(?:about|approximately|approx\.?|roughly|around|nearly|i\.e\.?|that\s+is|"
    r"equivalently|\\approx|≈)\W*",
    re.I,
)
# words that make a text prose rather than an answer: English words of three or more letters
# and the common two-letter ones ("is", "so"); "AB", "cm", "sin" and \text{...} are not prose
_MATH_WORDS = {
    "sqrt", "sin", "cos", "tan", "cot", "sec", "csc", "log", "ln", "exp", "arcsin", "arccos",
    "arctan", "sinh", "cosh", "tanh", "pi", "oo", "inf", "gcd", "lcm", "det", "mod", "and", "or",
    "approx", "infty", "infinity",
}  # fmt: skip
_SHORT_WORDS = {"no", "is", "so", "we", "to", "of", "be", "it", "in", "at", "on", "by", "an", "if",
                "as", "my", "he", "she", "do", "get", "got", "has", "the", "are", "was"}  # fmt: skip


def answer_of(text: str, *, words: bool = True, withdraw: bool = True) -> str | None:
    """The final answer in `text` (a whole solution or already a bare answer), or None.

    words: a short line of words with no math in it ("Evelyn") is itself the answer; without
    it such a text has none (what a search's candidate needs: a marked answer or some math).
    withdraw: an answer followed by "that's wrong" (and no new one) is no answer; a gold's
    text is read without this (a reference answer is never withdrawn).
    """
    after = _after_thinking(text)
    if after is None:
        return None
    text = after
    boxes = _boxes(text)
    phrases = _phrases(text, boxes)  # a phrase that states a box ranks the box instead
    markers = [m for m in _gsm8k(text) if not any(b.start < m.start < b.end for b in boxes)]
    candidates = sorted(boxes + phrases + markers, key=lambda c: c.start)
    if candidates:
        return _conclusion(text, candidates, withdraw)
    bare = _strip_math_delimiters(text.strip()).strip()
    single = "\n" not in bare or "\\begin" in bare
    if bare and single and not _has_prose(bare):
        return bare.rstrip(".").strip() or None
    math = _last_statement(text, 0, withdraw)
    if math is None and words and single and 0 < len(bare) <= 100:
        return bare.rstrip(".").strip() or None
    return math


def _conclusion(text: str, candidates: list[Candidate], withdraw: bool) -> str | None:
    """The conclusion among the stated answers (see verifiers._math.conclusion): the last committed
    one, across corrections; a hedge comes back as the list of its values."""
    stated = [c for c in candidates if c.committed]
    strong = [c for c in stated if c.kind != "phrase"]
    if strong:
        final = strong[-1]
        later = [c for c in stated if c.kind == "phrase" and c.start >= final.end]
        if later and not same(later[-1].value, final.value):
            if not corrected(text, final.end, later[-1].start):
                return f"{final.value}, {later[-1].value}"  # "\boxed{5}. Maybe the answer is 3."
            final = later[-1]
        elif final.kind != "close":  # boxes that disagree, with no correction between: a hedge
            earlier = [c for c in strong if c.end <= final.start and c.value != final.value]
            if earlier:  # those before a correction are withdrawn
                since = turned_at(text, final.start)
                earlier = [c for c in earlier if c.end >= since]
            distinct = list(dict.fromkeys(c.value for c in earlier))
            if len(distinct) > _MAX_BOXES:  # a text boxing dozens of values answers nothing
                return ", ".join([*distinct, final.value])
            rivals = {to_plain(v): v for v in [*distinct, final.value] if not same(v, final.value)}
            if rivals:
                return ", ".join([*rivals.values(), final.value])
    elif stated:
        final = stated[-1]
    else:  # only supposed, questioned or negated answers: what the text asserts besides them
        return _last_statement(text, 0, withdraw)
    correction = [m for m in CORRECTION.finditer(text, final.end) if not about_earlier(text, m)]
    if correction:  # "\\boxed{16}. Wait, that's wrong ... Redoing it gives 18."
        found = replacement(text, correction[-1].end(), math_items, cue=CONCLUDING)
        if found is None and withdraw and correction[0].start() - final.end < _WITHDRAWN:
            return None  # withdrawn right after it, and nothing stated instead
    else:  # "The answer is 16. Actually, it's 18."
        turned = TURN.search(text, final.end)
        found = replacement(text, turned.end(), math_items, cue=RESTATED) if turned else None
    if found is not None and not same(found.value, final.value):
        if not corrected(text, final.end, found.start):
            return f"{final.value}, {found.value}"  # "16. Hmm, maybe it's 18."
        final = found
    return hedge(text, final, math_items) or final.value


def _last_statement(text: str, start: int, withdraw: bool) -> str | None:
    """The last run of math asserted in text[start:] (not in a question, a supposition or
    after "not"), None when a correction follows it; a hedge beside it makes it a list."""
    found = replacement(text, start, math_items)
    if found is None or withdraw and CORRECTION.search(text, found.end):  # "We get 18. Wait, that's wrong."
        return None
    before = text[start : found.end]
    items = math_items(before)
    final = Candidate(found.start, found.end, run(before, items), "conclusion")
    if len(items) > 1 and _ABOUT.fullmatch(before, items[-2][1], items[-1][0]):
        a, b, value = items[-2]  # "$\\sqrt{2}$, or about $1.414$": the exact value
        final = Candidate(start + a, start + b, value, "conclusion")
    elif len(items) > 1:  # "$X$, but it could also be $Y$": the last value offered beside another
        a, b, value = items[-2]
        if _CONTRAST.search(before, b, items[-1][0]):
            offered = hedge(text, Candidate(start + a, start + b, value, "conclusion"), math_items)
            if offered and offered.endswith(f", {found.value}"):
                return offered
    return hedge(text, final, math_items) or final.value


def _after_thinking(text: str) -> str | None:
    """The text after the last `</think>`; None when a `<think>` is never closed."""
    if "</think>" in text:
        return text.rsplit("</think>", 1)[1]
    if "<think>" in text:
        return None
    return text


def _boxes(text: str) -> list[Candidate]:
    """Every box (\\boxed, \\fbox, \\framebox) with its content; a box inside a box is part
    of the outer one; an unclosed one (a truncated output) holds nothing."""
    out: list[Candidate] = []
    end = -1
    closing = _closing_braces(text)
    for m in BOX.finditer(text):
        if m.start() < end:
            continue
        j = m.end()
        while j < len(text) and text[j] == " ":
            j += 1
        if j < len(text) and text[j] == "{":
            end = closing.get(j, -1)
            if end < 0:
                continue
            content = text[j + 1 : end]
        else:  # "\boxed 5"
            content = re.match(r"[^\s$]*", text[j:]).group(0)  # type: ignore[union-attr]
            end = j + len(content)
        content = _unbox(re.sub(r"^[#\s]+", "", content).strip())  # "\boxed{#### 5}"
        if content:
            out.append(Candidate(m.start(), end + 1, content, "box"))
    return out


def _unbox(content: str) -> str:
    """ "\\boxed{2}" -> "2": a box written inside a box."""
    while True:
        m = BOX.match(content)
        if not (m and content[m.end() :].lstrip().startswith("{")):
            return content
        j = content.index("{", m.end())
        end = _closing_braces(content).get(j, -1)
        if end != len(content) - 1:
            return content
        content = content[j + 1 : end].strip()


def _closing_braces(text: str) -> dict[int, int]:
    """Index of each `{` -> index of its `}` (escaped braces are not grouping), in one pass."""
    stack: list[int] = []
    pairs: dict[int, int] = {}
    for k, c in enumerate(text):
        if c in "{}" and k and text[k - 1] == "\\":
            continue
        if c == "{":
            stack.append(k)
        elif c == "}" and stack:
            pairs[stack.pop()] = k
    return pairs


def _phrases(text: str, boxes: list[Candidate]) -> list[Candidate]:
    """Every "the answer is" with the answer it states (this line, or the next when it ends
    there). A phrase whose answer is a box hands its rank to the box ("Final Answer:
    \\boxed{5}" is a closing box) and states nothing itself."""
    out: list[Candidate] = []
    box_starts = [b.start for b in boxes]
    for mark in list(_PHRASE.finditer(text))[-_MAX_PHRASES:]:  # the conclusion is among the last
        final = mark.group(0).lower().startswith("final")
        rest = text[mark.end() : mark.end() + _READ].lstrip(" \t*:")
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
            value = _sentence_answer(line[: stop.end() if stop else _LINE])
            reach = text.find(line, offset) + len(line)
        k = bisect.bisect_left(box_starts, mark.end())
        if k < len(boxes) and boxes[k].start < reach:  # the phrase states a box
            if final and boxes[k].kind == "box":
                boxes[k] = Candidate(boxes[k].start, boxes[k].end, boxes[k].value, "close")
            continue
        first = re.match(r"[\s*:]*(?:(?:very|quite|probably|definitely|surely|indeed|also)\s+)*([A-Za-z]+)", rest)
        if not value or (first and first.group(1).lower() in _VERDICT_WORDS):  # "the answer is correct"
            continue
        tail = value.rsplit(",", 1)[-1].strip()[-12:]
        at = text.find(tail, offset, reach) if tail else -1
        end = at + len(tail) if at >= 0 else reach
        end += len(re.match(r"[$\s]*(?:\\[)\]])?\$*", text[end:end + 4]).group(0))  # type: ignore[union-attr]
        kind = "close" if final and re.search(r"[\d\\]", value) else "phrase"
        out.append(Candidate(mark.start(), end, value, kind, committed(text, mark.start(), mark.end())))
    return out


def _sentence_answer(sentence: str) -> str | None:
    """ "$\\frac{3}{4}$. Done" -> "\\frac{3}{4}"; "42 apples." -> "42 apples"; "therefore
    $\\frac{14}{3}$." -> "\\frac{14}{3}" (adverbs before the math are skipped); "5 hours and 30
    minutes" whole; "The largest $n$ is 34." -> "34" (a sentence that starts in words: its
    last math)."""
    s = sentence.replace("\\$", "").strip().lstrip("*").strip()
    s = re.sub(r"^[#\s]+", "", s)  # "The answer is #### 5": the GSM8K marker is not part of it
    s = re.sub(r'^\\?["\']|\\?["\']\s*\.?$', "", s.strip())  # quoted: "\"$12$ and $13$\""
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
    cut = re.split(r"\.(?:\s|$)|\*\*", s)[0].strip()
    s = cut.strip("$").rstrip(".").strip()
    if not s:
        return None
    head = re.match(r"[A-Za-z]+", s)
    if head and _has_prose(head.group(0)):  # "The answer is Evelyn."; "the sum, 10, not 12"
        items = [it for it in math_items(cut) if not negated_before(cut, it[0])]
        return run(cut, items) if items else s
    return _before_prose(s)


def _before_prose(s: str) -> str:
    """ "12 because x = 5" -> "12": math ends at the first prose word outside braces (units
    such as "cm" and words inside \\text{...} are no prose)."""
    depth = 0
    for k, c in enumerate(s):
        depth += (c == "{") - (c == "}")
        if depth == 0 and c.isspace():
            word = re.match(r"\s+[(—–]?\s*([A-Za-z]+)\b", s[k:])
            if word and _has_prose(word.group(1)) and k > 0:  # "... and she wins": no "and"
                return re.sub(r"(?:\s*[,;:(\[—–]|\s+-|\s+(?:and|or))+\s*$", "", s[:k]).strip()
    return s


def _gsm8k(text: str) -> list[Candidate]:
    """Every GSM8K "#### X" that is followed by something (a closing marker)."""
    out = []
    for mark in _GSM8K.finditer(text):
        answer = mark.group(1).strip().rstrip(".").strip()
        if answer:
            out.append(Candidate(mark.start(), mark.end(), answer, "close"))
    return out


def _strip_math_delimiters(text: str) -> str:
    text = re.sub(r"\\[()\[\]]", " ", text.replace("\\$", ""))
    return text.replace("$", " ")


def _has_prose(text: str) -> bool:
    """Whether `text` has words: a LaTeX command and its {letters} argument are not words."""
    text = re.sub(r"\\[A-Za-z]+\*?(?:\s*\{[^{}]*\})?", " ", text)
    for word in re.findall(r"[A-Za-z]+", text):
        lower = word.lower()
        if lower in _MATH_WORDS:
            continue
        if len(word) >= 3 or lower in _SHORT_WORDS:
            return True
    return False
