"""The math in a stretch of prose: spans, compound quantities and numbers, in order.

`math_items(text)` lists (start, end, math) for every $..$ / \\(..\\) / \\[..\\] span, every
compound quantity ("5 hours and 30 minutes"), number in scientific notation ("3.2 × 10^{5}"),
run of number words ("forty-two", as "42"; these two in the last 2000 characters) and every
number outside them; `run` joins the
last item to the ones before it that "and" / "or" / "," connect ("$1$, $2$ and $3$" -> "1, 2,
3"). Plain string work, linear in the text.
"""

from __future__ import annotations

import bisect
import re

from verifiers._math.conclusion import restates, same
from verifiers._math.lexicon import CONNECTOR_WORDS, OR_WORDS, UNIT_BETWEEN
from verifiers._math.numwords import NUMBER_WORDS, prose_number
from verifiers._math.quantity import COMPOUND, parts

BOX = re.compile(r"\\(?:boxed|fbox|framebox)(?![A-Za-z])")
# what makes the number before it part of a LaTeX expression (not "90^\\circ", "40\\%", "5\\text{ cm}")
_LATEX_AFTER = re.compile(r"\^(?!\s*\{?\s*\\circ)|_|\}|\{|\\(?![%,!;: $]|text|mbox|mathrm|textrm|circ|degree)")
BOX_OPEN = re.compile(r"\\(?:boxed|fbox|framebox)\s*\{$")
# a number as written in prose: signs, thousands separators, decimals, simple fractions
NUMBER = re.compile(
    r"(?<![A-Za-z0-9_.\u0370-\u03ff])(?:(?<![\w)])-)?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d{1,3}(?: \d{3})+(?!\d)|\d+)(?:\.\d+)?(?:\s*/\s*\d+)?"
)
MATH_SPAN = re.compile(r"\$\$(.+?)\$\$|\\\[(.+?)\\\]|\$([^$]+?)\$|\\\((.+?)\\\)", re.S)
# LaTeX written without delimiters: "2\\sqrt{3}", "\\frac{14}{3}", "\\pi/6" (one item, whole)
BARE_LATEX = re.compile(
    r"(?<![\w\\$}{])-?\d*(?:\.\d+)?\\(?:[dt]?frac|sqrt|pi|[dt]?binom)(?![A-Za-z])[\w{}\[\]^+\-*/().\\]*"
)
# a number in scientific notation as prose writes it: "3.2 × 10^{5}", "6 \\times 10^{-3}"
SCIENTIFIC = re.compile(r"(?<![A-Za-z0-9_.^{])-?\d+(?:\.\d+)?\s*(?:×|\\times|\\cdot|·)\s*10\s*\^\s*(?:\{\s*-?\d+\s*\}|-?\d+)")
# algebra written in prose without $: "4x^{3} + 2x", "3x^{2} - 5x + 2", "9a^{2}" (superscripts
# are rewritten to ^{..} first): terms of a number and a one-letter variable with a power, or a
# variable after a number ("2x", not "5km": the letter ends the word), joined by + and -; one
# item, whole, when a term has a power or a variable follows a number next to an operator
_TERM = r"(?:\d+(?:\.\d+)?)?[a-z](?:\^\{-?\d+\}|\^\d)?(?![A-Za-z])|\d+(?:\.\d+)?(?!\d|\.\d)"
PROSE_ALGEBRA = re.compile(
    rf"(?<![\w.^{{\\])-?(?:{_TERM})(?:\s*[-+]\s*(?:{_TERM}))*(?![\w^{{])"
)
_POWERED = re.compile(r"\d[a-z]\^|[a-z]\^.*\s[-+]\s")
_PRODUCT = re.compile(r"\d[a-z](?![A-Za-z])")
_WORDS_REACH = 2000  # characters before the end in which numbers in words or in 10^k notation are read
CONNECTOR = re.compile(rf"\s*(?:[,、，]|(?:[,、，]\s*)?(?:\b(?:and|or)\b|{CONNECTOR_WORDS}))\s*", re.I)
# a unit, then "or": "24 m², or 28 m²" (not "and": "3 apples and -4.5 pears" is no list)
_UNIT_CONNECTOR = re.compile(rf"{UNIT_BETWEEN}\s*[,、，]?\s*(?:\bor\b|{OR_WORDS})\s*", re.I)


