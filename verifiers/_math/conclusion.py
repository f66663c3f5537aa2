r"""Which stated answer is a text's conclusion: commitment, self-correction and hedges.

verifiers/_math/extract.py finds the candidates (boxes, "the answer is" phrases, GSM8K's "####");
this module decides among them, in plain string work linear in the text:
- a statement is committed unless it sits in a question ("Is the answer 16?"), a
  conditional or supposed clause ("If the answer is 16, ..."), quotes ('"the answer is 16"'),
  reported or abandoned thinking ("At first I thought the answer is 16"), or is negated ("the
  answer is not 16");
- the conclusion is the last committed candidate, with format closers ("Final Answer:", "####")
  outranking what precedes them; a later answer replaces an earlier one only across a
  correction ("Wait, that's wrong", "I made an error", "Redoing it gives 18"); otherwise two
  different boxes, or a box and a later different "the answer is", are a hedge;
- a hedge (a second, different value offered next to the conclusion: "$X$, but it could also
  be $Y$", "$X$ (though $Y$ ...)", "\boxed{X} (or $Y$ if ...)") comes back as the list of both,
  which no single gold equals; a restatement ("or equivalently", "about", "i.e.") is no hedge.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from verifiers._math import lexicon
from verifiers._math.exact import eval_rational
from verifiers._math.latex import to_plain
from verifiers._math.sections import check_start


@dataclass(frozen=True)
class Candidate:
    start: int  # where the statement starts (the phrase, the box, the "####")
    end: int  # where its value ends
    value: str
    kind: str  # "box", "close" (a format's closing marker: "Final Answer", "####"), "phrase"
    committed: bool = True


def _ci(pattern: str) -> re.Pattern[str]:
    """A cue pattern: cue words match in any case ("Wait", "WAIT", "wait")."""
    return re.compile(pattern, re.I)


# a sentence ends at . ! ? followed by a space or the end, or at a line break
SENTENCE_END = re.compile(r"(?<!\\)[.!?](?=\s|$)|[。！？।]|\n")  # "\\!" is a TeX space
# words that make what follows them (in their clause) a supposition, not a statement
_SUPPOSED = _ci(
    r"\b(?:if|suppose|supposing|assume|assuming|whether|unless|hypothetically|imagine|"
    r"pretend|might|tempting|mistakenly|wrongly|naively|thought|initially|originally|"
    r"at\s+first|claims?|claimed|wrote|"
    r"(?:check|verify|confirm|test)(?:s|ed|ing)?\s+(?:if|whether|that|our|the|my|this))\b"
    rf"|{lexicon.SUPPOSED}",)
# words after which a clause states again ("If x = 3, then the answer is 5")
_RESUMES = _ci(
    r"\b(?:then|so|therefore|thus|hence|but|however|consequently|instead|actually|now|which\s+means)\b"
    rf"|{lexicon.RESUMES}|;",)  # a semicolon ends a clause ("24 at first; 12 are left")
# a correction: what came before it is withdrawn
CORRECTION = _ci(
    r"\b(?:wrong|mistakes?|mistaken|(?:an?|my|this|that|the|made\s+an?|in)\s+(?:\w+\s+)?error|erroneous|"
    r"incorrect|not\s+(?:right|correct)|oops|"
    r"(?:can'?t|cannot|doesn'?t|does\s+not|isn'?t|won'?t)\s+(?:\w+\s+)?(?:be\s+)?(?:right|correct|work|make\s+sense)|"
    r"too\s+(?:small|large|big|high|low)|"
    r"miscalculat\w*|miscount\w*|misread\w*|redo\w*|re-do\w*|recalculat\w*|recomput\w*|"
    r"reconsider\w*|rethink\w*|re-?examin\w*|re-?evaluat\w*|on\s+second\s+thought|corrections?|"
    r"corrected|scratch\s+that|typo|slip|blunder|(?:over|under|double)[- ]?count\w*|overlooked|"
    r"after\s+(?:re)?checking|fix(?:ing)?\s+(?:this|that|it))\b"
    rf"|{lexicon.CORRECTIONS}",)
# a softer turn: a different answer after it replaces the conclusion only when restated
TURN = _ci(rf"\b(?:wait|hmm+|hold\s+on|actually|instead|let\s+me\s+recheck)\b|{lexicon.TURNS}")
# what leads to a restated answer after a soft turn ("Actually, it is 18")
RESTATED = _ci(
    r"(?:\b(?:it'?s|it\s+is|answer\s+is|gives?|get|gets|got|obtain\w*|should\s+be|must\s+be|equals?|"
    r"comes?\s+(?:out\s+)?to|there\s+(?:are|is)|we\s+have|total\s+is|is\s+actually|is\s+really)\b"
    r"|=)[\s$:*]*(?:[A-Za-z]+\s+){0,2}[\s$]*$",)
# what leads to a concluded value after a correction ("Redoing it gives 18", "3 x 6 = 18")
CONCLUDING = _ci(
    r"(?:\b(?:is|are|was|be|it'?s|that'?s|gives?|get|gets|got|obtain\w*|equals?|makes?|yields?|comes?\s+(?:out\s+)?to|"
    r"totals?|becomes?|answer|so|thus|therefore|hence|results?\s+in|have|has)\b|=|\\approx|≈)"
    r"[\s$:*]*(?:[A-Za-z]+\s+){0,3}[\s$]*$",)
# a second value offered beside the conclusion, each pattern ending where that value starts:
# "\boxed{X} (or $Y$ if ...)" right after it; "it could also be $Y$", "though $Y$ ...",
# "in which case $Y$" in its sentence or the next
_OR_NEXT = _ci(
    rf"{lexicon.UNIT_BETWEEN}(?:\$|\\[)\]]|[\s,;:.!()\[\]*—–、，（-]){{0,6}}(?:\b(?:or|and/or)\b|/|{lexicon.OR_WORDS})\s*"
    r"(?:(?:possibly|maybe|perhaps|even|else|alternatively|just|rather)\s+)?",)
# cues after which any value later in the sentence is an alternative ("unless ..., then 6")
_ELSEWISE = _ci(
    r"\b(?:unless|otherwise|alternatively|or\s+else|if\s+not|if\s+instead|in\s+which\s+case|depending|"
    r"but\s+if)\b"
    rf"|{lexicon.SUPPOSED_ASIDE}"
    r"|\(\s*(?:if|when|for|assuming)\b",)
# doubt about the answer: every value in its sentence is a candidate
_UNSURE = _ci(
    r"\b(?:(?:not\s+(?:sure|certain)|unsure|uncertain|don'?t\s+know)\s+(?:if|whether|between|which)|"
    r"(?:torn|undecided|can'?t\s+decide)\s+between)\b",)
_OFFERED = _ci(
    r"\b(?:(?:could|might|may)\s+(?:(?:also|even|just|equally|instead|actually|well|"
    r"possibly|perhaps)\s+)*(?:be(?:\s+equal\s+to)?|equal|give|make|come\s+out\s+(?:as|to)|say|claim|argue\s+for)"
    r"|would\s+also\s+be|(?:could|might|may|one\s+could|some\s+might)\s+(?:also\s+)?argue\s+for"
    r"|(?:though|although|unless|alternatively|maybe|perhaps|possibly|probably|otherwise|"
    r"or\s+else|in\s+which\s+case)\b[\s,:]*(?:(?:it|the|answer|is|was|it's|be|also|just|even|"
    r"could|might|would|may|value|result|becomes|we|get)\s+){0,4}"
    rf"|{lexicon.HEDGE_BEFORE})[\s:]*",)
# ... or followed by a word that offers it: "12 is also possible"
_POSSIBLE_AFTER = _ci(
    r"\s*(?:\)\s*)?(?:(?:is|are|seems?|remains?|(?:would|could|might|may|can)\s+(?:also\s+|equally\s+)?be)\s+"
    r"(?:also|equally|just\s+as)\s+(?!the\b|a\b|an\b)[a-z]+|(?:is|are|seems?|remains?|(?:would|could|might|may|can)\s+(?:also\s+|equally\s+)?be)\s+"
    r"(?:also\s+|equally\s+|still\s+)?(?:possible|plausible|likely|an?\s+(?:option|possibility|candidate|"
    r"alternative)|valid|correct|right|an?\s+(?:[\w-]+\s+){0,2}(?:answer|solution|option|choice|possibility))"
    r"|(?:is|are)\s+another\s+(?:(?:valid|possible|correct)\s+)?(?:answer|solution|option|possibility)"
    r"|(?:also|equally)\s+(?:works|fits|satisfies|holds)"
    r"|(?:could|might|may|would)\s+(?:also\s+)?(?:work|fit|hold|apply)"
    r"|(?:could|might|may|would|can)\s+(?:also\s+|equally\s+|just\s+as\s+well\s+)?be\s+(?:also\s+)?(?:correct|right|"
    r"valid|possible|acceptable|plausible|the\s+answer|an?\s+(?:answer|solution|option))"
    r"|(?:can'?t|cannot|can\s+not)\s+be\s+(?:ruled\s+out|excluded|dismissed))\b"
    rf"|{lexicon.HEDGE_AFTER}",)
# a value that is part of a computation or a relation, not one offered as the answer
_OPERATOR_NEXT = re.compile(r"\s*(?:[-+*/^=<>]|\\(?:cdot|times|div|le|ge|leq|geq|neq|ne)\b)")
# words that restate the value before them ("or about 1.414", "i.e. 0.5")
_SAME_VALUE = _ci(
    r"\b(?:about|approximately|approx|roughly|around|nearly|i\.e|that\s+is|equivalently|exactly|precisely|"
    r"rather|simplest|simplified|simplifies|lowest|in\s+other\s+words|written|expressed|as\s+an?)\b|\\approx|≈",)
_OPERATOR_BEFORE = re.compile(r"(?:[-+*/^=<>]|\\(?:cdot|times|div))\s*$")
_RELATION = re.compile(r"[=<>]|\\(?:le|ge|leq|geq|neq|ne|lt|gt)\b")
_MAYBE = _ci(r"\b(?:maybe|perhaps|possibly|probably|might|could)\b")
_NEGATED_BEFORE = _ci(
    r"(?:\bnot|n't|\bnever|\bcannot|\binstead\s+of|\brather\s+than|\bthan|≠|\\neq?)"
    r"(?:\s+(?:be|equal|equals|to|exactly|just|simply|actually|possibly))*\W*$",)
_SUPPOSING_ASIDE = re.compile(
    rf"{lexicon.UNIT_BETWEEN}(?=[^()（）]{{0,120}}[)）])([^()（）]*?(?:{lexicon.SUPPOSED}|\bif\b|\bwhen\b|なら|场合|则)[^()（）]*)[)）]",
    re.I,
)
_ASIDE = re.compile(r"\s*[(（][^()（）]*[)）]\s*[.。]?\s*")  # a sentence that is a parenthesis: an aside
_TAIL = 400  # characters after the conclusion in which hedges and corrections are looked for


def sentence_bounds(text: str, pos: int) -> tuple[int, int, str]:
    """(start, end, terminator) of the sentence holding `pos`; terminator "?" marks a question."""
    start = 0
    for m in SENTENCE_END.finditer(text, max(0, pos - 300), pos):
        start = m.end()
    end = SENTENCE_END.search(text, pos)
    if end is None:
        return start, len(text), ""
    return start, end.end(), end.group(0)


def committed(text: str, start: int, mark_end: int) -> bool:
    """Whether the statement starting at `start` (its answer phrase ending at `mark_end`) is
    asserted: not in a question, a supposition, quotes, nor negated."""
    s_start, _, terminator = sentence_bounds(text, mark_end)
    if terminator in ("?", "？"):
        return False
    clause = text[s_start:start]
    resumed = list(_RESUMES.finditer(clause))
    if _SUPPOSED.search(clause, resumed[-1].end() if resumed else 0):
        return False
    if _quoted(text, s_start, start):  # 'One might say "the answer is 16"'
        return False
    return not lexicon.NEGATION_AFTER.match(text[mark_end : mark_end + 12])


def _quoted(text: str, start: int, pos: int) -> bool:
    """Whether `pos` is inside quotes opened after `start`."""
    return bool((text.count('"', start, pos) + text.count("“", start, pos) - text.count("”", start, pos)) % 2)


def negated_before(text: str, start: int) -> bool:
    """ "18, not 16": the value at `start` is one the text rejects."""
    return bool(_NEGATED_BEFORE.search(text[max(0, start - 32) : start]))


def same(a: str, b: str) -> bool:
    return a == b or to_plain(a) == to_plain(b)


def corrected(text: str, start: int, end: int) -> bool:
    """Whether the answer stated at `end` replaces the one before `start`: a correction or a
    turn between them, and the later one not itself offered as a maybe ("Hmm, maybe the
    answer is 3" beside an earlier answer is a hedge, not a correction)."""
    if not (withdrawals(text, start, end, earlier=True) or TURN.search(text, start, end)):
        return False
    return not _MAYBE.search(text, sentence_bounds(text, end)[0], end)


# a correction that looks back at an earlier answer, not at the one just given
_LOOKS_BACK = _ci(r"\b(?:earlier|previously|before|above|at\s+first|initially|first)\b")


def withdrawals(text: str, start: int, end: int, *, earlier: bool = False) -> list[re.Match[str]]:
    """The corrections in text[start:end] that withdraw what precedes them: not one that
    looks back at an earlier answer (unless `earlier`), nor a verdict on a value tried ("if
    the answer is 3, then 27 is too large")."""
    return [m for m in CORRECTION.finditer(text, start, end)
            if (earlier or not about_earlier(text, m)) and not on_trial(text, m)]


def on_trial(text: str, correction: re.Match[str]) -> bool:
    """Whether a correction judges a value tried: its sentence supposes one before it ("If
    the answer were 5, 25 is too large", "Trying 3: too small"), or it opens a sentence ("That
    is too large") right after one that does."""
    start, _, _ = sentence_bounds(text, correction.start())
    if _SUPPOSED.search(text, start, correction.start()) or _TRIAL.search(text, start, correction.start()):
        return True
    if re.fullmatch(r"\s*(?:that|this|it|which|so|then|[^\W\d_]{1,6})?\W*(?:is|was|'s|gives|makes)?\W*",
                    text[start : correction.start()], re.I) and start > 0:
        before, _, _ = sentence_bounds(text, start - 1)
        return bool(_SUPPOSED.search(text, before, start) or _TRIAL.search(text, before, start))
    return False


_TRIAL = _ci(lexicon.TRIAL)


def about_earlier(text: str, correction: re.Match[str]) -> bool:
    """ "(Earlier I wrote 16 by mistake.)": the correction's sentence looks back."""
    start, end, _ = sentence_bounds(text, correction.start())
    return bool(_LOOKS_BACK.search(text, start, end))


def turned_at(text: str, end: int) -> int:
    """Where the last correction or turn before `end` ends (what precedes it is withdrawn),
    -1 without one or when the answer at `end` is itself offered as a maybe."""
    last = -1
    for pattern in (CORRECTION, TURN):
        for m in pattern.finditer(text, 0, end):
            last = max(last, m.end())
    if last < 0 or _MAYBE.search(text, sentence_bounds(text, end)[0], end):
        return -1
    return last


def hedge(text: str, final: Candidate, items) -> str | None:
    """A second, different value offered beside `final` (see _OR_NEXT, _ELSEWISE, _OFFERED,
    _POSSIBLE_AFTER) in the rest of its sentence and the next (past blank lines for a value
    offered as valid, not in a check section), joined to it as a list ("X, Y"); None when
    there is none. `items(text)` lists the math (start, end, value) of a text,
    as verifiers._math.extract reads it."""
    _, s_end, _ = sentence_bounds(text, final.end)
    end = SENTENCE_END.search(text, s_end) if s_end < len(text) else None
    near = min(end.end() if end else len(text), final.end + _TAIL) - final.end
    while s_end < len(text) and text[s_end] == "\n":  # a value offered as valid: past blank lines
        s_end += 1
    end = SENTENCE_END.search(text, s_end) if s_end < len(text) else None
    tail_end = min(end.end() if end else len(text), final.end + _TAIL)
    stop = CORRECTION.search(text, final.end, tail_end)
    tail_end = stop.start() if stop else tail_end
    head = check_start(text, final.end)  # a check's values are the check's
    tail_end = min(tail_end, head) if head is not None else tail_end
    tail = text[final.end : tail_end]
    # (start, end, value, where its cue ends) of each value offered in the tail
    offered = [(a, b, v, 0) for a, b, v in items(tail) if _POSSIBLE_AFTER.match(tail, b)]  # "12 is also possible"
    or_next = _OR_NEXT.match(tail)
    at_once = [m.end() for m in _OFFERED.finditer(tail)] + ([or_next.end()] if or_next else [])
    for at in at_once:  # "it could also be $Y$": the value right after the cue
        found = items(tail[at : at + 160])
        if found and found[0][0] <= 2:
            offered.append((at + found[0][0], at + found[0][1], found[0][2], at))
    elsewise = _ELSEWISE.search(tail, 0, near) or or_next  # "if ..., 6": in the next sentence only
    if elsewise:  # "unless ..., in which case $Y$", "16 or, if ..., 18": any value after it
        at = elsewise.end()
        cut = SENTENCE_END.search(tail, at)
        found = items(tail[at : cut.start() if cut else len(tail)])
        if found and not _SAME_VALUE.search(tail, at, at + found[0][0]):  # not "or about 1.414"
            offered.append((at + found[0][0], at + found[0][1], found[0][2], at))
    aside = _SUPPOSING_ASIDE.match(tail)
    if aside:  # "24 m² (28 m² if the path counts)": any value in a parenthesis that supposes
        offered += [(aside.start(1) + a, aside.start(1) + b, v, aside.start(1)) for a, b, v in items(aside.group(1))]
    unsure = _UNSURE.search(text, final.end, min(len(text), final.end + _TAIL))
    if unsure:  # "I'm not sure if it's 18 or 24", a sentence or two later: any other value in it
        cut = SENTENCE_END.search(text, unsure.end())
        shift = unsure.end() - final.end
        offered += [(shift + a, shift + b, v, shift) for a, b, v in items(text[unsure.end() : cut.start() if cut else len(text)])]
        tail = text[final.end : max(tail_end, cut.start() if cut else len(text))]
    for a, b, value, cue_end in offered:
        if (_OPERATOR_NEXT.match(tail, b) or _OPERATOR_BEFORE.search(tail, cue_end, a)
                or (_RELATION.search(value) and not _RELATION.search(final.value))):
            continue  # part of a computation or a relation
        if not same(value, final.value) and not restates(value, final.value):
            return f"{final.value}, {value}"
    return None


def restates(other: str, exact: str) -> bool:
    """The same number written another way beside a plain one: "4.67" beside "\\frac{14}{3}"
    (the exact value rounded where the decimal stops), "50%" beside "1/2"."""
    plain = to_plain(exact)
    x = eval_rational(plain) if re.fullmatch(r"[\d.+\-*/()]+", plain) else None
    written = other.strip()
    if x is None:
        return False
    if re.fullmatch(r"-?\d+(?:\.\d+)?\s*\\?%", written):
        return Fraction(written.rstrip("%\\ ")) / 100 == x
    m = re.fullmatch(r"-?\d*\.(\d+)", written)
    return bool(m) and abs(Fraction(written) - x) <= Fraction(1, 2 * 10 ** len(m.group(1)))  # type: ignore[union-attr]


def replacement(text: str, after: int, items, *, cue: re.Pattern[str] | None = None) -> Candidate | None:
    """The last asserted math in text[after:] (not in a question or a supposition, not after
    "not"), else None. `cue`: the words that must lead to it in its sentence (RESTATED after
    a soft turn, CONCLUDING after a correction: "I forgot 2 eggs" states no new answer)."""
    pos = len(text)
    while pos > after:
        s_start, s_end, terminator = sentence_bounds(text, pos - 1)
        s_start = max(s_start, after)
        sentence = text[s_start:s_end]
        if terminator != "?" and not _ASIDE.fullmatch(sentence):  # "(24 from the crates and 6 ...)"
            for a, b, value in reversed(items(sentence)):
                if negated_before(sentence, a) or _quoted(sentence, 0, a) or (
                    cue and not cue.search(sentence, max(0, a - 40), a)
                ):
                    continue
                clause = sentence[:a]
                resumed = list(_RESUMES.finditer(clause))
                if not _SUPPOSED.search(clause, resumed[-1].end() if resumed else 0):
                    return Candidate(s_start + a, s_start + b, value, "conclusion")
        pos = s_start
    return None
