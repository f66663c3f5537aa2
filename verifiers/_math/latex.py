"""LaTeX answer -> canonical plain string ("\\dfrac{1}{2}" -> "1/2", "3\\sqrt{13}" -> "3*sqrt(13)").

The plain form is what `normalize` returns (majority-vote keys, and the cases verifiers.math
decides in-process: identical forms, plain numbers, numerals in a base): python syntax
(`**`, explicit `*`, function calls) plus structure marks: `,` lists, `(..)`/`[..)` tuples
and intervals, `{..}` sets, `∪` unions, `±`, `=` equations, `Matrix([[..],[..]])`, base
subscripts (`52_8`); two numbers side by side stay apart ("2 3", no product). Text answers
become lower-case words. Plain string work after verifiers._math.spelling.clean, linear in the
input; it never needs sympy (math-verify, in the worker, reads the LaTeX itself).
"""

from __future__ import annotations

import re
from fractions import Fraction

from verifiers._math.exact import eval_rational
from verifiers._math.spelling import FUNCTIONS, KNOWN_NAMES, WRAPPERS, clean

_SYMBOLS = {
    "cdot": "*", "times": "*", "ast": "*", "div": "/", "pm": "±", "mp": "∓", "cup": "∪",
    "in": "∈", "infty": "oo", "pi": "pi", "le": "<=", "leq": "<=", "ge": ">=", "geq": ">=",
    "lt": "<", "gt": ">", "neq": "!=", "ne": "!=", "{": "{", "}": "}", "emptyset": "{}",
    "varnothing": "{}", "cdots": "...", "ldots": "...", "dots": "...", "%": "", "$": "",
    "circ": "", "degree": "", ",": "", "!": "", ";": "", ":": "", " ": "", "quad": "",
    "qquad": "",
}  # fmt: skip
_FRACS = {"frac", "dfrac", "tfrac", "cfrac"}
_BINOMS = {"binom", "dbinom", "tbinom"}
_MIXED = re.compile(r"(?<![\d.}^_{])(\d+)\s*\\[dt]?frac\s*(\{\s*\d+\s*\}|\d)\s*(\{\s*\d+\s*\}|\d)")
_PLAIN_TOKEN = re.compile(r"\d+(?:\.\d*)?(?:_\w+)?|\.\d+|[A-Za-z]+(?:_\w+)?|\*\*|<=|>=|!=|\S")


def to_plain(answer: str, *, fold: bool = True) -> str:
    """Canonical plain form of one (already extracted) answer. Never raises on odd input.

    fold: numbers become their exact value ("6.72e-5" -> "0.0000672", "0.50" -> "0.5");
    without it they stay as written ("6.72*10**(-5)", "0.50"), so their precision shows.
    """
    s = clean(answer)
    choice = re.fullmatch(r"\(?([A-E])\)(?:\s.*)?|([A-E])", s, flags=re.S)
    if choice:  # multiple choice: "(C)", "\textbf{(C) }12", "C" -> "C"
        return choice.group(1) or choice.group(2)
    if _is_words(s):
        return " ".join(s.lower().replace("-", " ").split())
    s = _MIXED.sub(_mixed_number, s)
    plain = _tidy(_Translator(s).run(), keep_zeros=not fold)
    bracketed = re.fullmatch(r"[\[(](Matrix\(\[.*\]\))[\])]", plain)
    if bracketed:  # "\left[\begin{array}..\end{array}\right]": the brackets are the matrix's
        plain = bracketed.group(1)
    return _fold_numbers(plain) if fold else plain


def is_text(plain: str) -> bool:
    """True for a text answer such as "evelyn" or "even" (as produced by `to_plain`)."""
    return _is_words(plain)


def _is_words(s: str) -> bool:
    words = re.fullmatch(r"[A-Za-z][A-Za-z' \-]*", s) and re.findall(r"[A-Za-z]+", s)
    return bool(words) and any(len(w) >= 3 and w not in KNOWN_NAMES for w in words)


def _mixed_number(m: re.Match[str]) -> str:
    whole, num, den = (int(g.strip("{} ")) for g in m.groups())
    if den == 0:
        return m.group(0)
    value = whole + Fraction(num, den)
    return f"\\frac{{{value.numerator}}}{{{value.denominator}}}"


