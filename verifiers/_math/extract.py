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

import functools
import re
from dataclasses import dataclass

from verifiers._math.conclusion import (
    CONCLUDING,
    RESTATED,
    TURN,
    Candidate,
    corrected,
    hedge,
    negated_before,
    replacement,
    restates,
    same,
    turned_at,
    withdrawals,
)
from verifiers._math.doubt import doubt
from verifiers._math.forms import rewrite
from verifiers._math.items import BOX, math_items, run
from verifiers._math.languages import decimal_comma, identify, translate
from verifiers._math.latex import to_plain
from verifiers._math.layout import bold, run_on, tables
from verifiers._math.lexicon import HEDGE_BETWEEN, UNIT_BETWEEN
from verifiers._math.phrases import has_prose, phrases
from verifiers._math.sections import abstention, check_start, declined, final_line

_WITHDRAWN = 200  # characters after an answer in which "that's wrong" withdraws it
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
_HEDGED = re.compile(HEDGE_BETWEEN, re.I)  # another language's "or maybe" between two values
_UNIT_FIRST = re.compile(rf"^{UNIT_BETWEEN}")
# "we should not write $\boxed{10}$": a negation a few words before a box
_NOT_WRITTEN = re.compile(r"(?:\bnot|n't|\bnever)\s+(?:[A-Za-z]+\s+){0,2}[$\\(\[\s]*$", re.I)
_MARKUP = re.compile(r"^(\*{1,3}|_{2})(.+?)\1$", re.S)  # "**120**": bold around an answer


@dataclass(frozen=True)
class Reading:
    """What a text answers: `answer` (None for none), `abstained`, the words of a refusal
    ("cannot determine") when the text declines to answer, and `unread`, why the conclusion
    was not read with confidence (verifiers._math.doubt), when asked to abstain."""

    answer: str | None
    abstained: str | None = None
    unread: str | None = None


# "3,5" in a language that writes a decimal comma: not in a list ("1,2,3") nor English
# thousands (three digits after the comma)
_DECIMAL_COMMA = re.compile(r"(?<![\d,.])(\d+),(\d{1,2}|\d{4,})(?![\d]|,\d)")


def answer_of(text: str, *, words: bool = True, withdraw: bool = True) -> str | None:
    """The final answer in `text` (a whole solution or already a bare answer), or None.

    words: a short line of words with no math in it ("Evelyn") is itself the answer; without
    it such a text has none (what a search's candidate needs: a marked answer or some math).
    withdraw: an answer followed by "that's wrong" (and no new one) is no answer, and so is a
    refusal ("I cannot determine the answer"); a gold's text is read without this (a reference
    answer is never withdrawn).
    """
    return read(text, words=words, withdraw=withdraw).answer


# a search reads its candidates' texts again to score, select and grade them (one text
# ~10 times in a grid): each is read once while it is recent
@functools.lru_cache(maxsize=4096)
def read(text: str, *, words: bool = True, withdraw: bool = True, abstain: bool = False) -> Reading:
    """`answer_of`, with the refusal that made it None when one did. abstain: a conclusion
    not read with confidence (verifiers._math.doubt) is no answer, its reason `unread`.
    (A Reading is frozen: the cached one is handed to every caller.)"""
    after = _after_thinking(text)
    if after is None:
        return Reading(None, unread="cut off inside a <think> block" if abstain else None)
    text = rewrite(after)
    lang = identify(text)
    if lang and lang != "en":
        text = translate(text, lang)
        if decimal_comma(lang):
            text = _DECIMAL_COMMA.sub(r"\1.\2", text)
    text = run_on(tables(text))
    reading, marked, last_end = _read(text, words, withdraw)
    if abstain and reading.answer is not None:
        reason = doubt(text, lang, marked=marked, last_end=last_end)
        if reason:
            return Reading(None, reading.abstained, reason)
    return reading


def _read(text: str, words: bool, withdraw: bool) -> tuple[Reading, bool, int]:
    """The reading of a rewritten text, whether an answer was stated (a marker, a box, a final
    line) and where the last one stated ends (-1 for none)."""
    boxes = _boxes(text)
    stated = phrases(text, boxes)  # a phrase that states a box ranks the box instead
    markers = [m for m in _gsm8k(text) if not any(b.start < m.start < b.end for b in boxes)]
    candidates = sorted(boxes + stated + markers + _final_line(text, boxes), key=lambda c: c.start)
    if not candidates:
        candidates = bold(text)
    last_end = max((c.end for c in candidates if c.committed), default=-1)
    if withdraw:
        last = max((c.start for c in candidates if c.committed), default=-1)
        refusal = abstention(text, last) or (declined(text) if last < 0 else None)
        if refusal:
            return Reading(None, refusal), True, last_end
    if candidates:
        checked = _checked(text, candidates)
        value = checked if isinstance(checked, str) else _conclusion(text, checked, withdraw)
        return Reading(value), last_end >= 0, last_end
    bare = _unmark(_strip_math_delimiters(text.strip()).strip())
    single = "\n" not in bare or "\\begin" in bare
    if bare and single and not has_prose(bare):
        return Reading(bare.rstrip(".").strip() or None), True, len(text)
    math = _before_check(text, withdraw) or _last_statement(text, 0, withdraw)
    if math is None and words and single and 0 < len(bare) <= 100:  # "Evelyn"; with digits, unsure
        return Reading(bare.rstrip(".").strip() or None), not re.search(r"\d", bare), len(text)
    return Reading(math), False, -1


