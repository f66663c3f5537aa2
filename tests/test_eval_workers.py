"""Local worker processes (reports.eval.workers): a grid run on two worker processes gives the
rows of a run in this process (the reference), one per cell, also when a worker is SIGKILLed
mid-run or the file already holds some rows; one pool serves several grids without starting
again; a cell that kills every worker ends as an error row; an engine that cannot load stops
the run with its reason; and on the real tiny-arith engine (a worker at one intra-op thread)
the rows equal this process's."""

from __future__ import annotations

import os
from typing import Any

import pytest
from scripted_grid import CELLS, GRID, PROBLEMS, Engine, by_key, file_rows, scorer

from problems import arith
from reports.eval.grid import Grid
from reports.eval.sweep import main, run_grid
from reports.eval.workers import Workers, usable_cores


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, dict[str, Any]]:
    """The grid run in this process: rows by key."""
    run = run_grid(Grid(PROBLEMS, **GRID), out=tmp_path_factory.mktemp("here") / "runs.jsonl",
                   engine=Engine(), scorer=scorer(), model="scripted", quiet=True)
    return by_key(run.rows)


def test_rows_equal_this_process_even_when_a_worker_dies(reference, tmp_path):
    kill = tmp_path / "kill"
    kill.touch()
    out = tmp_path / "runs.jsonl"
    with Workers(2, threads=1) as runner:
        run = run_grid(Grid(PROBLEMS, **GRID), out=out, engine=Engine(kill=str(kill)),
                       scorer=scorer(), model="scripted", quiet=True,
                       runner=runner, concurrency=2)
        assert runner.replaced == 1 and len(runner.pids) == 2
    assert not kill.exists() and (tmp_path / "kill.taken").exists()  # one worker died
    rows = file_rows(out)
    assert len(rows) == CELLS == len({r["key"] for r in rows}) and run.ran == CELLS
    assert by_key(rows) == reference
    assert all(r["status"] == "ok" for r in rows)
    assert runner.pids == []  # the block's end stopped them


def test_resumes_without_duplicates_and_one_pool_serves_two_grids(reference, tmp_path):
    out = tmp_path / "runs.jsonl"
    local = run_grid(Grid(PROBLEMS[:1], **GRID), out=out, engine=Engine(),
                     scorer=scorer(), model="scripted", quiet=True)
    with out.open("a") as f:
        f.write('{"schema": 1, "key": "cut')  # a writer killed mid-line
    with Workers(2, threads=1) as runner:
        run = run_grid(Grid(PROBLEMS, **GRID), out=out, engine=Engine(),
                       scorer=scorer(), model="scripted", quiet=True,
                       runner=runner)
        pids = runner.pids
        # a second grid (another scorer: the workers load it beside the first) on the same pool
        other = run_grid(Grid(PROBLEMS, ["best_of_n"], [2], [0], dataset="arith"),
                         out=tmp_path / "other.jsonl", engine=Engine(), scorer="logprob",
                         model="scripted",
                         quiet=True, runner=runner)
        assert runner.pids == pids and len(pids) == 2  # not started again
    rows = file_rows(out)
    assert (run.resumed, run.ran) == (len(local.rows), CELLS - len(local.rows))
    assert len(rows) == CELLS == len({r["key"] for r in rows})
    assert by_key(rows) == reference
    here = run_grid(Grid(PROBLEMS, ["best_of_n"], [2], [0], dataset="arith"),
                    out=tmp_path / "here.jsonl", engine=Engine(), scorer="logprob",
                    model="scripted", quiet=True)
    assert by_key(other.rows) == by_key(here.rows) and len(here.rows) == len(PROBLEMS)


def test_an_interrupt_stops_the_workers_keeps_the_rows_and_the_same_call_completes(
        reference, tmp_path, monkeypatch):
    """Ctrl-C in the parent as its third row is written: the workers stop (their cells in
    flight leave no row), the two rows written stay, and the same run_grid on the same pool
    (new workers) completes the grid: every row once, each equal to this process's."""
    from reports.eval import workers

    out, written = tmp_path / "runs.jsonl", []

    def append_then_stop(fd: int, row: dict[str, Any]) -> None:
        if len(written) == 2:
            raise KeyboardInterrupt
        written.append(row["key"])
        append(fd, row)

    append = workers.append_row
    with Workers(2, threads=1) as runner:
        monkeypatch.setattr(workers, "append_row", append_then_stop)
        with pytest.raises(KeyboardInterrupt):
            run_grid(Grid(PROBLEMS, **GRID), out=out, engine=Engine(),
                     scorer=scorer(), model="scripted", quiet=True,
                     runner=runner, concurrency=2)
        assert runner.pids == []  # stopped
        assert [r["key"] for r in file_rows(out)] == written
        monkeypatch.setattr(workers, "append_row", append)
        run = run_grid(Grid(PROBLEMS, **GRID), out=out, engine=Engine(),
                       scorer=scorer(), model="scripted", quiet=True,
                       runner=runner, concurrency=2)
    rows = file_rows(out)
    assert (run.resumed, run.ran) == (2, CELLS - 2)
    assert len(rows) == CELLS == len({r["key"] for r in rows}) and by_key(rows) == reference


