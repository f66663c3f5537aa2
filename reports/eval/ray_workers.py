"""Ray-sharded evals: reports.eval's grid spread over Ray workers, one engine per worker
(each running cells with reports.eval.cells, as a local run does).

    python -m reports.eval --dataset arith --model tiny-arith --algos beam,best_of_n \
        --budgets 4,16 --out runs/arith.jsonl --ray                  # a local Ray cluster
    python -m reports.eval ... --ray ray://head:10001 --ray-workers 8 --ray-gpus 1
    python -m reports.eval ... --ray auto       # the cluster this machine belongs to

The driver (the process running reports.eval) owns the JSONL exactly as a local run does: it
holds the file lock, skips the cells already in the file, and appends each row (flushed,
fsynced) as a worker sends it back, so the file is the same as a local run's and resumes the
same way. Workers are Ray actors: each loads its engine once (by model name, or a pickled copy
of an Engine object) and runs one cell at a time; the model never loads on the driver.

A worker that dies (process killed, node lost) loses only the cell it was running: the cell
goes back on the queue and a replacement worker starts. A cell that has taken down
`cell_attempts` workers is recorded as an error row ("WorkerDied: ...") instead of being
retried forever; like every error row, a later run retries it once it is dropped from the file.
A worker that cannot load its engine stops the run with that error. Progress (runs, in
flight, tokens/s, accuracy, workers alive and replaced) goes to stderr. With --concurrency N
each worker is a threaded actor running N cells at once on its engine (their model calls
batched, search.runtime.sched); a worker that dies sends all N back to the queue.

Ray is imported here only, and this module only with --ray (`pip install 'tts-search[ray]'`).
"""

from __future__ import annotations

import sys
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from reports.eval.cells import Worker, append_row, died_row, make_row
from reports.eval.correctness import Grader
from reports.eval.grid import Cell
from reports.eval.grid_progress import GridProgress
from search.extras import require

if TYPE_CHECKING:
    from search.engines.base import Engine
    from search.scoring import Scorer


@dataclass(frozen=True)
class RayRunner:
    """How to shard: address (None: a local cluster, or the one ray.init already joined;
    "auto": this machine's cluster; "ray://host:port": a remote one); workers (default: as
    many as the cluster's CPUs, or GPUs when num_gpus > 0, allow); resources per worker;
    init: further ray.init arguments (e.g. runtime_env)."""

    address: str | None = None
    workers: int | None = None
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    resources: Mapping[str, float] = field(default_factory=dict)
    cell_attempts: int = 3
    init: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"workers must be positive, got {self.workers}")
        if self.num_cpus < 0 or self.num_gpus < 0 or self.cell_attempts < 1:
            raise ValueError(f"invalid Ray runner settings {self}")

    def __call__(self, pending: Sequence[tuple[Cell, str]], prior: Sequence[Mapping[str, Any]],
                 *, engine: Engine | str | None, engine_kwargs: Mapping[str, Any],
                 scorer: Scorer | str | None, names: Mapping[str, str], fd: int, quiet: bool,
                 total: int, concurrency: int = 1) -> dict[str, dict[str, Any]]:
        """Run the pending cells on Ray workers (`concurrency` cells in flight on each),
        appending each row to fd; rows by key."""
        ray = require("ray", "ray")
        started = not ray.is_initialized()
        if started:
            ray.init(address=self.address, **{"include_dashboard": False,
                                              "log_to_driver": not quiet, **self.init})
        try:
            return _Shard(self, ray, pending, prior,
                          (engine, dict(engine_kwargs), scorer, concurrency), names, fd, quiet,
                          total).run()
        finally:
            if started:
                ray.shutdown()

    def count(self, cluster: Mapping[str, float], cells: int) -> int:
        """How many workers to start for `cells` cells on a cluster with these resources."""
        if self.workers is not None:
            return min(self.workers, cells)
        fits = [cluster.get("CPU", 1.0) / self.num_cpus] if self.num_cpus else []
        fits += [cluster.get("GPU", 0.0) / self.num_gpus] if self.num_gpus else []
        return max(1, min(cells, int(min(fits, default=cells))))


