"""Local worker processes: a grid's cells spread over this machine's cores, one engine per
process (`python -m reports.eval ... --workers 2`; the demo's default on a multi-core CPU).

    with Workers(2) as runner:                   # two processes, one intra-op thread each
        run_grid(grid_a, out=..., engine="tiny-arith", runner=runner, concurrency=16)
        run_grid(grid_b, out=..., engine="tiny-arith", runner=runner, concurrency=16)

Why processes: on a CPU, one process running many searches keeps about one core busy
whatever torch's thread count. The owner thread's forward and its Python between forwards
(search.runtime.sched) run one after the other, and the searches wait for their forwards, so
a second core adds little, and a second process does: `python -m reports.bench.eval`
measures them side by side (docs/concurrency.md).

The parent owns the runs file as a local run does (lock, skip the cells done, append each
row, fsynced, as it comes back), so the file is the same as a local run's and resumes the same
way. The worker processes start once (plain `python -c` children) and serve every grid run
through them while the `Workers` block is open: each loads an engine once (by name, or an
Engine object pickled to it: its functions must be importable by name) and a scorer once per
engine and scorer (reports.eval.cells.Worker), and runs up to
`concurrency` cells at once, each in its own thread, their forwards batched. `threads` is
torch's intra-op thread count in each (default: the usable cores split evenly). Rows are
those of one process: a row does not depend on the rows batched beside it, and the lean
forward's bits do not depend on the thread count (tests/test_eval_workers.py compares).

A worker that dies (killed, out of memory) loses only the cells it was running: they go back
on the queue and a new worker starts. A cell that has taken down `cell_attempts` workers
gets an error row ("WorkerDied: ..."), like every error row retried once it is dropped from
the file. A worker that cannot load an engine or scorer stops the grid with that error.
Workers ignore Ctrl-C: an interrupt in the parent (or any error in a grid) stops them, their
cells in flight leaving no row and every row written kept, and the next grid starts new ones.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any

from reports.eval.cells import Worker, append_row, died_row, make_row
from reports.eval.correctness import Grader
from reports.eval.grid import Cell
from reports.eval.grid_progress import GridProgress

if TYPE_CHECKING:
    from search.engines.base import Engine
    from search.scoring import Scorer

STOP_SECONDS = 5.0  # how long a worker asked to stop gets before it is killed

# what a worker loads: (engine, engine_kwargs, scorer, concurrency)
Spec = tuple[Any, dict[str, Any], Any, int]


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class Workers:
    """`count` worker processes for run_grid's `runner` (see the module doc); a context
    manager: the processes start with the first grid and stop when the block ends."""

    def __init__(self, count: int, *, threads: int | None = None, cell_attempts: int = 3
                 ) -> None:
        for name, value in (("count", count), ("threads", 1 if threads is None else threads),
                            ("cell_attempts", cell_attempts)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"workers' {name} must be a positive int, got {value!r}")
        self.count, self.cell_attempts = count, cell_attempts
        self.threads = threads if threads is not None else max(1, usable_cores() // count)
        self.replaced = 0  # workers started again after one died
        self._procs: list[_Proc] = []

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pids(self) -> list[int]:
        """The worker processes' ids (they start with the first grid)."""
        return [p.process.pid for p in self._procs]

    def close(self) -> None:
        """Stop every worker (asked first, killed after STOP_SECONDS)."""
        procs, self._procs = self._procs, []
        for p in procs:
            p.stop()

    def __call__(self, pending: Sequence[tuple[Cell, str]], prior: Sequence[Mapping[str, Any]],
                 *, engine: Engine | str | None, engine_kwargs: Mapping[str, Any],
                 scorer: Scorer | str | None, names: Mapping[str, str], fd: int, quiet: bool,
                 total: int, concurrency: int = 1) -> dict[str, dict[str, Any]]:
        """Run the pending cells on the workers (`concurrency` in flight on each), appending
        each row to fd; rows by key."""
        spec: Spec = (engine, dict(engine_kwargs), scorer, concurrency)
        want = min(self.count, -(-len(pending) // concurrency))
        while len(self._procs) < want:
            self._procs.append(_Proc(self.threads))
        procs = self._procs[:want]
        try:
            return self._run(procs, spec, pending, prior, names, fd, quiet, total)
        except BaseException:  # Ctrl-C, a failed load: the workers' state is unknown, stop them
            self.close()
            raise

    def _run(self, procs: list[_Proc], spec: Spec, pending: Sequence[tuple[Cell, str]],
             prior: Sequence[Mapping[str, Any]], names: Mapping[str, str], fd: int,
             quiet: bool, total: int) -> dict[str, dict[str, Any]]:
        concurrency = spec[-1]
        _load(procs, spec)
        queue, attempts = deque(range(len(pending))), Counter[int]()
        new: dict[str, dict[str, Any]] = {}
        grader = Grader()
        with GridProgress(pending=len(pending), total=total, quiet=quiet,
                          desc=f"{names['dataset']} on {len(procs)} workers",
                          prior_right=sum(bool(r["correct"]) for r in prior),
                          prior_seen=len(prior)) as bar:
            def write(i: int, row: dict[str, Any]) -> None:
                key = pending[i][1]
                append_row(fd, row)
                new[key] = row
                bar.finished(row)

            while queue or any(p.running for p in procs):
                for p in procs:
                    while queue and len(p.running) < concurrency:
                        i = queue.popleft()
                        p.send(("cell", p.specs.index(_key(spec)), i, *pending[i],
                                dict(names)))
                        p.running.add(i)
                        bar.started()
                for conn in wait([p.conn for p in procs if p.running]):
                    w = next(k for k, p in enumerate(procs) if p.conn is conn)
                    try:
                        i, row = procs[w].conn.recv()
                    except (EOFError, OSError):  # the process is gone, and its cells with it
                        lost = sorted(procs[w].running)
                        procs[w], ended = self._replace(procs[w], spec)
                        for i in lost:
                            bar.stopped()
                            attempts[i] += 1
                            if attempts[i] < self.cell_attempts:
                                queue.appendleft(i)
                                continue
                            write(i, died_row(*pending[i], names, attempts[i], grader,
                                              ended))
                        bar.extra = f"workers replaced {self.replaced}"
                        continue
                    procs[w].running.discard(i)
                    bar.stopped()
                    write(i, row)
        return new

    def _replace(self, dead: _Proc, spec: Spec) -> tuple[_Proc, str]:
        """A new worker in the dead one's place, with the spec loaded, and how the dead one
        ended."""
        dead.stop()
        fresh = _Proc(self.threads)
        self._procs[self._procs.index(dead)] = fresh
        self.replaced += 1
        _load([fresh], spec)
        return fresh, f"its process ended with exit status {dead.process.returncode}"


class _Proc:
    """One worker process, its end of the socket, the specs it has loaded (by index) and the
    cells it is running. A plain `python -c` child (as verifiers' math pool starts): unlike
    multiprocessing's spawn, it never re-imports the caller's __main__, so a script without
    a __main__ guard can use Workers too."""

    def __init__(self, threads: int) -> None:
        mine, theirs = socket.socketpair()
        path = os.pathsep.join(p for p in sys.path if p)  # the child imports what we import
        self.process = subprocess.Popen(
            [sys.executable, "-c", "import sys; from reports.eval.workers import serve; "
             "serve(int(sys.argv[1]), int(sys.argv[2])); from reports.eval.workers import "
             "leave; leave()", str(theirs.fileno()), str(threads)],
            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": path})
        theirs.close()
        self.conn = Connection(mine.detach())
        self.specs: list[tuple[Any, ...]] = []  # the loaded specs' keys, in the worker's order
        self.held: list[Spec] = []  # the specs themselves (their objects' ids stay theirs)
        self.running: set[int] = set()

    def send(self, message: Any) -> None:
        # where it died, recv sees the end of the socket, and the caller replaces it
        with contextlib.suppress(OSError):
            self.conn.send(message)

    def stop(self) -> None:
        self.send(None)
        try:
            self.process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.conn.close()


def _key(spec: Spec) -> tuple[Any, ...]:
    """What tells specs apart: names and settings by value, objects (an Engine, a Scorer) by
    identity (an object's == may compare tensors); the worker keeps the spec, and so the
    object alive, which keeps its id its own."""
    engine, engine_kwargs, scorer, concurrency = spec

    def ident(x: Any) -> Any:
        return x if x is None or isinstance(x, str) else ("object", id(x))

    return ident(engine), repr(sorted(engine_kwargs.items())), ident(scorer), concurrency


def _load(procs: Sequence[_Proc], spec: Spec) -> None:
    """Have each worker load `spec` (all at once), unless it has; RuntimeError with the
    worker's reason where one cannot."""
    loading = [p for p in procs if _key(spec) not in p.specs]
    for p in loading:
        p.send(("load", spec))
    for p in loading:
        try:
            ok, why = p.conn.recv()
        except (EOFError, OSError):
            ok, why = False, f"the process ended (exit status {p.process.wait()})"
        if not ok:
            raise RuntimeError(f"a worker could not load its engine or scorer: {why}")
        p.specs.append(_key(spec))
        p.held.append(spec)


def serve(fd: int, threads: int) -> None:
    """A worker process's main, talking over the socket at fd: load what the parent asks (a
    reply each), run each cell it sends in a thread of its own, send back (cell index, row);
    None or the parent's end ends it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the workers
    conn = Connection(fd)
    from search.runtime.omp import use_threads

    use_threads(threads)
    loaded: list[Worker] = []
    sending = threading.Lock()

    def reply(message: Any) -> None:
        with sending:
            conn.send(message)

    def run(worker: Worker, i: int, cell: Cell, key: str, names: Mapping[str, str]) -> None:
        try:
            row = worker.run(cell, key, names)
        except Exception as err:  # a bug in making the row: recorded, not lost
            row = make_row(cell, key, names, None, f"{type(err).__name__}: {err}",
                           worker.grader)
        reply((i, row))

    try:
        _serve_loop(conn, loaded, run, reply)
    finally:
        for worker in loaded:
            worker.close()


def leave() -> None:
    """A worker's exit once serve returns: its output flushed, then os._exit, as
    multiprocessing's children end. Its daemon threads (the cells', the scheduler's winding
    lanes) may still be inside torch, whose thread pools abort the process ("terminate
    called without an active exception") when the interpreter's finalisation destroys them
    under a running thread."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _serve_loop(conn: Connection, loaded: list[Worker], run: Any, reply: Any) -> None:
    """serve's loop: each message until None or the parent's end."""
    while True:
        try:
            message = conn.recv()
        except EOFError:  # the parent is gone
            return
        if message is None:
            return
        if message[0] == "load":
            engine, engine_kwargs, scorer, concurrency = message[1]
            try:
                loaded.append(Worker(engine, engine_kwargs, scorer, concurrency))
                reply((True, None))
            except Exception as err:  # the parent stops the grid with it
                reply((False, f"{type(err).__name__}: {err}"))
        else:
            _, spec, i, cell, key, names = message
            threading.Thread(target=run, args=(loaded[spec], i, cell, key, names),
                             daemon=True).start()
