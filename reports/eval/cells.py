"""The eval runner's parts that reports.eval (local runs) and reports.eval.ray_workers (Ray
workers) share: the runs file (read, lock, cut a torn line, append fsynced rows), one row per
run, one run per cell (on a search.many.Driver: the engine and scorer loaded once), and the
loop that runs cells here.

A row is appended (one write, then fsync) as its run ends, so a killed runner loses at most
the line it was writing, which `locked` cuts off when the file is next opened.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import math
import os
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reports.eval.correctness import Grader
from reports.eval.grid import Cell
from search import registry
from search.types import Problem, Result, Usage

if TYPE_CHECKING:
    from search.engines.base import Engine
    from search.many import Driver
    from search.scoring import Scorer

SCHEMA = 1


def difficulty_of(problem: Problem) -> int | None:
    """metadata["difficulty"] (procedural sets), else metadata["level"] (MATH), else None."""
    for name in ("difficulty", "level"):
        value = problem.metadata.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def read_rows(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The complete rows of a runs file. An incomplete last line (no newline: its writer was
    killed) is ignored; a corrupt complete line is an error (the file was edited)."""
    p = Path(path)
    if not p.exists():
        return []
    rows = []
    lines = p.read_bytes().split(b"\n")
    for number, line in enumerate(lines[:-1], 1):  # lines[-1]: after the last newline
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError as err:
                raise ValueError(f"{p}:{number}: not a JSON row ({err})") from None
    return rows


def trim_torn_line(fd: int) -> int:
    """Cut an incomplete last line off the file open at fd; returns the bytes removed."""
    size = os.lseek(fd, 0, os.SEEK_END)
    end = size
    while end > 0:  # scan back for the last newline, a block at a time
        start = max(0, end - 65536)
        block = os.pread(fd, end - start, start)
        cut = block.rfind(b"\n")
        if cut >= 0:
            end = start + cut + 1
            break
        end = start
    if end < size:
        os.ftruncate(fd, end)
        os.fsync(fd)
    return size - end


def append_row(fd: int, row: Mapping[str, Any]) -> None:
    """Append one JSON row (strict JSON: no NaN) to the file open at fd, and fsync it."""
    data = memoryview((json.dumps(row, allow_nan=False) + "\n").encode())
    while data:  # one write(2) in practice; loop in case it is cut short
        data = data[os.write(fd, data):]
    os.fsync(fd)


