"""Comments and docstrings give shapes and reasons, never history or machine timings: no
issue numbers, no "N x faster", no "took N s", no share of a wall measured on some machine.
Measurements live in docs/ pages and benchmarks that print them, where they can be rerun.

Every source file of the packages is read: its comments (tokenize) and its module, class
and function docstrings (ast); string literals a program prints are not comments.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("search", "verifiers", "rewards", "problems", "reports", "training")
ISSUE = re.compile(r"\b[Ii]ssues? #?\d+|(?<![\w&/])#\d+\b(?![0-9a-fA-F])")
TIMING = re.compile(
    r"\b\d+(\.\d+)?\s*(x|×)\s+(faster|slower|quicker)\b"
    r"|\d+(\.\d+)?\s*%\s+of\s+(the\s+|its\s+|a\s+)?(wall|step time|run time)\b"
    r"|\b(took|takes)\s+~?\d+(\.\d+)?\s*(s|ms|min|seconds|minutes)\b"
    r"|~?\d+(\.\d+)?\s*(ms|s)\s+a\s+step\b"
    r"|\b\d+-core\s+(machine|VM|box|laptop)\b")


def sources() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (REPO / package).rglob("*.py"))


def commentary(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of each comment and each line of each docstring."""
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and \
                    isinstance(first.value.value, str):
                for i, line in enumerate(first.value.value.split("\n")):
                    yield first.lineno + i, line


def findings(source: str) -> list[str]:
    return [f"{line}: {text.strip()}" for line, text in commentary(source)
            if ISSUE.search(text) or TIMING.search(text)]


def test_the_checker_finds_what_it_looks_for():
    bad = ('"""Faster now (issue 35): 3.2x faster than before."""\n'
           "x = 1  # took 8.8 s on the old code, see #12\n"
           "def f():\n    '''0.33 s a step on a 2-core VM; 40% of the wall.'''\n")
    assert len(findings(bad)) == 3
    fine = ('"""A 3x3 grid; seconds: float; the budget\'s 10% reserve; colour #fff."""\n'
            'CSS = "color:#222"  # a step of 4 tokens\n')
    assert findings(fine) == []


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_issue_numbers_or_machine_timings_in_comments(path):
    found = findings(path.read_text())
    assert not found, f"{path.relative_to(REPO)}:\n" + "\n".join(found)