def _final_line(text: str, boxes: list[Candidate]) -> list[Candidate]:
    """A last line that states an answer by its form ("**D**", "**(B) 27**"), as a weak
    marker; none when it is a box's or holds prose."""
    line = final_line(text)
    if line is None or has_prose(line[2]) or any(b.end > line[0] for b in boxes):
        return []
    return [Candidate(line[0], line[1], line[2], "phrase")]


def _checked(text: str, candidates: list[Candidate]) -> list[Candidate] | str:
    """The candidates with a check section's restatements dropped; a different answer stated
    in the check with no correction between is a hedge (the list of both)."""
    first = next((c for c in candidates if c.committed), None)
    head = check_start(text, first.end) if first else None
    if head is None:
        return candidates
    conclusion = [c for c in candidates if c.committed and c.end <= head][-1]
    inside = [c for c in candidates if c.start >= head and c.committed and c.kind == "phrase"]
    for c in inside:
        if not same(c.value, conclusion.value) and not restates(c.value, conclusion.value):
            if corrected(text, conclusion.end, c.start):
                return candidates
            return f"{conclusion.value}, {c.value}"
    return [c for c in candidates if c not in inside]


def _before_check(text: str, withdraw: bool) -> str | None:
    """With no stated answer: the last statement before a check section, when the check
    names it (it checks that value) and withdraws nothing; else None."""
    head = check_start(text, 0)
    if head is None:
        return None
    found = _last_statement(text[:head], 0, withdraw)
    if found is None or withdrawals(text, head, len(text)):
        return None
    named = any(same(value, found) for _, _, value in math_items(text[head:]))
    return found if named else None


def _unmark(value: str) -> str:
    """ "**120**" -> "120": markdown emphasis around a whole answer is no part of it."""
    m = _MARKUP.match(value.strip())
    return m.group(2).strip() if m else value


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
    correction = withdrawals(text, final.end, len(text))
    if correction:  # "\\boxed{16}. Wait, that's wrong ... Redoing it gives 18."
        found = replacement(text, correction[-1].end(), math_items, cue=CONCLUDING)
        if found is None and withdraw and correction[0].start() - final.end < _WITHDRAWN:
            return None  # withdrawn right after it, and nothing stated instead
    else:  # "The answer is 16. Actually, it's 18."
        head = check_start(text, final.end)  # a check's "let me check" turns nothing
        turned = TURN.search(text, final.end, len(text) if head is None else head)
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
    if found is None or withdraw and withdrawals(text, found.end, len(text), earlier=True):  # "We get 18. Wait, that's wrong."
        return None
    before = text[start : found.end]
    items = math_items(before)
    final = Candidate(found.start, found.end, run(before, items), "conclusion")
    if len(items) > 1 and _ABOUT.fullmatch(re.sub(_UNIT_FIRST, "", before[items[-2][1] : items[-1][0]], count=1)) and (
        re.search(r"[,(≈]|\\approx|\bor\b", before[items[-2][1] : items[-1][0]])  # "58 sheep, i.e. ⅞", not "4 hours that is 240"
    ):
        a, b, value = items[-2]  # "$\\sqrt{2}$, or about $1.414$": the exact value
        final = Candidate(start + a, start + b, value, "conclusion")
    elif len(items) > 1:  # "$X$, but it could also be $Y$": the last value offered beside another
        a, b, value = items[-2]
        if _HEDGED.search(before, b, items[-1][0]) and "\n" not in before[b : items[-1][0]]:
            return f"{value}, {found.value}"  # "58 moutons, voire 60", "58 只，也有可能是 60 只"
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
        if content:  # "it is not \boxed{5}" states nothing
            negated = negated_before(text, m.start()) or _NOT_WRITTEN.search(text, max(0, m.start() - 40), m.start())
            out.append(Candidate(m.start(), end + 1, content, "box", not negated))
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


def _gsm8k(text: str) -> list[Candidate]:
    """Every GSM8K "#### X" that is followed by something (a closing marker)."""
    out = []
    for mark in _GSM8K.finditer(text):
        answer = _unmark(mark.group(1).strip().rstrip(".").strip())
        if answer:
            out.append(Candidate(mark.start(), mark.end(), answer, "close"))
    return out


def _strip_math_delimiters(text: str) -> str:
    text = re.sub(r"\\[()\[\]]", " ", text.replace("\\$", ""))
    return text.replace("$", " ")

