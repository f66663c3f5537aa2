"""How an answer is spelled, down to one canonical LaTeX string: plain string work, no sympy.

`clean` is the first half of `normalize` (verifiers._math.latex.to_plain reads its output):
delimiters, spacing, units, degrees, percent, currency and text wrappers go; `tidy_latex`
joins digit groups and turns "or" / "and" / ";" into list commas. `for_math_verify` gives
math-verify's LaTeX parser (in the worker) the answer as meant: the same tidying, units and
currency gone, and the plain-text spellings models use ("pi", "oo", "6.72e-5", "\\sqrt51").
"""

from __future__ import annotations

import re

from verifiers._math.numwords import whole_answer

FUNCTIONS = {
    "sqrt", "root", "sin", "cos", "tan", "cot", "sec", "csc", "arcsin", "arccos", "arctan",
    "sinh", "cosh", "tanh", "log", "exp", "binomial", "Abs", "Matrix", "gcd", "lcm", "det",
}  # fmt: skip
GREEK = {
    "alpha", "beta", "gamma", "delta", "epsilon", "varepsilon", "zeta", "eta", "theta",
    "vartheta", "iota", "kappa", "lambda", "mu", "nu", "xi", "rho", "sigma", "tau", "upsilon",
    "phi", "varphi", "chi", "psi", "omega", "Gamma", "Delta", "Theta", "Lambda", "Sigma", "Phi",
    "Psi", "Omega",
}  # fmt: skip
# Names the plain form may contain besides single letters; anything else is text or a product.
KNOWN_NAMES = FUNCTIONS | GREEK | {"pi", "oo"}
WRAPPERS = {
    "text", "textbf", "textit", "textrm", "textnormal", "mathrm", "mathbf", "mathit", "mbox",
    "operatorname", "boxed", "fbox", "framebox", "mathbb", "mathcal", "overline", "hbox",
    "displaystyle", "textstyle", "bf", "rm",
}  # fmt: skip

_UNICODE = {"°C": "", "°F": "", "℃": "", "€": "", "£": "", "¥": "", "₹": "", "−": "-", "×": "*", "÷": "/", "·": "*", "π": "\\pi ", "∞": "\\infty ", "°": "",
            "≤": "<=", "≥": ">=", "√": "\\sqrt", "∪": "\\cup "}  # fmt: skip

# A LaTeX "word" that is really a unit or noun after a number: "5 \text{ cm}^2", "12 apples".
_TRAILING_TEXT_UNIT = re.compile(
    r"\\(?:text|mbox|textrm|mathrm|textnormal)\s*\{\s*[A-Za-z][A-Za-z .]*\}\s*(\^\s*\{?\d\}?)?\s*$"
)
_TRAILING_WORDS = re.compile(r"(?<=[\d}])((?:\s+[A-Za-z]{2,}\.?(?:\^\{?\d\}?)?)+)\s*$")
_THOUSANDS = re.compile(r"(?<![\d.,])[1-9]\d{0,2}(?:,\d{3})+(?![\d,])")

# "5 = x": a value, then the one letter it is the value of
_VALUE_FIRST = re.compile(r"^\s*(-?\d+(?:\.\d+)?|-?\\[dt]?frac\{\d+\}\{\d+\})\s*=\s*([A-Za-z])\s*$")
# units after a number: letters with "/", a temperature's degree, an area or volume, a one-letter
# unit: "60 km/h", "25 °C", "36 m^{2}" (from "36 m²"), "12 m", "5 s"
_UNIT_NAMES = (r"(?:km|m|cm|mm|mi|ft|in|yd|h|hr|hrs|min|s|sec|ms|kg|g|mg|lb|oz|L|l|ml|mL|"
               r"kWh|kW|W|J|N|Pa|V|A|mol|K|m\^\{?[23]\}?|cm\^\{?[23]\}?|s\^\{?2\}?)")
_SLASH_UNITS = re.compile(
    rf"(?<=[\d}}])\s*(?:{_UNIT_NAMES}\s*/\s*{_UNIT_NAMES}|°\s*[CF]|(?<=\d)\s(?:m|cm|mm|km|ft|in)\^\{{?[23]\}}?|(?<=\d)\s[msghL])\s*$")
# thousands groups set apart by a space, a TeX space (\\, \\; \\: \\! "\\ ") or a tie (~)
_GROUPS = re.compile(r"(?<![\d.,])\d{1,3}(?:(?:[ \t]|\\[,;:! ]|~)+\d{3})+(?![\d.])")


def tidy_latex(s: str, *, separators: bool = True) -> str:
    """LaTeX-level fixes shared by `clean` and `for_math_verify`:
    digit groups ("1 000", "10\\,080", "14{,}916") are one number; "or", "and" (spaced or
    not) and ";" separate the items of a list; "\\approx" reads as "=" ("x \\approx 11");
    number words are digits ("forty-two" -> "42"); "5 = x" is "x = 5" (a value named after
    it); units written after a number ("60 km/h", "9.8 m/s^{2}", "25 °C") go."""
    s = whole_answer(s)
    s = _VALUE_FIRST.sub(r"\2 = \1", s)
    if re.search(r"\d", s):
        s = _SLASH_UNITS.sub("", s)
    s = re.sub(r"(?<=\d)\{,\}(?=\d{3})", "", s)
    s = re.sub(r"(?<=\d),\\!\s*(?=\d{3})", "", s)
    s = _GROUPS.sub(lambda m: re.sub(r"\D", "", m.group(0)), s)
    s = re.sub(r"\\(?:text|mbox|textrm|mathrm)\s*\{\s*(and|or)\s*\}", r" \1 ", s)
    s = re.sub(r"\s*,?\s*(?<![A-Za-z\\])(?:or|and)(?![A-Za-z])\s*", ", ", s)
    if separators:  # math-verify reads ";" (groups of a list) and \\approx (x \\approx 11 is 11) itself
        s = re.sub(r"(?<!\\);", ",", s)
        s = re.sub(r"\\approx(?![A-Za-z])|≈", "=", s)
    return s.strip().strip(",").strip()