@pytest.mark.slow
def test_a_cell_that_kills_every_worker_ends_as_an_error_row(tmp_path):
    out = tmp_path / "runs.jsonl"
    with Workers(1, threads=1, cell_attempts=2) as runner:
        run_grid(Grid(PROBLEMS[:2], ["best_of_n"], [2], [0], dataset="arith"), out=out,
                 engine=Engine(deadly=PROBLEMS[0].id), scorer=scorer(),
                 model="scripted", quiet=True, runner=runner)
        assert runner.replaced == 2  # each death replaced its worker
    rows = {r["problem_id"]: r for r in file_rows(out)}
    assert sorted(rows) == sorted(p.id for p in PROBLEMS[:2])
    dead, alive = rows[PROBLEMS[0].id], rows[PROBLEMS[1].id]
    assert dead["status"] == "error" and dead["error"].startswith("WorkerDied: 2 workers died")
    assert dead["error"].endswith("last: its process ended with exit status -9")  # SIGKILL
    assert alive["status"] == "ok" and alive["answer"] is not None


def test_an_engine_that_cannot_load_stops_the_run(tmp_path):
    with Workers(1) as runner, \
            pytest.raises(RuntimeError, match="(?s)could not load its engine.*no-such-model"):
        run_grid(Grid(PROBLEMS[:1], **GRID), out=tmp_path / "runs.jsonl",
                 engine="no-such-model", scorer="logprob", model="scripted", quiet=True,
                 runner=runner)
    assert (tmp_path / "runs.jsonl").read_text() == ""


def test_settings_are_checked_and_threads_split_the_cores():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="positive int"):
            Workers(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="threads"):
        Workers(2, threads=0)
    assert Workers(1).threads == usable_cores()
    assert Workers(2 * usable_cores()).threads == 1
    assert Workers(2, threads=3).threads == 3


def test_the_cli_refuses_workers_with_ray_and_a_bad_count(capsys):
    with pytest.raises(SystemExit):
        main(["--dataset", "arith", "--algos", "greedy", "--workers", "2", "--ray"])
    assert "--workers or --ray" in capsys.readouterr().err
    assert main(["--dataset", "arith", "--limit", "1", "--algos", "greedy", "--workers", "0",
                 "--out", os.devnull]) == 2
    assert "positive int" in capsys.readouterr().err


@pytest.mark.slow
def test_tiny_arith_rows_on_two_workers_equal_this_process(tmp_path):
    """The real engine and scorer: each worker at one intra-op thread, this process at its
    own count; every row (answers, candidates' scores, token counts) the same."""
    grid = Grid(arith.generate(2, seed=11, difficulty=5), ["best_of_n", "beam"], [4], [0],
                dataset="arith")
    here = run_grid(grid, out=tmp_path / "here.jsonl", engine="tiny-arith", scorer="steps",
                    quiet=True, concurrency=4)
    with Workers(2, threads=1) as runner:
        there = run_grid(grid, out=tmp_path / "there.jsonl", engine="tiny-arith",
                         scorer="steps", quiet=True, concurrency=4, runner=runner)
    assert len(there.rows) == 4 and all(r["status"] == "ok" for r in there.rows)
    assert by_key(there.rows) == by_key(here.rows)


def test_a_worker_closed_ends_its_engines_lanes(tiny_engine):
    """Worker.close ends serving: the scheduler's lane threads leave once idle (a worker
    process then exits without a lane inside torch)."""
    import threading
    import time

    from reports.eval.cells import Worker

    def lanes() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name.startswith("tts-engine-")]

    before = set(lanes())
    worker = Worker(tiny_engine, {}, "logprob", concurrency=2)
    assert set(lanes()) - before, "serving starts the engine's lanes"
    worker.close()
    deadline = time.monotonic() + 30
    while set(lanes()) - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not set(lanes()) - before
