r"""Which part of a text is its final answer: plain string work, linear in the text, no sympy.

`answer_of(text)` reads, in order of trust:
  1. the boxes (\boxed, \fbox, \framebox) after the last `</think>`; boxes that disagree are
     all kept, joined as a list ("1, 3"), so a hedge never passes as its last box; only a
     "final answer: <math>" stated after the last box overrides them;
  2. the last "final answer is / the answer is / answer:" phrase, up to the end of its sentence;
  3. GSM8K's "#### X";
  4. a text with no prose words is the answer itself ("$1$ and $2$", "x \approx 11");
  5. otherwise the last run of math in the text: a $..$ / \(..\) / \[..\] span or a number,
     with runs joined by "and" / "or" / "," read as one list ("roots $2$ and $3$").
A `<think>` block never holds the answer; an unclosed one (a truncated output) holds no answer.
"""

from __future__ import annotations

import bisect
import re

from verifiers._latex import to_plain

BOX = re.compile(r"\\(?:boxed|fbox|framebox)(?![A-Za-z])")
_PHRASE = re.compile(
    r"\b(?:final\s+answer\b(?:\s*(?:is\b|:|=))?|answer\s*(?:is\b|:|=)"
    r"|answer\b(?=\s*[$\\\d(\[{-]))\s*:?(?:\s*\*\*)?",
    re.I,
)
_MAX_BOXES = 50  # distinct boxed values normalised to tell a repeat from a hedge
_GSM8K = re.compile(r"#{4,}\s*([^\n#]*)")  # "#### #### 0" and "#### 0 ####" hold "0"
# a number as written in prose: signs, thousands separators, decimals, simple fractions
NUMBER = re.compile(
    r"(?<![\w.])(?:(?<![\w)])-)?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d{1,3}(?: \d{3})+(?!\d)|\d+)(?:\.\d+)?(?:\s*/\s*\d+)?"
)
_MATH_SPAN = re.compile(r"\$\$(.+?)\$\$|\\\[(.+?)\\\]|\$([^$]+?)\$|\\\((.+?)\\\)", re.S)
_CONNECTOR = re.compile(r"\s*(?:,|(?:,\s*)?\b(?:and|or)\b)\s*", re.I)
# words that make a text prose rather than an answer: English words of three or more letters
# and the common two-letter ones ("is", "so"); "AB", "cm", "sin" and \text{...} are not prose
_MATH_WORDS = {
    "sqrt", "sin", "cos", "tan", "cot", "sec", "csc", "log", "ln", "exp", "arcsin", "arccos",
    "arctan", "sinh", "cosh", "tanh", "pi", "oo", "inf", "gcd", "lcm", "det", "mod", "and", "or",
    "approx", "infty", "infinity",
}  # fmt: skip
_SHORT_WORDS = {"is", "so", "we", "to", "of", "be", "it", "in", "at", "on", "by", "an", "if",
                "as", "my", "he", "she", "do", "get", "got", "has", "the", "are", "was"}  # fmt: skip


def answer_of(text: str, *, words: bool = True) -> str | None:
    """The final answer in `text` (a whole solution or already a bare answer), or None.

    words: a short line of words with no math in it ("Evelyn") is itself the answer; without
    it such a text has none (what a search's candidate needs: a marked answer or some math).
    """
    after = _after_thinking(text)
    if after is None:
        return None
    text = after
    boxed, box_end = _boxed(text)
    phrase, phrase_start = _phrase(text)
    # a "final answer" stated after the boxes overrides them ("\\boxed{200} ... Final answer:
    # $10,455$") when it is math; "maybe the answer is 3" after a box does not
    final = phrase_start >= 0 and text[phrase_start:].lower().startswith("final")
    if phrase and phrase_start > box_end and (box_end < 0 or final and re.search(r"[\d\\]", phrase)):
        return phrase
    answer = boxed or phrase or _gsm8k(text)
    if answer:
        return answer
    bare = _strip_math_delimiters(text.strip()).strip()
    single = "\n" not in bare or "\\begin" in bare
    if bare and single and not _has_prose(bare):
        return bare.rstrip(".").strip() or None
    math = _last_math(text)
    if math is None and words and single and 0 < len(bare) <= 100:
        return bare.rstrip(".").strip() or None
    return math


def _after_thinking(text: str) -> str | None:
    """The text after the last `</think>`; None when a `<think>` is never closed."""
    if "</think>" in text:
        return text.rsplit("</think>", 1)[1]
    if "<think>" in text:
        return None
    return text