class _Translator:
    """Recursive-descent LaTeX -> python-syntax translator over one string."""

    def __init__(self, s: str):
        self.s, self.i = s, 0

    def run(self, stop: str = "") -> str:
        out: list[str] = []
        while self.i < len(self.s) and self.s[self.i] not in stop:
            c = self.s[self.i]
            self.i += 1
            if c == "\\":  # padded: "i\pi" must not become the identifier "ipi"
                out.append(" " + self._command() + " ")
            elif c == "{" or (c == "(" and stop == ")"):  # nested group (or call argument)
                inner = self.run("}" if c == "{" else ")")
                self.i += 1
                # a brace group holding a list is a set: "{1,-2}" (keeps normalize idempotent)
                is_set = c == "{" and _top_level(inner, ",")
                out.append("{" + inner + "}" if is_set else "(" + inner + ")")
            elif c == "^":
                out.append("**" + _paren(self._arg(number=True)))
            elif c == "⏎":  # a LaTeX line break outside a matrix
                out.append(" ")
            elif c == "_":
                out.append("_" + re.sub(r"[()\s]", "", self._arg(number=True)))
            else:
                out.append(c)
        return "".join(out)

    def _command(self) -> str:
        m = re.compile(r"[A-Za-z]+|.").match(self.s, self.i)
        if not m:
            return ""
        name, self.i = m.group(0), m.end()
        if name in _FRACS:
            num, den = self._arg(), self._arg()
            return f"({_paren(num, '+-=,<>±')}/{_paren(den)})"  # "a*b/c" needs no parens
        if name in _BINOMS:
            return f"binomial({self._arg()},{self._arg()})"
        if name == "sqrt":
            index = self._optional_index()
            body = self._arg(number=True)  # "\sqrt51" is how people type sqrt(51)
            return f"root({body},{index})" if index else f"sqrt({body})"
        if name == "begin":
            return self._environment()
        if name in _SYMBOLS:
            return _SYMBOLS[name]
        if name in FUNCTIONS or name == "ln":
            return self._function("log" if name == "ln" else name)  # natural log, as in sympy
        if name in WRAPPERS:
            return self._arg()
        return name  # a Greek letter, or an unknown command kept as a symbol name

    def _function(self, name: str) -> str:
        base = ""
        if self._peek() == "_":  # \log_2 8 -> log(8,2)
            self.i = self._skip() + 1
            base = self._arg(number=True)
        power = ""
        if self._peek() == "^":  # \sin^2 x -> sin(x)**2
            self.i = self._skip() + 1
            power = "**" + _paren(self._arg(number=True))
        j = self._skip()
        bare = re.compile(r"\d+(?:\.\d+)?[A-Za-z]?|[A-Za-z]").match(self.s, j)
        if j < len(self.s) and self.s[j] == "(":
            self.i = j + 1
            arg = self.run(")")
            self.i += 1
        elif bare:  # "\sin 2x" -> sin(2x), "\log 100" -> log(100)
            arg, self.i = bare.group(0), bare.end()
        else:
            arg = self._arg()
        return f"{name}({arg},{base}){power}" if base else f"{name}({arg}){power}"

    def _environment(self) -> str:
        """pmatrix/bmatrix/matrix -> Matrix([[..],[..]]); other environments keep their body."""
        m = re.compile(r"\s*\{(\w+\*?)\}").match(self.s, self.i)
        if not m:
            return ""
        env = m.group(1)
        end = self.s.find("\\end{" + env + "}", m.end())
        body = self.s[m.end() : end if end >= 0 else len(self.s)]
        if env == "array":  # \begin{array}{cc}: the column spec is no content; a matrix
            body, env = re.sub(r"^\s*\{[^{}]*\}", "", body), "array matrix"
        self.i = end + len(m.group(1)) + 6 if end >= 0 else len(self.s)
        if "matrix" not in env:
            return _Translator(body).run()
        rows = [r for r in body.split("⏎") if r.strip()]
        cells = [[_fold_one(_tidy(_Translator(c).run())) for c in r.split("&")] for r in rows]
        return "Matrix([" + ",".join("[" + ",".join(r) + "]" for r in cells) + "])"

    def _peek(self) -> str:
        j = self._skip()
        return self.s[j] if j < len(self.s) else ""

    def _skip(self) -> int:
        j = self.i
        while j < len(self.s) and self.s[j].isspace():
            j += 1
        return j

    def _optional_index(self) -> str:
        if self._peek() != "[":
            return ""
        self.i = self._skip() + 1
        index = self.run("]")
        self.i += 1
        return index

    def _arg(self, number: bool = False) -> str:
        """One macro argument: a {group}, a \\command, or one character (a whole number after ^)."""
        self.i = self._skip()
        if self.i >= len(self.s):
            return ""
        c = self.s[self.i]
        if c == "{":
            self.i += 1
            inner = self.run("}")
            self.i += 1
            return inner
        if c == "\\":
            self.i += 1
            return self._command()
        m = re.compile(r"-?\d+(?:\.\d+)?").match(self.s, self.i) if number else None
        if m:  # "2^10" means 2**10 in model output, although LaTeX would read 2^{1}0
            self.i = m.end()
            return m.group(0)
        self.i += 1
        return c


def _paren(s: str, ops: str = "+-*/=,<>± ") -> str:
    """Parenthesise `s` if it has a top-level operator from `ops` (a leading sign is unary).

    A space counts as an operator by default: "2 pi r" in a denominator is an implicit product.
    """
    s = s.strip()
    depth = 0
    for k, c in enumerate(s):
        depth += (c in "([{") - (c in ")]}")
        if depth == 0 and c in ops and not (k == 0 and c in "+-") and s[k - 1 : k + 1] != "**":
            return f"({s})"
    return s


