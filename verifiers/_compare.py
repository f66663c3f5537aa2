"""Equivalence of two normalised answers with sympy. Runs inside the worker process only.

`compare(gold, pred, rel_tol)` takes the plain strings that `verifiers._latex.to_plain` makes,
splits them into structure (lists, tuples/intervals, sets, unions, equations, matrices) and
decides leaf equality with sympy: exact when both sides are exact, `rel_tol` when either side
was written as a decimal. sympy can hang or exhaust memory on hostile input; the caller kills
this process on timeout, and `_check_size` refuses towers like 9**9**9**9 before evaluating.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import sympy
from sympy.parsing.sympy_parser import parse_expr, rationalize, standard_transformations

from verifiers._latex import FUNCTIONS, GREEK, is_text

_TRANSFORMS = (*standard_transformations, rationalize)  # decimals become exact Rationals
_FUNCS = {name: getattr(sympy, name) for name in FUNCTIONS if hasattr(sympy, name)}
_FUNCS.update(arcsin=sympy.asin, arccos=sympy.acos, arctan=sympy.atan, pi=sympy.pi, oo=sympy.oo)
_FUNCS.update(i=sympy.I, e=sympy.E)  # in answers, i is the imaginary unit and e is Euler's number
_SAFE = re.compile(r"[\w.+\-*/()\[\],!<>= ]+")
_EXACT_TOL = 1e-10  # two exact expressions (e.g. sqrt(2)/2 and 1/sqrt(2)) agree numerically
_SAMPLES = 4  # points at which expressions with free symbols are compared


class Refused(Exception):
    """The input is unsafe or too large to evaluate; the message is the verdict's reason."""


@dataclass(frozen=True)
class Node:
    """One piece of answer structure. kind: leaf, eq, list (unordered), seq, union, matrix."""

    kind: str
    text: str = ""
    items: tuple[Node, ...] = ()
    brackets: str = ""  # for seq: opening and closing bracket, e.g. "(]"


def compare(gold: str, pred: str, rel_tol: float) -> tuple[bool, str]:
    """(equal, reason) for two plain answers; gold first (it decides how "x=3" is read)."""
    try:
        return _equal(parse(gold), parse(pred), rel_tol)
    except Refused as exc:
        return False, str(exc)
    except (MemoryError, RecursionError):
        raise  # the worker reports these itself
    except Exception as exc:  # sympy's parser raises TokenError, IndexError... on garbage
        return False, f"could not parse or compare ({type(exc).__name__})"


def parse(s: str) -> Node:
    s = s.strip()
    if _split(s, "∪")[1:]:
        return Node("union", items=tuple(parse(x) for x in _split(s, "∪")))
    parts = _split(s, ",")
    if len(parts) > 1:
        return Node("list", items=_flatten(parse(x) for x in parts))
    sides = _split(s, "=")
    if len(sides) > 1:
        return Node("eq", items=tuple(parse(x) for x in sides))
    for sign, first, second in (("±", "+", "-"), ("∓", "-", "+")):
        pm = _split(s, sign)
        if len(pm) == 2:  # "1±sqrt(19)" is the list of both roots
            a, b = pm
            return Node("list", items=(parse(f"{a}{first}({b})"), parse(f"{a}{second}({b})")))
    interval = _inequality(s)
    if interval is not None:
        return interval
    if s.startswith("Matrix([") and s.endswith("])"):
        rows = [Node("seq", items=_leaves(r[1:-1]), brackets="[]") for r in _split(s[8:-2], ",")]
        return Node("matrix", items=tuple(rows))
    if s[:1] in "([{" and s[-1:] in ")]}" and _closing(s) == len(s) - 1:
        inner = s[1:-1]
        if s[0] == "{":
            return Node("list", items=_flatten(parse(x) for x in _split(inner, ",") if x))
        if s[0] + s[-1] == "()" and len(_split(inner, ",")) == 1:
            return parse(inner)  # grouping parentheses, not a 1-tuple
        return Node("seq", items=tuple(parse(x) for x in _split(inner, ",")), brackets=s[0] + s[-1])
    return Node("leaf", text=s)


