"""Eval rows say what a first-day user needs beside the answer: the load time apart from the
search's seconds, the limit that cut a run, a width narrowed to fit the budget, and the code
sandbox a code problem's programs ran in (none for math)."""

from __future__ import annotations

from test_budget_limits import deep

import search
from reports.eval.cells import make_row
from reports.eval.correctness import Grader
from reports.eval.grid import Cell
from search.engines.fake import ScriptedEngine
from search.types import Budget, Problem

NAMES = {"dataset": "toy", "model": "scripted", "scorer": "logprob"}


def row_of(problem: Problem, result: search.Result, tokens: int | None) -> dict:
    cell = Cell(problem, result.algo, dict(result.knobs), tokens=tokens)
    return make_row(cell, "k", NAMES, result, None, Grader())


def test_a_row_holds_load_seconds_cut_by_and_narrowed():
    problem = Problem(prompt="toy", id="toy", answer="1")
    engine = ScriptedEngine(deep, tokens_per_step=3)
    engine.path_tokens = 18  # type: ignore[attr-defined]
    narrowed = search.solve(problem, "best_of_n", Budget(tokens=40), engine=engine,
                            progress=False, n=6)
    row = row_of(problem, narrowed, 40)
    assert row["narrowed"] == {"n": [6, 2]} and row["cut_by"] is None
    assert row["load_seconds"] == 0.0  # an engine object: nothing loaded
    assert row["sandbox"] is None  # math: no program ran
    cut = search.solve(problem, "best_of_n", Budget(tokens=7), engine=engine,
                       progress=False, n=6, fit_budget=False)
    assert row_of(problem, cut, 7)["cut_by"] == "tokens" == cut.stats["cut_by"]


def test_a_code_row_names_the_sandbox_even_where_the_search_ran_no_program():
    from problems import codegen
    from verifiers.code import available_isolation

    problem = codegen.generate(1, seed=5)[0]
    result = search.solve(problem, "greedy", engine="tiny-code", progress=False)
    assert "sandbox" not in result.stats  # greedy runs no program; the grader does
    row = row_of(problem, result, None)
    assert row["sandbox"] == {"isolation": available_isolation(), "gaps": []}
