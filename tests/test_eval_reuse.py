"""The eval runner and its analyses (issue 19, item 8): a deterministic algorithm runs once
and its row is reused for every seed, marked so, and pass@k never counts the copies; plots
split curves by difficulty and name the model and scorer; rows can keep candidate texts."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from test_eval_runner import PROBLEMS, Engine, scorer

import search
from reports.analysis import passk
from reports.analysis.rows import facets, independent
from reports.eval.grid import Grid
from reports.eval.sweep import read_rows, run_grid
from reports.figures import plots
from search import registry
from search.types import Budget


class Counting(Engine):
    """The eval runner's scripted engine, counting the runs (roots) per problem."""

    def __init__(self) -> None:
        super().__init__()
        self.roots: list[str] = []

    def root(self, problem):
        self.roots.append(problem.id)
        return super().root(problem)


def grid(out: Path, engine: Engine, seeds=(0, 1, 2), keep_text: bool = False):
    return run_grid(Grid(PROBLEMS, ["greedy", "best_of_n"], [2], list(seeds), dataset="arith",
                         keep_text=keep_text),
                    out=out, engine=engine, scorer=scorer(), model="scripted", quiet=True)


def test_only_declared_algorithms_are_deterministic_and_they_really_are():
    builtin = {"greedy", "pgtd", "beam", "best_of_n", "mcts"}  # as their papers define them
    assert {a for a in builtin if registry.deterministic(a)} == {"greedy", "pgtd"}
    # the seed changes nothing (greedy consults no scorer, so none is named for it)
    cases: list[tuple[str, dict[str, Any], Any]] = [("greedy", {}, None),
                                                    ("pgtd", {"rollouts": 4}, scorer)]
    for algo, knobs, named in cases:
        runs = [search.solve(PROBLEMS[0], algo, Budget(tokens=40), engine=Engine(),
                             scorer=named and named(), seed=s, progress=False, **knobs)
                for s in (0, 1, 7)]
        assert len({(r.answer, r.text, r.usage.generated_tokens) for r in runs}) == 1, algo


def test_a_deterministic_algorithm_runs_once_and_its_row_is_reused(tmp_path):
    eng = Counting()
    run = grid(tmp_path / "runs.jsonl", eng)
    greedy = [r for r in run.rows if r["algo"] == "greedy"]
    assert len(greedy) == 3 * len(PROBLEMS) and run.reused == 2 * len(PROBLEMS)
    # one greedy run per problem; best_of_n still runs once per seed
    assert len(eng.roots) == len(PROBLEMS) + 3 * len(PROBLEMS)
    for p in PROBLEMS:
        rows = {r["seed"]: r for r in greedy if r["problem_id"] == p.id}
        assert set(rows) == {0, 1, 2} and "reused_from_seed" not in rows[0]
        for s in (1, 2):
            copy = rows[s]
            assert copy["reused_from_seed"] == 0 and copy["key"] != rows[0]["key"]
            same = {k: v for k, v in copy.items() if k not in ("key", "seed",
                                                               "reused_from_seed")}
            assert same == {k: v for k, v in rows[0].items() if k not in ("key", "seed")}
    assert all("reused_from_seed" not in r for r in run.rows if r["algo"] == "best_of_n")
    in_file = read_rows(run.out)  # the same rows, once each (copies after their source)
    assert len({r["key"] for r in in_file}) == len(in_file) == len(run.rows)
    assert sorted(in_file, key=lambda r: r["key"]) == sorted(run.rows, key=lambda r: r["key"])


def test_copies_are_made_on_resume_without_running_again(tmp_path):
    out = tmp_path / "runs.jsonl"
    grid(out, Counting(), seeds=(0,))  # a run killed after the seed-0 rows, say
    eng = Counting()
    run = grid(out, eng)
    assert run.resumed == 2 * len(PROBLEMS) and run.reused == 2 * len(PROBLEMS)
    assert eng.roots.count(PROBLEMS[0].id) == 2  # best_of_n's seeds 1 and 2: greedy reused
    again = grid(out, Counting())
    assert (again.ran, again.reused, again.resumed) == (0, 0, 6 * len(PROBLEMS))


def test_pass_at_k_does_not_count_the_copies(tmp_path):
    rows = list(grid(tmp_path / "runs.jsonl", Counting()).rows)
    greedy = [r for r in rows if r["algo"] == "greedy"]
    counts = passk.problem_counts(greedy, source="rows")
    # brute force: one greedy sample per problem, whatever the seeds
    assert counts == {p.id: (1, int(next(r["correct"] for r in greedy if r["problem_id"] == p.id
                                         and r["seed"] == 0))) for p in PROBLEMS}
    cands = passk.problem_counts(greedy, source="candidates")
    assert all(n == 1 for n, _ in cands.values())
    bon = passk.problem_counts([r for r in rows if r["algo"] == "best_of_n"], source="rows")
    assert all(n == 3 for n, _ in bon.values())  # three independent seeds
    assert len(independent(rows)) == len(rows) - 2 * len(PROBLEMS)
    data = plots.accuracy_series(rows)
    assert {c["label"]: c["seeds"] for c in data["curves"]} == {"greedy": [1], "best_of_n": [3]}