def _tidy(s: str, keep_zeros: bool = False) -> str:
    """Token pass: explicit `*` for implicit products, canonical literals, no spaces."""
    s = re.sub(r"(\d(?:\.\d+)?)[eE]([+-]?\d+)\b", r"\1*10**(\2)", s)  # 1.2e5 -> 1.2*10**(5)
    tokens: list[str] = []
    for tok in _PLAIN_TOKEN.findall(s):
        if tok[0].isalpha() and "_" not in tok and len(tok) > 1 and tok not in KNOWN_NAMES:
            parts = list(tok)  # "xy" is x*y; real words never reach here (text answers)
        else:
            literal = tok[0].isdigit() or tok[0] == "."
            parts = [_canonical_literal(tok, keep_zeros) if literal else tok]
        for part in parts:
            if tokens and _is_operand_end(tokens[-1]) and _is_operand_start(part, tokens[-1]):
                # two numbers side by side ("2 3") are no product: a space keeps them unreadable
                tokens.append(" " if _is_literal(tokens[-1]) and _is_literal(part) else "*")
            tokens.append(part)
    out = "".join(tokens)
    for _ in range(3):  # "(2)" -> "2", "((x))" -> "(x)", but never "sqrt(2)" -> "sqrt2"
        out = re.sub(r"(?<![\w)])\((-?[\w.]+)\)", r"\1", out)
        # a parenthesised group that is a whole list item: "(3,(pi/2))" -> "(3,pi/2)"
        out = re.sub(r"(?<=[(\[{,])\(([^()\[\]{},]*)\)(?=[)\]},])", r"\1", out)
    if out.startswith("(") and _closing(out, 0) == len(out) - 1 and not _top_level(out[1:-1], ","):
        out = out[1:-1]  # "(pi/2)" is grouping, not a 1-tuple
    return out.lstrip("+")


def _closing(s: str, start: int) -> int:
    """Index of the bracket closing the one at `start` (any of ([{ with any of )]}), or -1."""
    depth = 0
    for k in range(start, len(s)):
        depth += (s[k] in "([{") - (s[k] in ")]}")
        if depth == 0:
            return k
    return -1


def _top_level(s: str, char: str) -> bool:
    """Whether `char` occurs in `s` outside every bracket."""
    depth = 0
    for c in s:
        depth += (c in "([{") - (c in ")]}")
        if c == char and depth == 0:
            return True
    return False


def _is_literal(tok: str) -> bool:
    return tok[0].isdigit() or tok[0] == "."


def _is_operand_end(tok: str) -> bool:
    return tok == ")" or tok[0].isdigit() or (tok[0].isalpha() and tok not in FUNCTIONS)


def _is_operand_start(tok: str, prev: str) -> bool:
    if tok == "(":
        return prev not in FUNCTIONS
    return tok[0].isdigit() or tok[0].isalpha() or tok[0] == "."


def _canonical_literal(tok: str, keep_zeros: bool = False) -> str:
    """ "025" -> "25", ".50" -> "0.5", "27.0" -> "27"; base subscripts like "52_8" are kept."""
    number, sep, base = tok.partition("_")
    whole, dot, frac = number.partition(".")
    whole = whole.lstrip("0") or "0"
    frac = frac if keep_zeros else frac.rstrip("0")  # "0.001990": its precision shows
    return whole + ("." + frac if dot and frac else "") + sep + base


def _fold_numbers(plain: str) -> str:
    """Exact rational value as the canonical string: "(6/4)" -> "3/2", "1.2*10**3" -> "1200".

    Lists and tuples are folded item by item; anything non-rational is left as it is.
    """
    m = re.fullmatch(r"([(\[{]?)(.*?)([)\]}]?)", plain)
    if m and "," in m.group(2) and not re.search(r"[(\[{]", m.group(2)):
        return m.group(1) + ",".join(_fold_one(x) for x in m.group(2).split(",")) + m.group(3)
    return _fold_one(plain)


def _fold_one(plain: str) -> str:
    value = eval_rational(plain) if re.fullmatch(r"[\d.+\-*/()]+", plain) else None
    if value is None:
        return plain
    if value.denominator == 1:
        return str(value.numerator)
    if "." in plain:  # keep decimals decimal: "0.5" stays apart from "1/2" (verify joins them)
        decimal = _as_decimal(value)
        if decimal is not None:
            return decimal
    return f"{value.numerator}/{value.denominator}"


def _as_decimal(value: Fraction) -> str | None:
    den, twos, fives = value.denominator, 0, 0
    while den % 2 == 0:
        den, twos = den // 2, twos + 1
    while den % 5 == 0:
        den, fives = den // 5, fives + 1
    places = max(twos, fives)
    if den != 1 or places > 40:
        return None
    digits = str(abs(value.numerator) * 10**places // value.denominator).rjust(places + 1, "0")
    sign = "-" if value < 0 else ""
    return sign + (digits[:-places] + "." + digits[-places:]).rstrip("0").rstrip(".")
