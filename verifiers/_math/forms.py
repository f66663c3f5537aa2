r"""How numbers are written, down to the ASCII and LaTeX the readers know: one rule per form.

`rewrite(text)` runs before any reading (a gold and a solution alike), in plain string work
linear in the text:
  U+2212 "−" (and the small and full-width minus signs) -> "-"; a dash is no sign
  NBSP, narrow NBSP, thin and figure spaces between digit groups ("1 000 000") -> "1000000";
                                              elsewhere such a space is a space
  Indian groups "12,34,567"                -> "1234567" (first group 1-2 digits, then 2-digit
                                              groups, then 3 digits; not inside brackets, where
                                              commas separate a tuple's items)
  German/French decimals "1.234,50", "1 234,5" -> "1234.50", "1234.5" (groups of three before a
                                              decimal comma); "1.234.567" -> "1234567" (two
                                              or more point groups are thousands). "1.234"
                                              alone stays the decimal 1.234: one point group is
                                              what English writes, and no rule can tell
  vulgar fractions "½", "4¼", "2 ⅔"         -> "\frac{1}{2}", "4\frac{1}{4}", "2\frac{2}{3}"
                                              (a whole number before one is a mixed number)
  the fraction slash "1⁄2"                 -> "1/2"
  plain mixed numbers "3 1/2", "137 1/2"   -> "3\frac{1}{2}", "137\frac{1}{2}" (the fraction
                                              proper: numerator below denominator)
  superscripts "x²", "10⁵", "10⁻³", "cm²"  -> "x^{2}", "10^{5}", "10^{-3}", "cm^{2}"
  \hspace{..}, \vspace{..}, \kern..        -> nothing (spacing, no content)
  digits of other scripts "৪২", "۴۲", "๔๒"  -> "42" (every Unicode decimal digit; the Arabic
                                              decimal and group signs "٫", "٬" -> ".", ",")
  repeating decimals "0.\overline{3}",      -> "\frac{1}{3}", "\frac{1}{6}" (the repeating block
  "0.1\overline{6}", "0.(3)", "0.1(6)"       in a bar or in brackets right after the digits)
A mixed number is read as one value everywhere after this ("4\frac{1}{4}" is 17/4: latex.py
and math-verify both read it so).
"""

from __future__ import annotations

import re
import unicodedata
from fractions import Fraction

_MINUS = re.compile("[\u2212\ufe63\uff0d]")  # the minus sign; a dash ("5–7") is no sign
_SPACES = "\u00a0\u202f\u2009\u2007\u200a\u2008\u2006\u2005"
_SPACE_GROUPS = re.compile(rf"(?<![\d.,])\d{{1,3}}(?:[{_SPACES}]\d{{3}})+(?![\d])")
_ODD_SPACE = re.compile(f"[{_SPACES}]")
# the ASCII rules, one alternative each, read in one pass (the pass is most of this module's cost)
_GROUPED = re.compile(
    r"(?=\d)(?:(?P<indian>(?<![\d.,(\[{])\d{1,2},(?:\d{2},)+\d{3}(?![\d,)\]}]))"
    r"|(?P<comma>(?<![\d.,])\d{1,3}(?:(?:\.\d{3})+|(?: \d{3})+),\d+(?!\d|[.,]\d))"
    r"|(?P<points>(?<![\d.,])\d{1,3}(?:\.\d{3}){2,}(?!\d|[.,]\d))"
    r"|(?P<mixed>(?<![\w.,/^_{}\\])(\d+)[ ](\d+)/(\d+)(?![\d/]|\.\d|\s*[\\^_*])))"
)
_VULGAR_CHARS = "\u00bc-\u00be\u2150-\u215e"
_VULGAR = re.compile(rf"(?:(\d+)[ ]?)?([{_VULGAR_CHARS}])")
_SUPERSCRIPTS = "⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺"
_SUPER = re.compile(f"[{_SUPERSCRIPTS}]+")
_SUPER_TO = str.maketrans(_SUPERSCRIPTS, "0123456789-+")
_SPACING = re.compile(r"\\[hv]space\*?\s*\{[^{}]*\}|\\(?:kern|mkern|hskip|mskip)\s*-?[\d.]+\s*(?:pt|em|ex|mu|mm|cm|in)")


_DIGITS = {c: str(unicodedata.decimal(chr(c))) for start in (0x660, 0x6F0, 0x966, 0x9E6, 0xC66, 0xE50, 0xFF10)
           for c in range(start, start + 10)} | {0x66B: ".", 0x66C: ","}
_NATIVE_DIGIT = re.compile("[\u0660-\u066c\u06f0-\u06f9\u0966-\u096f\u09e6-\u09ef\u0c66-\u0c6f\u0e50-\u0e59\uff10-\uff19]")
# "0.1\overline{6}", "0.\overline{3}", "0.1(6)": whole part, digits before the block, the block
_REPEATING = re.compile(r"(?<![\d.])(\d+)\.(\d*)(?:\\overline\s*\{(\d+)\}|\\dot\s*\{(\d)\}|\((\d+)\)(?![\d(]))")


def rewrite(text: str) -> str:
    """`text` with each written form above in the one spelling the readers know."""
    if text.isascii():  # the common case: only the ASCII rules apply
        return _ascii_rules(text)
    if _NATIVE_DIGIT.search(text):
        text = text.translate(_DIGITS)
    text = _MINUS.sub("-", text)
    text = _SPACE_GROUPS.sub(lambda m: _ODD_SPACE.sub("", m.group(0)), text)
    text = _ODD_SPACE.sub(" ", text).replace("\u2044", "/")
    text = _VULGAR.sub(_vulgar, text)
    text = _SUPER.sub(lambda m: "^{" + m.group(0).translate(_SUPER_TO) + "}", text)
    return _ascii_rules(text)


def _ascii_rules(text: str) -> str:
    if "," in text or "." in text or "/" in text:
        text = _GROUPED.sub(_grouped, text)
    if "\\" in text:
        text = _SPACING.sub("", text)
    if "(" in text or "\\" in text:
        text = _REPEATING.sub(_repeating, text)
    return text


def _repeating(m: re.Match[str]) -> str:
    """ "0.1(6)" -> "\\frac{1}{6}": the whole part and the digits before the block, plus the
    block repeated for ever (block / 99..9, shifted past the digits before it)."""
    whole, before, block = m.group(1), m.group(2), m.group(3) or m.group(4) or m.group(5)
    value = Fraction(int(whole + before or "0"), 10 ** len(before)) + Fraction(
        int(block), (10 ** len(block) - 1) * 10 ** len(before))
    return f"\\frac{{{value.numerator}}}{{{value.denominator}}}"


def _grouped(m: re.Match[str]) -> str:
    written = m.group(0)
    if m.group("indian") or m.group("points"):  # "12,34,567", "1.234.567"
        return written.replace(",", "").replace(".", "")
    if m.group("comma"):  # "1.234,50", "1 234,5"
        return re.sub(r"[. ]", "", written).replace(",", ".")
    whole, num, den = m.group(5), m.group(6), m.group(7)
    if int(den) == 0 or int(num) >= int(den):  # "3 5/2" is no mixed number: two numbers
        return written
    return f"{whole}\\frac{{{num}}}{{{den}}}"


def _vulgar(m: re.Match[str]) -> str:
    value = Fraction(unicodedata.numeric(m.group(2))).limit_denominator(16)
    frac = f"\\frac{{{value.numerator}}}{{{value.denominator}}}"
    return f"{m.group(1)}{frac}" if m.group(1) else frac