class _Shard:
    """One sharded run: the queue of cells, the workers, the rows coming back."""

    def __init__(self, cfg: RayRunner, ray: Any, pending: Sequence[tuple[Cell, str]],
                 prior: Sequence[Mapping[str, Any]], spec: tuple[Any, ...],
                 names: Mapping[str, str], fd: int, quiet: bool, total: int) -> None:
        self.cfg, self.ray, self.pending, self.names, self.fd = cfg, ray, pending, names, fd
        self.quiet, self.total = quiet, total
        self.per_worker = int(spec[-1])  # cells in flight on each worker
        self.spec = [ray.put(x) for x in spec]  # the engine (name or object) ships once
        self.actor = ray.remote(Worker).options(
            num_cpus=cfg.num_cpus, num_gpus=cfg.num_gpus, resources=dict(cfg.resources),
            max_restarts=0, max_task_retries=0, max_concurrency=self.per_worker)
        self.prior = prior
        self.replaced = 0
        self.grader = Grader()

    def start(self) -> Any:
        """A new worker, once its engine has loaded (a load error stops the run)."""
        handle = self.actor.remote(*self.spec)
        try:
            self.ray.get(handle.pid.remote())
        except self.ray.exceptions.RayActorError as err:
            raise RuntimeError(f"a Ray worker could not start its engine: {err}") from None
        return handle

    def run(self) -> dict[str, dict[str, Any]]:
        ray, cfg = self.ray, self.cfg
        cluster = ray.cluster_resources()
        per = self.per_worker
        workers = [self.start() for _ in range(cfg.count(cluster, -(-len(self.pending) // per)))]
        if not self.quiet:
            print(f"ray: {len(workers)} workers ({cfg.num_cpus:g} CPU, {cfg.num_gpus:g} GPU, "
                  f"{per} cells in flight each) on {len(ray.nodes())} node(s) with "
                  f"{cluster.get('CPU', 0):g} CPUs, {cluster.get('GPU', 0):g} GPUs",
                  file=sys.stderr)
        queue, attempts = deque(range(len(self.pending))), Counter[int]()
        # task ref -> (worker index, the handle it went to, cell index)
        running: dict[Any, tuple[int, Any, int]] = {}
        new: dict[str, dict[str, Any]] = {}
        with GridProgress(pending=len(self.pending), total=self.total,
                          desc=f"{self.names['dataset']} on ray", quiet=self.quiet,
                          prior_right=sum(bool(r["correct"]) for r in self.prior),
                          prior_seen=len(self.prior)) as bar:
            while queue or running:
                load = Counter(w for w, _, _ in running.values())
                for w in range(len(workers)):
                    while queue and load[w] < per:
                        i = queue.popleft()
                        cell, key = self.pending[i]
                        running[workers[w].run.remote(cell, key, self.names)] = (w, workers[w], i)
                        load[w] += 1
                        bar.started()
                (ref,), _ = ray.wait(list(running), num_returns=1)
                w, handle, i = running.pop(ref)
                cell, key = self.pending[i]
                bar.stopped()
                try:
                    row = ray.get(ref)
                except ray.exceptions.RayActorError as err:  # the worker process is gone
                    attempts[i] += 1
                    if workers[w] is handle:  # its other cells fail too: replace it once
                        workers[w] = self.start()
                        self.replaced += 1
                    bar.extra = self._status(len(workers))
                    if attempts[i] < cfg.cell_attempts:
                        queue.appendleft(i)
                        bar.bar.set_postfix_str(bar.status(), refresh=True)
                        continue
                    row = died_row(cell, key, self.names, attempts[i], self.grader, str(err))
                except ray.exceptions.RayTaskError as err:  # raised outside run_cell's guard
                    cause = getattr(err, "cause", None) or err
                    row = make_row(cell, key, self.names, None,
                                   f"{type(cause).__name__}: {cause}", self.grader)
                if key in new:  # cannot happen with one task per cell; never write twice
                    continue
                append_row(self.fd, row)
                new[key] = row
                bar.extra = self._status(len(workers))
                bar.finished(row)
        return new

    def _status(self, workers: int) -> str:
        return f"workers {workers}, replaced {self.replaced}"
