"""What the pages state of the code, read back from the code: the statuses a search can end
with, where the commands write, and no test count (it changes with every commit; `python -m
pytest --collect-only -q | tail -1` prints it)."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import search.algos
from search.types import Result

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
COUNT = re.compile(r"\b\d{1,3}(,\d{3})+\s+(passed|tests|failed|skipped)\b"
                   r"|\b\d{3,}\s+(passed|tests)\b(?! (of|in|for|per)\b)")


def statuses() -> set[str]:
    """Every status the one ending of every search (search.algos._outcome) can give: the
    strings it assigns to `status`."""
    tree = ast.parse(inspect.getsource(search.algos._outcome))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "status" for t in node.targets):
            found |= {c.value for c in ast.walk(node.value)
                      if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    return found


def test_the_statuses_are_read_from_the_code():
    assert {"ok", "budget_exhausted", "interrupted", "no_answer", "unfinished"} <= statuses()


def test_serve_md_lists_every_status_and_no_other():
    text = (REPO / "docs" / "serve.md").read_text()
    listed = re.search(r"`status` \(([^)]*)\)", text)
    assert listed is not None, "docs/serve.md lists no statuses"
    assert set(re.findall(r'"(\w+)"', listed.group(1))) == statuses()


def test_the_result_says_what_each_status_means():
    doc = inspect.getdoc(Result) or ""
    assert all(f'"{status}"' in doc for status in statuses())


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_page_states_a_test_count(page):
    found = [m.group(0) for m in COUNT.finditer(page.read_text())]
    assert not found, f"{page.name} states a test count: {found}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_command_writes_into_the_package(page):
    """Plots, figures and runs go to the user's own folders (runs/...), never into the
    installed package's reports/ tree."""
    found = re.findall(r"--out\s+\.?/?reports/\S*", page.read_text())
    assert not found, f"{page.name}: {found}"


def test_the_checks_find_what_they_look_for():
    assert COUNT.search("the fast suite (6,297 passed, 20 skipped)")
    assert COUNT.search("| fast suite | 2,641 |") is None  # a bare number is no claim
    assert COUNT.search("4,336 tests") and not COUNT.search("257 tests of math-verify")