def _boxed(text: str) -> tuple[str | None, int]:
    """The boxes' contents (one answer if they agree, else all of them as a list) and where
    the last box ends (-1 without boxes)."""
    contents: list[str] = []
    end = last = -1  # a box inside a box ("\boxed{\boxed{2}}") is part of the outer one
    closing = _closing_braces(text)
    for m in BOX.finditer(text):
        if m.start() < end:
            continue
        j = m.end()
        while j < len(text) and text[j] == " ":
            j += 1
        if j < len(text) and text[j] == "{":
            end = closing.get(j, -1)
            if end < 0:  # unclosed (a truncated output): no answer in it
                continue
            content = text[j + 1 : end]
        else:  # "\boxed 5"
            content = re.match(r"[^\s$]*", text[j:]).group(0)  # type: ignore[union-attr]
            end = j + len(content)
        content = _unbox(re.sub(r"^[#\s]+", "", content).strip())  # "\boxed{#### 5}"
        if content:
            contents.append(content)
            last = end
    if not contents:
        return None, -1
    distinct = list(dict.fromkeys(contents))
    if len(distinct) > _MAX_BOXES:  # a text boxing dozens of values answers nothing
        return ", ".join(distinct), last
    by_key = {to_plain(c): c for c in distinct}  # "\\textbf{(113)}" and "113" are one answer
    if len(by_key) == 1:
        return contents[-1], last
    return ", ".join(by_key.values()), last


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


def _phrase(text: str) -> tuple[str | None, int]:
    """The answer after the last "the answer is" (this line, or the next when it ends there),
    and where that phrase starts (-1 without one)."""
    marks = list(_PHRASE.finditer(text))
    if not marks:
        return None, -1
    rest = text[marks[-1].end() :].lstrip(" \t*:")
    display = _MATH_SPAN.match(rest.lstrip())  # "Answer:\n\\[ 9 \\]" spans lines
    if display and rest.lstrip()[:2] in ("$$", "\\["):
        return next(g for g in display.groups() if g is not None).strip() or None, marks[-1].start()
    line, _, after = rest.partition("\n")
    if not line.strip():  # "**Final Answer**\n$$ 5 $$"
        line = after.lstrip("\n").split("\n\n", 1)[0]
    return _sentence_answer(line), marks[-1].start()


def _sentence_answer(sentence: str) -> str | None:
    """ "$\\frac{3}{4}$. Done" -> "\\frac{3}{4}"; "42 apples." -> "42 apples";
    "The largest $n$ is 34." -> "34" (a sentence that starts in words: its last math)."""
    s = sentence.replace("\\$", "").strip().lstrip("*").strip()
    s = re.sub(r"^[#\s]+", "", s)  # "The answer is #### 5": the GSM8K marker is not part of it
    s = re.sub(r'^\\?["\']|\\?["\']\s*\.?$', "", s.strip())  # quoted: "\"$12$ and $13$\""
    if _MATH_SPAN.match(s):  # "$12$ and $13$.": the spans joined to the first one
        items = _math_items(s)
        run = [items[0]]
        for item in items[1:]:
            if not _CONNECTOR.fullmatch(s[run[-1][1] : item[0]]):
                break
            run.append(item)
        return ", ".join(it[2] for it in run)
    s = re.split(r"\.(?:\s|$)|\*\*", s)[0].strip().strip("$").rstrip(".").strip()
    if not s:
        return None
    head = re.match(r"[A-Za-z]+", s)
    if head and _has_prose(head.group(0)):
        return _last_math(s) or s  # "The answer is Evelyn."
    return _before_prose(s)


def _before_prose(s: str) -> str:
    """ "12 because x = 5" -> "12": math ends at the first prose word outside braces (units
    such as "cm" and words inside \\text{...} are no prose)."""
    depth = 0
    for k, c in enumerate(s):
        depth += (c == "{") - (c == "}")
        if depth == 0 and c.isspace():
            word = re.match(r"\s+([A-Za-z]+)\b", s[k:])
            if word and _has_prose(word.group(1)) and k > 0:  # "... and she wins": no "and"
                return re.sub(r"(?:\s*,|\s+(?:and|or))+\s*$", "", s[:k]).strip()
    return s


def _gsm8k(text: str) -> str | None:
    for mark in list(_GSM8K.finditer(text))[::-1]:  # the last marker followed by something
        answer = mark.group(1).strip().rstrip(".").strip()
        if answer:
            return answer
    return None


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


def _last_math(text: str) -> str | None:
    """The last run of math in prose: a math span or a number, with the runs before it that
    are joined to it by "and" / "or" / "," ("$1$, $2$ and $3$" -> "1, 2, 3")."""
    items = _math_items(text)
    if not items:
        return None
    run = [items[-1]]
    for item in reversed(items[:-1]):
        gap = text[item[1] : run[0][0]]
        if not _CONNECTOR.fullmatch(gap):
            break
        run.insert(0, item)
    return ", ".join(it[2] for it in run)


def _math_items(text: str) -> list[tuple[int, int, str]]:
    """(start, end, math) of every math span and every number outside them, in order."""
    items: list[tuple[int, int, str]] = []
    for m in _MATH_SPAN.finditer(text):
        items.append((m.start(), m.end(), next(g for g in m.groups() if g is not None).strip()))
    starts = [a for a, _, _ in items]  # spans do not overlap: a number is inside at most one
    for m in NUMBER.finditer(text):
        k = bisect.bisect_right(starts, m.start()) - 1
        if k < 0 or m.start() >= items[k][1]:
            items.append((m.start(), m.end(), m.group(0)))
    return [it for it in sorted(items) if it[2]]
