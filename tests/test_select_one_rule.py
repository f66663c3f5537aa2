"""One final-selection rule per comparison (reports.eval.rules): the demo, the eval runner,
the eval benchmark's grid and compute_table's fit give every search of a comparison the
same `select`, and print which rule chose the answers."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from reports.eval import rules
from search import registry

SELECTING = [a for a in registry.names() if rules.selects(a)]


def _selects(grids: list[Any]) -> dict[str, set[str]]:
    """{algo: the select values its grids' knobs gave it}, over the grids' selecting algos."""
    out: dict[str, set[str]] = {}
    for grid in grids:
        for algo in grid.algos:
            if rules.selects(algo):
                out.setdefault(algo, set()).add((grid.knobs or {}).get(algo, {}).get("select"))
    return out


def test_one_rule_gives_every_selecting_algorithm_the_rule_and_refuses_another():
    got = rules.one_rule(["best_of_n", "beam", "greedy", "rpc"],
                         {"beam": {"m": 2}, "greedy": {}}, "vote")
    assert got == {"best_of_n": {"select": "vote"}, "beam": {"m": 2, "select": "vote"},
                   "greedy": {}, "rpc": {}}
    assert rules.one_rule(["beam"], {"beam": {"select": "vote"}}, "vote") == \
        {"beam": {"select": "vote"}}
    with pytest.raises(ValueError, match="selects by 'weighted_vote' for every search"):
        rules.one_rule(["best_of_n", "beam"], {"beam": {"select": "score"}}, "weighted_vote")
    with pytest.raises(ValueError, match="unknown selection rule"):
        rules.one_rule(["beam"], {}, "first")
    assert {"best_of_n", "beam", "astar", "particle_filter", "particle_gibbs"} <= \
        set(SELECTING)
    assert "greedy" not in SELECTING and "compute_optimal" not in SELECTING


@pytest.mark.parametrize("select", ["score", "vote", "weighted_vote"])
def test_the_demo_passes_one_rule_to_every_search(monkeypatch, tmp_path, capsys, select):
    """reports.demo.main, every grid it runs captured: each selecting algorithm gets the
    --select rule, and the printout names it."""
    import reports.eval.sweep as sweep
    import reports.figures.plots as plots
    import search.api as api
    from reports import demo

    grids: list[Any] = []

    def run_grid(grid: Any, **kw: Any) -> Any:
        grids.append(grid)
        return SimpleNamespace(rows=[], ran=0, resumed=0, errors=0)

    monkeypatch.setattr(sweep, "run_grid", run_grid)
    monkeypatch.setattr(api, "get_engine", lambda *a, **k: object())
    monkeypatch.setattr(plots, "accuracy_vs_compute", lambda *a, **k: {"files": {"png": "p"}})
    monkeypatch.setattr(plots, "scorer_effect", lambda *a, **k: {"files": {"png": "p"}})
    assert demo.main(["--workers", "1", "--problems", "2", "--select", select, "--quiet",
                      "--out", str(tmp_path)]) == 0
    used = _selects(grids)
    assert set(used) == {"best_of_n", "beam", "astar", "particle_filter", "particle_gibbs"}
    assert all(found == {select} for found in used.values()), used
    assert f"final selection: {select} for best_of_n, beam, astar, particle_filter, " \
        "particle_gibbs" in capsys.readouterr().out


def test_the_eval_runner_passes_one_rule_to_every_algorithm(monkeypatch, capsys):
    import reports.eval.sweep as sweep

    grids: list[Any] = []

    def run_grid(grid: Any, **kw: Any) -> Any:
        grids.append(grid)
        rows = [{"algo": a, "selected_by": "greedy" if a == "greedy" else
                 f"{grid.knobs[a]['select']}(steps, min)", "budget": {"width": 4,
                 "tokens": None}, "status": "ok", "correct": True,
                 "usage": {"generated_tokens": 1, "scorer_calls": 1, "seconds": 0.1}}
                for a in grid.algos]
        return SimpleNamespace(rows=rows, ran=len(rows), resumed=0, reused=0, errors=0,
                               out="runs.jsonl")

    monkeypatch.setattr(sweep, "run_grid", run_grid)
    common = ["--dataset", "arith", "--limit", "2", "--model", "tiny-arith", "--scorer",
              "steps", "--algos", "greedy,best_of_n,beam,particle_filter"]
    assert sweep.main([*common, "--select", "weighted_vote"]) == 0
    assert _selects(grids) == {a: {"weighted_vote"}
                               for a in ("best_of_n", "beam", "particle_filter")}
    assert "final selection: greedy greedy; best_of_n weighted_vote; beam weighted_vote; " \
        "particle_filter weighted_vote" in capsys.readouterr().out
    # no --select: the rule a --knob names goes to all; with none, the default with a scorer
    assert sweep.main([*common, "--knob", "beam.select=vote", "--quiet"]) == 0
    assert _selects(grids[1:2]) == {a: {"vote"} for a in ("best_of_n", "beam",
                                                          "particle_filter")}
    assert sweep.main([*common, "--quiet"]) == 0
    assert _selects(grids[2:3]) == {a: {"score"} for a in ("best_of_n", "beam",
                                                           "particle_filter")}
    # two rules in one grid are refused before anything runs
    assert sweep.main([*common, "--select", "vote", "--knob", "beam.select=score"]) == 2
    assert sweep.main([*common, "--knob", "beam.select=score",
                       "--knob", "best_of_n.select=vote"]) == 2
    assert len(grids) == 3
    assert "one comparison selects by one rule" in capsys.readouterr().err


def test_the_eval_benchmark_grid_passes_one_rule():
    from reports.bench.eval import TINY_ALGOS, tiny_grid

    grid = tiny_grid(2)
    assert list(grid.algos) == list(TINY_ALGOS)
    assert _selects([grid]) == {a: {"score"} for a in TINY_ALGOS}


def _row(algo: str, selected_by: str | None) -> dict[str, Any]:
    return {"algo": algo, "selected_by": selected_by}


def test_compute_table_fits_rows_of_one_rule_only():
    from reports.studies import compute_table

    mixed = [_row("best_of_n", "weighted_vote(steps, min)"), _row("beam", "score(steps, min)"),
             _row("greedy", "greedy"), _row("compute_optimal", "beam: score(steps, min)")]
    with pytest.raises(ValueError, match="2 rules .*best_of_n weighted_vote; beam score"):
        compute_table.fit(mixed)
    kept = rules.with_rule(mixed, "score")
    assert [r["algo"] for r in kept] == ["beam", "greedy", "compute_optimal"]
    assert rules.shared_rule(kept) == "score"
    assert rules.shared_rule([_row("greedy", "greedy")]) is None
    assert rules.final_selection(mixed) == ("final selection: best_of_n weighted_vote; beam "
                                            "score; greedy greedy; compute_optimal beam: score")
    assert rules.rule_of("weighted_vote(steps, min), after budget reserve") == "weighted_vote"