def _inequality(s: str) -> Node | None:
    """ "x>2" -> (2,oo), "x<=5" -> (-oo,5], "1<x<=3" -> (1,3]: one variable against numbers."""
    parts = re.split(r"(<=|>=|<|>)", s)
    if len(parts) not in (3, 5) or _split(s, ",")[1:]:
        return None
    is_var = [bool(re.fullmatch(r"[A-Za-z]\w*", x)) for x in parts[::2]]
    if sum(is_var) != 1 or any(not x for x in parts):
        return None
    if len(parts) == 5:  # a < x < b (or a > x > b)
        a, op1, _, op2, b = parts
        if (op1[0] == "<") != (op2[0] == "<") or not is_var[1]:
            return None
        if op1[0] == ">":
            a, op1, b, op2 = b, op2, a, op1
        return _interval(a, op1.endswith("="), b, op2.endswith("="))
    left, op, right = parts
    if is_var[1]:  # "2 < x" is "x > 2"
        left, right, op = right, left, {"<": ">", ">": "<", "<=": ">=", ">=": "<="}[op]
    if op[0] == ">":
        return _interval(right, op == ">=", "oo", False)
    return _interval("-oo", False, right, op == "<=")


def _interval(low: str, low_closed: bool, high: str, high_closed: bool) -> Node:
    brackets = ("[" if low_closed else "(") + ("]" if high_closed else ")")
    return Node("seq", items=(Node("leaf", text=low), Node("leaf", text=high)), brackets=brackets)


def _leaves(s: str) -> tuple[Node, ...]:
    return tuple(Node("leaf", text=x) for x in _split(s, ","))


def _flatten(nodes) -> tuple[Node, ...]:
    out: list[Node] = []
    for node in nodes:
        out.extend(node.items if node.kind == "list" else (node,))
    return tuple(out)


def _split(s: str, sep: str) -> list[str]:
    """Split at top-level `sep` (outside brackets); "=" inside "<=", ">=", "!=" is not a split."""
    parts, depth, start = [], 0, 0
    for k, c in enumerate(s):
        depth += (c in "([{") - (c in ")]}")
        if c == sep and depth == 0 and not (sep == "=" and k > 0 and s[k - 1] in "<>!"):
            parts.append(s[start:k])
            start = k + 1
    parts.append(s[start:])
    return parts


def _closing(s: str) -> int:
    depth = 0
    for k, c in enumerate(s):
        depth += (c in "([{") - (c in ")]}")
        if depth == 0:
            return k
    return -1


def _equal(g: Node, p: Node, rel_tol: float) -> tuple[bool, str]:
    if g.kind == "eq" and p.kind == "eq":
        return _equations(g, p, rel_tol)
    if p.kind == "eq":  # gold is a value: "x=3" (or "a=1+2=3") answers with its last side
        ok, reason = _equal(g, p.items[-1], rel_tol)
        return ok, f"{reason} (right side of the predicted equation)"
    if g.kind == "eq":  # gold "x=5" accepts a bare 5 when its left side is just a variable
        if not re.fullmatch(r"[A-Za-z]\w*", g.items[0].text):
            return False, "gold is an equation, prediction is not"
        ok, reason = _equal(g.items[-1], p, rel_tol)
        return ok, f"{reason} (right side of the gold equation)"
    if g.kind == "seq" and p.kind == "list" and all(x.kind == "eq" for x in p.items):
        p = Node("seq", items=tuple(x.items[-1] for x in p.items), brackets=g.brackets)  # a=2, b=3
    if g.kind == "matrix" or p.kind == "matrix":
        return _matrices(g, p, rel_tol)
    if g.kind != p.kind:
        return False, f"different structure ({g.kind} vs {p.kind})"
    if g.kind == "leaf":
        return _leaf_equal(g.text, p.text, rel_tol)
    if g.kind == "seq" and g.brackets != p.brackets:
        return False, f"different brackets {g.brackets} vs {p.brackets} (interval closure)"
    if len(g.items) != len(p.items):
        return False, f"{len(g.items)} items in gold, {len(p.items)} in prediction"
    if g.kind == "seq":
        for a, b in zip(g.items, p.items):
            ok, reason = _equal(a, b, rel_tol)
            if not ok:
                return False, reason
        return True, "equal element by element"
    return _unordered(g.items, p.items, rel_tol)