@contextmanager
def locked(path: str | os.PathLike[str], *, quiet: bool = False) -> Iterator[int]:
    """The runs file open for appending (its fd), created if missing, under an exclusive
    lock (RuntimeError if another process holds it), its incomplete last line cut off."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(f"{path} is being written by another eval process") from None
        trimmed = trim_torn_line(fd)
        if trimmed and not quiet:
            print(f"eval: cut an incomplete last line ({trimmed} bytes) off {path}",
                  file=sys.stderr)
        yield fd
    finally:
        os.close(fd)  # releases the lock


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


# -- one run, one row ------------------------------------------------------------------------------------
def make_row(cell: Cell, key: str, names: Mapping[str, str], result: Result | None,
             error: str | None, grader: Grader) -> dict[str, Any]:
    """The JSON row of one run; result None means the run raised `error`."""
    problem = cell.problem
    row: dict[str, Any] = {
        "schema": SCHEMA, "key": key, "dataset": names["dataset"], "problem_id": problem.id,
        "difficulty": difficulty_of(problem), "model": names["model"],
        "scorer": names["scorer"], "selected_by": None, "algo": cell.algo,
        "knobs": dict(cell.knobs),
        "budget": {"width": cell.width, "tokens": cell.tokens}, "seed": cell.seed,
        "answer": None, "gold": problem.answer, "correct": False, "unread": None,
        "status": "error",
        "error": error, "usage": Usage().as_dict(), "load_seconds": None, "cut_by": None,
        "narrowed": None, "sandbox": sandbox_of(problem, None), "candidates": []}
    if result is not None:
        chosen = grader.result(problem, result)
        graded = grader.candidates(problem, result)
        row.update(
            scorer=names["scorer"] if registry.uses_scorer(cell.algo, result.knobs) else None,
            selected_by=result.selected_by,
            answer=result.answer, correct=chosen.correct, status=result.status,
            # why the grader could not read the conclusion (math): counted apart from wrong
            unread=chosen.unread,
            error=None if chosen.error is None else f"grading: {chosen.error}",
            usage=result.usage.as_dict(),
            # loading is not the search's (usage.seconds); the driver loads before the runs
            load_seconds=round(result.load_seconds, 1),
            cut_by=result.stats.get("cut_by"),
            narrowed={k: list(v) for k, v in result.stats.get("narrowed", {}).items()} or None,
            sandbox=sandbox_of(problem, result),
            candidates=[{"answer": c.answer, "score": _finite(c.score), "finished": c.finished,
                         "correct": g.correct, "verified": g.verified,
                         **({"text": c.text} if cell.keep_text else {})}
                        for c, g in zip(result.candidates, graded)])
        if cell.keep_text:
            row["text"] = result.text
    row["time"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return row


def sandbox_of(problem: Problem, result: Result | None) -> dict[str, Any] | None:
    """The code sandbox a row's programs ran in: the search's scorer's (Result.stats
    ["sandbox"]), else, for a code problem, the grader's (isolation "auto": bwrap or
    unshare, never the rlimits mode, so no gaps); None for math."""
    if result is not None and result.stats.get("sandbox"):
        return dict(result.stats["sandbox"])
    if problem.domain != "code":
        return None
    from verifiers.code import available_isolation

    try:
        return {"isolation": available_isolation(), "gaps": []}
    except Exception as err:  # no sandbox here: the grading itself records the failure
        return {"isolation": None, "error": f"{type(err).__name__}: {err}"}


def run_cell(cell: Cell, driver: Driver, progress: Any = False, *,
             cancel: threading.Event | None = None) -> tuple[Result | None, str | None]:
    """The driver's search.solve on one cell (its engine; its scorer, for a cell that
    consults one, else search.solve's default): (result, None), or (None, "Type: message")
    if it raised. progress: search.solve's (a GridProgress.watch() reports the run's tokens
    as it goes). cancel: search.solve's (the driver's: search.many.concurrently)."""
    try:
        return driver.solve(cell.problem, cell.algo, cell.budget, seed=cell.seed,
                            progress=progress, cancel=cancel, **cell.knobs), None
    except Exception as err:  # one failing run is recorded; the grid goes on
        return None, f"{type(err).__name__}: {err}"


def died_row(cell: Cell, key: str, names: Mapping[str, str], attempts: int, grader: Grader,
             last: str = "") -> dict[str, Any]:
    """The error row of a cell that took down `attempts` worker processes (Ray's or local
    ones) and is not retried again; last: what ended the last of them."""
    error = f"WorkerDied: {attempts} workers died running this cell" + \
        (f"; last: {last}" if last else "")
    return make_row(cell, key, names, None, error[:2000], grader)


class Worker:
    """A worker's state (a Ray actor's: reports.eval.ray_workers; a local worker process's:
    reports.eval.workers): a driver (its engine and scorer loaded once) and a grader; with
    concurrency above 1 the engine serves (its cells' forwards batched) while it lives."""

    def __init__(self, engine: Engine | str | None, engine_kwargs: Mapping[str, Any],
                 scorer: Scorer | str | None, concurrency: int = 1) -> None:
        from search.many import Driver

        self.driver = Driver.load(engine, scorer, concurrency=concurrency,
                                  engine_kwargs=engine_kwargs)
        self.grader = Grader()
        self._serving = ExitStack()  # the worker's threads share the engine's forwards
        if concurrency > 1:
            from search.many import serving

            self._serving.enter_context(serving(self.driver.schedulers))

    def close(self) -> None:
        """End serving: the scheduler's lane threads finish and are joined (a process that
        exits with a lane inside a forward can abort in torch's thread pools)."""
        self._serving.close()

    def pid(self) -> int:
        return os.getpid()

    def run(self, cell: Cell, key: str, names: Mapping[str, str]) -> dict[str, Any]:
        result, error = run_cell(cell, self.driver)
        return make_row(cell, key, names, result, error, self.grader)


def copy_rows(cells: Sequence[tuple[Cell, str]], done: Mapping[str, dict[str, Any]],
           names: Mapping[str, str], fd: int) -> dict[str, dict[str, Any]]:
    """Rows for the cells of a deterministic algorithm's other seeds: copies of the row of
    the seed that ran, with their own key and seed, marked reused_from_seed (pass@k and
    coverage do not count them as samples). A cell whose source row is missing is left to
    the next run."""
    new: dict[str, dict[str, Any]] = {}
    for cell, key in cells:
        source = done.get(cell.source.key(**names))
        if source is None:
            continue
        row = {**source, "key": key, "seed": cell.seed, "reused_from_seed": cell.reuse_from}
        append_row(fd, row)
        new[key] = row
    return new


def run_here(pending: Sequence[tuple[Cell, str]], prior: Sequence[Mapping[str, Any]],
             driver: Driver, names: Mapping[str, str], fd: int, *, quiet: bool, total: int
             ) -> dict[str, dict[str, Any]]:
    """Run the pending cells (in grid order, up to the driver's concurrency at once),
    appending each row as its run ends; returns them by key."""
    from reports.eval.grid_progress import GridProgress

    grader = Grader()
    new: dict[str, dict[str, Any]] = {}
    with GridProgress(pending=len(pending), total=total, desc=names["dataset"], quiet=quiet,
                      prior_right=sum(bool(r["correct"]) for r in prior),
                      prior_seen=len(prior)) as bar:
        def one(item: tuple[Cell, str], cancel: threading.Event) -> dict[str, Any]:
            bar.started()
            try:
                cell, key = item
                result, error = run_cell(cell, driver, bar.watch(), cancel=cancel)
                return make_row(cell, key, names, result, error, grader)
            finally:
                bar.stopped()

        for i, row in driver.map(one, pending):
            cell, key = pending[i]
            if isinstance(row, BaseException):  # run_cell and grading catch a run's errors:
                # this is a bug in making the row, recorded rather than losing the grid
                row = make_row(cell, key, names, None, f"{type(row).__name__}: {row}", grader)
            append_row(fd, row)
            new[key] = row
            bar.finished(row)
    return new
