"""Ray-sharded evals (reports.eval.ray_workers): a local Ray cluster (2 CPUs) runs a grid with the
scripted engine; its rows equal a local run's (the reference: reports.eval without Ray), one
per cell, also when a worker process is SIGKILLed mid-run or the file already holds some rows.
Without --ray nothing imports Ray."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import scripted_grid
from scripted_grid import CELLS, GRID, PROBLEMS, Engine, by_key, file_rows, scorer

from reports.eval.grid import Grid
from reports.eval.sweep import run_grid

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'tts-search[ray]'")
    cloudpickle = pytest.importorskip("ray.cloudpickle")

    cloudpickle.register_pickle_by_value(scripted_grid)  # workers lack tests/ on sys.path
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, dict[str, Any]]:
    """The grid run locally (reports.eval without Ray): rows by key."""
    run = run_grid(Grid(PROBLEMS, **GRID), out=tmp_path_factory.mktemp("local") / "runs.jsonl",
                   engine=Engine(), scorer=scorer(), model="scripted", quiet=True)
    return by_key(run.rows)


@pytest.mark.slow
def test_sharded_rows_equal_a_local_run_even_when_a_worker_dies(cluster, reference, tmp_path,
                                                                  capfd):
    from reports.eval.ray_workers import RayRunner

    kill = tmp_path / "kill"
    kill.touch()
    out = tmp_path / "runs.jsonl"
    run = run_grid(Grid(PROBLEMS, **GRID), out=out, engine=Engine(kill=str(kill)),
                   scorer=scorer(), model="scripted", runner=RayRunner(workers=2, num_cpus=1))
    assert not kill.exists() and (tmp_path / "kill.taken").exists()  # one worker died
    assert "replaced 1" in capfd.readouterr().err  # ... and was replaced (progress line)
    rows = file_rows(out)
    assert len(rows) == CELLS == len({r["key"] for r in rows}) and run.ran == CELLS
    assert by_key(rows) == reference
    assert all(r["status"] == "ok" for r in rows)


@pytest.mark.slow
def test_sharded_run_resumes_without_duplicates(cluster, reference, tmp_path):
    from reports.eval.ray_workers import RayRunner

    out = tmp_path / "runs.jsonl"
    local = run_grid(Grid(PROBLEMS[:1], **GRID), out=out, engine=Engine(), scorer=scorer(),
                     model="scripted", quiet=True)
    with out.open("a") as f:
        f.write('{"schema": 1, "key": "cut')  # a writer killed mid-line
    run = run_grid(Grid(PROBLEMS, **GRID), out=out, engine=Engine(), scorer=scorer(),
                   model="scripted", quiet=True, runner=RayRunner(num_cpus=1))
    rows = file_rows(out)
    assert (run.resumed, run.ran) == (len(local.rows), CELLS - len(local.rows))
    assert len(rows) == CELLS == len({r["key"] for r in rows})
    assert by_key(rows) == reference


@pytest.mark.slow
def test_a_cell_that_kills_every_worker_ends_as_an_error_row(cluster, tmp_path):
    from reports.eval.ray_workers import RayRunner

    out = tmp_path / "runs.jsonl"
    run_grid(Grid(PROBLEMS[:2], ["best_of_n"], [2], [0], dataset="arith"), out=out,
             engine=Engine(deadly=PROBLEMS[0].id), scorer=scorer(), model="scripted", quiet=True,
             runner=RayRunner(workers=1, cell_attempts=2))
    rows = file_rows(out)
    assert [r["problem_id"] for r in rows] == [p.id for p in PROBLEMS[:2]]
    dead, alive = rows
    assert dead["status"] == "error" and dead["error"].startswith("WorkerDied: 2 workers died")
    assert alive["status"] == "ok" and alive["answer"] is not None


@pytest.mark.slow
def test_an_engine_that_cannot_load_stops_the_run(cluster, tmp_path):
    from reports.eval.ray_workers import RayRunner

    with pytest.raises(RuntimeError, match="(?s)could not start its engine.*no-such-model"):
        run_grid(Grid(PROBLEMS[:1], **GRID), out=tmp_path / "runs.jsonl",
                 engine="no-such-model", scorer="logprob", model="scripted", quiet=True,
                 runner=RayRunner(workers=1))
    assert (tmp_path / "runs.jsonl").read_text() == ""


def test_workers_fit_the_cluster():
    from reports.eval.ray_workers import RayRunner

    assert RayRunner().count({"CPU": 8.0}, 100) == 8
    assert RayRunner(num_cpus=2).count({"CPU": 8.0}, 100) == 4
    assert RayRunner(num_cpus=1, num_gpus=1).count({"CPU": 8.0, "GPU": 2.0}, 100) == 2
    assert RayRunner().count({"CPU": 8.0}, 3) == 3
    assert RayRunner(workers=5).count({"CPU": 1.0}, 100) == 5
    with pytest.raises(ValueError):
        RayRunner(workers=0)


def test_without_ray_flag_nothing_imports_ray(tmp_path):
    code = f"""
import sys
from reports.eval.grid import Grid
from reports.eval.sweep import main, run_grid
from search.engines.fake import ScriptedEngine, ScriptedScorer
from search.types import Problem
tree = {{(): [("The answer is 4.", 1.0)]}}
run = run_grid(Grid([Problem(prompt="2+2?", id="a", answer="4")], ["best_of_n"], [2]),
               out={str(tmp_path / "runs.jsonl")!r}, engine=ScriptedEngine(lambda p: tree.get(p, [])),
               scorer=ScriptedScorer(lambda p: 1.0), model="s", quiet=True)
assert [r["correct"] for r in run.rows] == [True]
assert main(["--dataset", "arith", "--limit", "1", "--algos", "greedy", "--dry-run"]) == 0
print(sorted(m for m in sys.modules
             if m == "ray" or m.startswith(("ray.", "reports.eval.ray_workers"))))
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"