def _unordered(gold: tuple[Node, ...], pred: tuple[Node, ...], rel_tol: float) -> tuple[bool, str]:
    """Sets, lists of solutions and unions: each gold item matches a distinct predicted item."""
    remaining = list(pred)
    for a in gold:
        match = next((b for b in remaining if _equal(a, b, rel_tol)[0]), None)
        if match is None:
            return False, "an item of the gold answer is missing from the prediction"
        remaining.remove(match)
    return True, "equal as sets"


def _matrices(g: Node, p: Node, rel_tol: float) -> tuple[bool, str]:
    rows_g, rows_p = _matrix_rows(g), _matrix_rows(p)
    if rows_g is None or rows_p is None:
        return False, f"different structure ({g.kind} vs {p.kind})"
    if [len(r) for r in rows_g] != [len(r) for r in rows_p]:
        return False, "matrices of different shape"
    for a, b in zip(sum(rows_g, []), sum(rows_p, [])):
        ok, reason = _equal(a, b, rel_tol)
        if not ok:
            return False, reason
    return True, "equal matrices"


def _matrix_rows(node: Node) -> list[list[Node]] | None:
    if node.kind == "matrix":
        return [list(row.items) for row in node.items]
    if node.kind == "seq" and node.brackets == "()":  # a tuple equals a column vector
        return [[item] for item in node.items]
    return None


def _equations(g: Node, p: Node, rel_tol: float) -> tuple[bool, str]:
    (gl, *_, gr), (pl, *_, pr) = g.items, p.items
    if (
        gl.kind == pl.kind == "leaf"
        and gl.text == pl.text
        and re.fullmatch(r"[A-Za-z]\w*", gl.text)
    ):
        return _equal(gr, pr, rel_tol)  # "y=2x+3" vs "y=3+2x": same variable, compare values
    if not all(n.kind == "leaf" for n in (gl, gr, pl, pr)):
        return False, "cannot compare these equations"
    # Same solution set: (gl - gr) is a non-zero constant multiple of (pl - pr).
    a = _sympify(gl.text) - _sympify(gr.text)
    b = _sympify(pl.text) - _sympify(pr.text)
    if a.free_symbols != b.free_symbols or b == 0:
        return False, "equations in different variables"
    ratios = _sample(a / b, a.free_symbols)
    if (
        len(ratios) >= 2
        and abs(ratios[0]) > 1e-12
        and all(_close(r, ratios[0], 1e-8) for r in ratios)
    ):
        return True, "equivalent equations"
    return False, "equations are not equivalent"


def _leaf_equal(g: str, p: str, rel_tol: float) -> tuple[bool, str]:
    if g == p:
        return True, "identical after normalisation"
    if is_text(g) or is_text(p):
        return False, "different text answers"
    base = re.fullmatch(r"(\w+?)_(\w+)", g)
    if base and base.group(1).isdigit():  # "52_8": the same digits, with or without the base
        same = re.fullmatch(re.escape(base.group(1)) + r"(_" + base.group(2) + ")?", p)
        return (True, "same digits in the given base") if same else (False, "different numeral")
    a, b = _sympify(g), _sympify(p)
    approx = bool(re.search(r"\d\.\d", g + " " + p))
    if a == b:
        return True, "equal after simplification"
    free = a.free_symbols | b.free_symbols
    if not free:
        return _numbers_equal(a, b, approx, rel_tol)
    if sympy.expand(a - b) == 0:
        return True, "symbolically equal"
    tol = rel_tol if approx else 1e-8
    pairs = list(zip(_sample(a, free), _sample(b, free)))
    if len(pairs) >= 2 and all(_close(x, y, tol) for x, y in pairs):
        return True, "equal at random points"
    return False, "different expressions"