def run(text: str, items: list[tuple[int, int, str]]) -> str:
    """The last item with the ones joined to it by connectors, as one list; the same value
    written twice is one item ("$\\frac{1}{2}$ or $0.5$", "1/2 or 50%")."""
    joined = [items[-1]]
    for item in reversed(items[:-1]):
        gap = text[item[1] : joined[0][0]]
        if not (CONNECTOR.fullmatch(gap) or _UNIT_CONNECTOR.fullmatch(gap)):
            break
        joined.insert(0, item)
    values: list[str] = []
    for _, _, value in joined:
        if not any(same(value, v) or restates(value, v) or restates(v, value) for v in values):
            values.append(value)
    return ", ".join(values)


def math_items(text: str) -> list[tuple[int, int, str]]:
    """(start, end, math) of every math span, compound quantity ("5 hours and 30 minutes")
    and number outside them, in order. A number that is part of LaTeX written without its
    delimiters (the 3 of "\\frac{14}{3}", the 6 of "\\pi/6", an exponent) is no item, nor is
    one after an unclosed "$\\" (a cut-off span)."""
    items: list[tuple[int, int, str]] = []
    for m in MATH_SPAN.finditer(text):
        items.append((m.start(), m.end(), next(g for g in m.groups() if g is not None).strip()))
    if "$" in text:  # a "$" outside every span that opens LaTeX: nothing after it is prose math
        stray = re.compile(r"\$(?=\s*[\\{^_])").search(
            "".join(" " * (b - a) if k % 2 else text[a:b] for k, (a, b) in enumerate(_gaps(text, items))))
        limit = stray.start() if stray else len(text)
    else:
        limit = len(text)
    spans = [(a, b) for a, b, _ in items]
    span_starts = [a for a, _ in spans]
    for m in COMPOUND.finditer(text, 0, limit):
        if parts(m.group(0)) and not _overlaps(spans, span_starts, m.start(), m.end()):
            items.append((m.start(), m.end(), m.group(0)))
    taken = sorted((a, b) for a, b, _ in items)
    taken_starts = [a for a, _ in taken]
    for pattern in (SCIENTIFIC, NUMBER_WORDS):  # "3.2 × 10^{5}", "forty-two": near the end, where answers are
        for m in pattern.finditer(text, max(0, limit - _WORDS_REACH), limit):
            value = m.group(0) if pattern is SCIENTIFIC else prose_number(m.group(0))
            if value and not _overlaps(taken, taken_starts, m.start(), m.end()):
                items.append((m.start(), m.end(), value))
    algebra_in = "^" in text or bool(_PRODUCT.search(text, 0, limit))  # (most texts have none)
    for m in PROSE_ALGEBRA.finditer(text, 0, limit) if algebra_in else ():  # "4x^{3} + 2x": not 4
        algebra = m.group(0)
        if (_POWERED.search(algebra) or _PRODUCT.search(algebra) and re.search(r"\s[-+]\s", algebra)) and not _overlaps(
            spans, span_starts, m.start(), m.end()
        ):
            items.append((m.start(), m.end(), algebra))
    for m in BARE_LATEX.finditer(text, 0, limit):  # "2\\sqrt{3}" written without $...$
        latex = m.group(0).rstrip(".,;:")
        if latex.count("{") == latex.count("}") and not _overlaps(spans, span_starts, m.start(), m.end()):
            items.append((m.start(), m.start() + len(latex), latex))
    items.sort()
    starts = [a for a, _, _ in items]  # items do not overlap: a number is inside at most one
    for m in NUMBER.finditer(text, 0, limit):
        k = bisect.bisect_right(starts, m.start()) - 1
        if k >= 0 and m.start() < items[k][1]:
            continue
        before = text[m.start() - 1 : m.start()]
        if before in ("^", "_", "/", "\\") or _LATEX_AFTER.match(text, m.end()) or (
            before == "{" and not BOX_OPEN.search(text, max(0, m.start() - 12), m.start())
        ):  # inside LaTeX structure; "\\boxed{12" cut off is still its number
            continue
        items.append((m.start(), m.end(), m.group(0)))
    return [it for it in sorted(items) if it[2]]


def _overlaps(spans: list[tuple[int, int]], starts: list[int], start: int, end: int) -> bool:
    """Whether [start, end) overlaps one of the sorted, disjoint `spans` (`starts`: theirs)."""
    k = bisect.bisect_right(starts, start)  # spans[k - 1] starts at or before it
    return any(a < end and start < b for a, b in spans[max(0, k - 1) : k + 1])


def _gaps(text: str, items: list[tuple[int, int, str]]) -> list[tuple[int, int]]:
    """Alternating (outside, inside) stretches of `text` around the sorted spans `items`."""
    out, pos = [], 0
    for a, b, _ in sorted(items):
        out += [(pos, a), (a, b)]
        pos = b
    return out + [(pos, len(text))]