def for_math_verify(answer: str) -> str:
    """An extracted answer as the LaTeX math-verify's parser reads as meant (one line, no
    delimiters): `tidy_latex`, no currency or units, plain-text "pi" / "oo" / "sqrt(2)", "6.72e-5"
    as 6.72 \\times 10^{-5}, "\\sqrt51" as \\sqrt{51} (what people mean; TeX reads sqrt(5)*1)."""
    s = answer
    for a, b in _UNICODE.items():
        s = s.replace(a, b)
    s = re.sub(r"\\[()\[\]]", " ", s.replace("\\$", "").replace("$", "")).replace("\n", " ")
    s = tidy_latex(s, separators=False)
    if re.search(r"\d", s):
        for _ in range(2):
            s = _TRAILING_TEXT_UNIT.sub("", s).strip()
        s = _TRAILING_WORDS.sub(_drop_words, s)
    s = re.sub(r"(?<![\\A-Za-z])pi(?![A-Za-z])", r"\\pi ", s)
    s = re.sub(r"(?<![\\A-Za-z])(?:oo|infinity)(?![A-Za-z])", r"\\infty ", s)
    s = re.sub(r"(?<![\w.])(\d+(?:\.\d+)?)[eE]([+-]?\d+)(?![\w.])", r"\1\\times 10^{\2}", s)
    s = re.sub(r"\\sqrt\s*(\d+)", r"\\sqrt{\1}", s)
    s = re.sub(r"(?<![\\A-Za-z])sqrt\s*\(([^()]*)\)", r"\\sqrt{\1}", s)
    s = re.sub(r"\\(?:fbox|framebox)(?![A-Za-z])", r"\\boxed", s)
    return s.strip().rstrip(".").strip()



def clean(s: str) -> str:
    """Strip delimiters, spacing, units, degrees, percent, currency and text wrappers."""
    for a, b in _UNICODE.items():
        s = s.replace(a, b)
    s = tidy_latex(s)
    s = s.replace("\\\\", "⏎")  # matrix row break, kept apart from the \, \! spacing below
    s = re.sub(r",\\!\s*", ",", s)  # "10,\!080": LaTeX's thousands separator
    s = re.sub(r"\\(?:left|right|[bB]igg?[lr]?)(?![A-Za-z])\s*\.?", "", s)  # \left. is a null delim
    s = s.replace("\\$", "").replace("$", "")
    s = re.sub(r"\\[()\[\]]", "", s)  # \( \) \[ \] math-mode delimiters (\left[ is gone by now)
    s = re.sub(r"\\[,;:! ]|\\q?quad(?![A-Za-z])|~", " ", s)
    s = re.sub(r"\^\s*\{?\s*\\circ\s*\}?|\\circ|\\degree", "", s)  # degrees: 90^\circ -> 90
    s = re.sub(r"\\?%", "", s)  # percent: "10%" -> "10" (MATH convention; see verify's doc)
    s = re.sub(r"\\[dt](frac|binom)", r"\\\1", s)
    if re.search(r"\d", s):
        for _ in range(2):  # "5.4 \text{ cents}", "864 \mbox{ inches}^2"; two for "\text{ft}^2"
            s = _TRAILING_TEXT_UNIT.sub("", s).strip()
    s = re.sub(r"\\mathbb\s*\{?R\}?", lambda _: "(-\\infty,\\infty)", s)  # all reals
    s = _unwrap(s)
    s = re.sub(r"\s+(?:and|or)\s+", ", ", s)  # "x=2 \text{ or } x=3" lists two solutions
    s = re.sub(r"^[A-Za-z]\s*(?:\\in|∈)\s*", "", s)  # "x \in [-2,7]" -> "[-2,7]"
    s = _TRAILING_WORDS.sub(_drop_words, s)
    s = s.strip().rstrip(".;:").strip()
    if not re.search(r"[(\[{]", s):  # "1,000" is a thousand unless it is inside a tuple
        s = _THOUSANDS.sub(lambda m: m.group(0).replace(",", ""), s)
    return s


def _drop_words(m: re.Match[str]) -> str:
    words = re.findall(r"[A-Za-z]+", m.group(1))
    return "" if all(w not in KNOWN_NAMES for w in words) else m.group(0)


def _unwrap(s: str) -> str:
    """\\text{abc} -> abc (and \\textbf, \\mbox, \\boxed...), respecting nested braces."""
    out, i = [], 0
    pattern = re.compile(r"\\(" + "|".join(sorted(WRAPPERS, key=len, reverse=True)) + r")\b\s*")
    while True:
        m = pattern.search(s, i)
        if not m:
            out.append(s[i:])
            return "".join(out)
        out.append(s[i : m.start()])
        j = m.end()
        if j < len(s) and s[j] == "{":
            close = matching_brace(s, j)
            if close < 0:
                out.append(s[j:])
                return "".join(out)
            out.append(_unwrap(s[j + 1 : close]))
            i = close + 1
        else:
            i = j


def matching_brace(s: str, start: int) -> int:
    """Index of the `}` closing the `{` at `start`, or -1 when unbalanced."""
    depth = 0
    for k in range(start, len(s)):
        if s[k] == "{" and (k == 0 or s[k - 1] != "\\"):
            depth += 1
        elif s[k] == "}" and (k == 0 or s[k - 1] != "\\"):
            depth -= 1
            if depth == 0:
                return k
    return -1
