"""Exact, bounded rational arithmetic on plain strings like "16-3-4", "(80000+50000)*1.5", "2**10".

Shared by the math verifier's fast path (most GSM8K/AIME answers are plain numbers, so no sympy
and no worker process is needed) and by the step checker. Number literals become `Fraction`s, so
"0.1+0.2" is exactly 3/10; the expression is read with `ast`, never `eval`, and every power is
size-checked before it is computed, so "9**9**9**9" is refused in microseconds instead of hanging.
"""

from __future__ import annotations

import ast
import functools
import re
from fractions import Fraction

MAX_CHARS = 1000  # longer inputs are not "simple arithmetic"; refuse rather than risk slow work
MAX_BITS = 20_000  # largest numerator/denominator a power may produce (about 6000 digits)

_NUMBER = re.compile(r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_ALLOWED_CHARS = re.compile(r"[\d.eE+\-*/() ]*")


def eval_rational(expr: str) -> Fraction | None:
    """Value of an arithmetic expression of + - * / ** and parentheses, or None.

    None means "not simple exact arithmetic": symbols, irrational powers, division by zero,
    numbers too large, or anything unparseable. Never raises.
    """
    if not isinstance(expr, str) or len(expr) > MAX_CHARS or not _ALLOWED_CHARS.fullmatch(expr):
        return None
    return _evaluated(expr)


@functools.lru_cache(maxsize=1 << 14)
def _evaluated(expr: str) -> Fraction | None:
    """eval_rational of an allowed expression, remembered (a Fraction is immutable; the step
    checker reads the same sides again and again)."""
    literals: list[Fraction] = []

    def _name(m: re.Match[str]) -> str:
        literals.append(Fraction(m.group(0)) if "e" not in m.group(0).lower() else _sci(m.group(0)))
        return f"_n{len(literals) - 1}"

    try:
        # Replace every literal by a name first: ast would turn "0.1" into an inexact float.
        source = _NUMBER.sub(_name, expr)
        tree = ast.parse(source.strip() or "None", mode="eval")
        return _eval(tree.body, literals)
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, RecursionError):
        return None
    except _Refused:
        return None


def _sci(literal: str) -> Fraction:
    mantissa, exponent = re.split(r"[eE]", literal)
    if len(exponent.lstrip("+-")) > 4:
        raise _Refused
    return Fraction(mantissa) * Fraction(10) ** int(exponent)


class _Refused(Exception):
    """The expression is outside what this evaluator accepts (raised internally only)."""


def _eval(node: ast.AST, literals: list[Fraction]) -> Fraction:
    if isinstance(node, ast.Name) and node.id.startswith("_n"):
        return literals[int(node.id[2:])]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _eval(node.operand, literals)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        left = _eval(node.left, literals)
        right = _eval(node.right, literals)
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        if isinstance(node.op, ast.Div):
            return left / right
        if isinstance(node.op, ast.Pow):
            return _power(left, right)
    raise _Refused


def _power(base: Fraction, exponent: Fraction) -> Fraction:
    if exponent.denominator != 1:
        raise _Refused  # roots are usually irrational: leave them to sympy
    size = max(base.numerator.bit_length(), base.denominator.bit_length())
    if abs(base) not in (0, 1) and size * abs(exponent.numerator) > MAX_BITS:
        raise _Refused
    if base == 0 and exponent < 0:
        raise ZeroDivisionError
    return base**exponent.numerator