def test_rows_keep_candidate_texts_on_request(tmp_path):
    run = grid(tmp_path / "runs.jsonl", Counting(), seeds=(0,), keep_text=True)
    res = search.solve(PROBLEMS[0], "best_of_n", engine=Engine(), scorer=scorer(), seed=0,
                       progress=False, n=2)
    row = next(r for r in run.rows if r["algo"] == "best_of_n"
               and r["problem_id"] == PROBLEMS[0].id)
    assert [c["text"] for c in row["candidates"]] == [c.text for c in res.candidates]
    assert row["text"] == res.text and res.text.startswith(("think ", "guess "))
    plain = grid(tmp_path / "plain.jsonl", Counting(), seeds=(0,))
    assert all("text" not in c and "text" not in r for r in plain.rows for c in r["candidates"])


def row(pid, algo, difficulty, correct, seed=0, tokens=100, model="m", scorer="s"):
    return {"schema": 1, "key": f"{pid}|{algo}|{seed}|{model}|{scorer}", "problem_id": pid,
            "difficulty": difficulty, "model": model, "scorer": scorer, "algo": algo,
            "knobs": {}, "budget": {"width": 4, "tokens": None}, "seed": seed,
            "correct": correct, "status": "ok",
            "usage": {"generated_tokens": tokens, "flops": tokens, "scorer_calls": 1},
            "candidates": [{"answer": "1", "score": 0.5, "finished": True, "correct": correct}]}


def test_plots_facet_by_difficulty_and_name_model_and_scorer(tmp_path):
    # level 3: beam right on 2 of 2; level 5: right on 1 of 4
    rs = [row(f"e{i}", "beam", 3, True) for i in range(2)] + \
        [row(f"h{i}", "beam", 5, i == 0) for i in range(4)]
    assert [(d, len(r)) for d, r in facets(rs)] == [(3, 2), (5, 4)]
    data = plots.accuracy_vs_compute(rs, tmp_path)
    assert data["difficulties"] == [3, 5]
    assert [(c["difficulty"], c["y"]) for c in data["curves"]] == [(3, [1.0]), (5, [0.25])]
    assert (data["models"], data["scorers"]) == (["m"], ["s"])
    svg = Path(data["files"]["svg"]).read_text()
    assert "difficulty 3" in svg and "difficulty 5" in svg and "model m, scorer s" in svg
    cov = plots.coverage_plot(rs, tmp_path)
    assert [(c["difficulty"], c["y"][0]) for c in cov["curves"]] == [(3, 1.0), (5, 0.25)]
    tts = plots.tokens_to_solve(rs, tmp_path)
    assert [(c["difficulty"], c["solved"]) for c in tts["curves"]] == [(3, 2), (5, 1)]
    one = plots.accuracy_vs_compute([r for r in rs if r["difficulty"] == 5], tmp_path / "one")
    assert one["difficulties"] == [] and one["curves"][0]["difficulty"] == 5
    assert json.loads(Path(one["files"]["json"]).read_text())["models"] == ["m"]


def test_curves_of_different_models_or_scorers_are_never_pooled(tmp_path):
    rs = [row("p0", "beam", None, True, model="a"), row("p0", "beam", None, False, model="b"),
          row("p1", "beam", None, True, model="a"), row("p1", "beam", None, True, model="b")]
    data = plots.accuracy_vs_compute(rs, tmp_path)
    got = {c["label"]: c["y"][0] for c in data["curves"]}
    assert got == {"beam [model a]": 1.0, "beam [model b]": 0.5}
    assert data["models"] == ["a", "b"]
    assert "2 models, scorer s" in Path(data["files"]["svg"]).read_text()
    assert math.isclose(sum(got.values()), 1.5)


@pytest.mark.parametrize("levels", [[3, 5]])
def test_eval_rows_carry_difficulty_for_the_facets(tmp_path, levels):
    from problems import arith

    probs = [p for d in levels for p in arith.generate(2, seed=1, difficulty=d)]
    eng = Engine()
    run = run_grid(Grid(probs, algos=["best_of_n"], budgets=[2], dataset="arith"),
                   out=tmp_path / "r.jsonl", engine=eng, scorer=scorer(), model="scripted",
                   quiet=True)
    assert [d for d, _ in facets(run.rows)] == levels