def _numbers_equal(a: sympy.Expr, b: sympy.Expr, approx: bool, rel_tol: float) -> tuple[bool, str]:
    if a.is_Rational and b.is_Rational and not approx:
        return False, "different numbers"
    x, y = complex(sympy.N(a, 30)), complex(sympy.N(b, 30))
    if not (_finite(x) and _finite(y)):
        return False, "different numbers"
    if _close(x, y, rel_tol if approx else _EXACT_TOL):
        return True, "equal within rel_tol" if approx else "numerically equal"
    return False, "different numbers" if not approx else "different numbers (beyond rel_tol)"


def _sample(expr: sympy.Expr, free: set) -> list[complex]:
    """Values of `expr` at fixed pseudo-random rational points (skipping singular ones)."""
    values = []
    symbols = sorted(free, key=str)
    for k in range(_SAMPLES):
        point = {s: sympy.Rational(37 + 11 * k + 7 * j, 29 + 3 * j) for j, s in enumerate(symbols)}
        value = complex(sympy.N(expr.subs(point), 30))
        if _finite(value):
            values.append(value)
    return values


def _close(x: complex, y: complex, tol: float) -> bool:
    return abs(x - y) <= tol * max(abs(x), abs(y)) or abs(x - y) < 1e-300


def _finite(z: complex) -> bool:
    return math.isfinite(z.real) and math.isfinite(z.imag)


def _sympify(s: str) -> sympy.Expr:
    """Parse a plain leaf with sympy, refusing unsafe text and numbers too large to compute."""
    if len(s) > 2000 or not _SAFE.fullmatch(s) or "__" in s or re.search(r"[A-Za-z_)\]]\s*\.", s):
        raise Refused("unsafe or unparseable expression")
    names = {n: sympy.Symbol(n) for n in re.findall(r"[A-Za-z]\w*", s) if n not in _FUNCS}
    names.update(_FUNCS)
    names.update({g: sympy.Symbol(g) for g in GREEK if g in s})
    s = s.replace("lambda", "lamda")  # a python keyword; sympy itself spells it lamda
    names["lamda"] = sympy.Symbol("lambda")
    raw = parse_expr(s, local_dict=names, transformations=_TRANSFORMS, evaluate=False)
    _check_size(raw)
    expr = parse_expr(s, local_dict=names, transformations=_TRANSFORMS)
    if not isinstance(expr, sympy.Expr):
        raise Refused("not an expression")
    return expr


def _check_size(expr) -> float:
    """Upper bound on log10|value| of an unevaluated tree; Refused when it is astronomically big."""
    if isinstance(expr, sympy.Rational):
        return max(len(str(abs(expr.p))), len(str(expr.q)))
    if isinstance(expr, sympy.Pow):
        base, exponent = expr.args
        size = _check_size(base)
        if isinstance(exponent, sympy.Rational):  # sqrt is Pow(x, 1/2): it shrinks numbers
            factor = abs(float(exponent)) if abs(exponent) < 10**7 else math.inf
        else:  # an unevaluated exponent such as 9**9: bounded by its number of digits
            exponent_size = _check_size(exponent)
            factor = 10**exponent_size if exponent_size < 7 else math.inf
        if factor * max(size, 1) > 1e5:
            raise Refused("number too large to evaluate")
        return factor * max(size, 1)
    if isinstance(expr, sympy.factorial) and _check_size(expr.args[0]) > 4:
        raise Refused("number too large to evaluate")
    sizes = [_check_size(arg) for arg in expr.args]
    if isinstance(expr, sympy.Mul):
        return sum(sizes)
    return max(sizes, default=1) + 1
