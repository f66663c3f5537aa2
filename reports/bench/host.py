"""Benchmark: where the thread that runs the forwards spends its wall.

    python -m reports.bench.host                        # tiny-arith grid at concurrency 16
    python -m reports.bench.host --parts tiny,smol      # and SmolLM2 best-of-4 on GSM8K
    python -m reports.bench.host --tiny-limit 8 --concurrency 4
    python -m reports.bench.host --parts forward        # one merged forward alone

One grid run at concurrency N with probes on the functions the owner thread (the scheduler's
one lane, `tts-engine-0`: see search.runtime.sched; the main thread at concurrency 1) runs,
each counted by *exclusive* time: a probe's time less the time of the probes it calls, so
nothing is counted twice and the categories plus the owner's unprobed time add up to the
grid's wall. Categories:

  kernels     the forward's packed GEMMs, attention (SDPA off the CPU's kernel), norms,
              rotary and SiLU, where Python calls them (bench.eval.KERNELS: the LM head and
              the final norm; every layer's too where TorchScript is missing), and the
              layers in TorchScript (search.runtime.scripted: project, write, the attention kernel,
              post), their kernels and small ops together (no probe sees inside them)
  host        KV writes and row copies (the slab's update/take/keep, writes into pool
              blocks), batch caches built (kv.batch_cache, SlabCache.from_paths, PagedCache and
              columns), masks
              turned into additive biases off the kernel
              (attention.group_bias), the lean forward's own small ops (views, splits, the
              per-layer loop over Passes: lean.LeanLlama._layers less the above), sampling
              (sampling.sample_many), the
              jobs' Python (the decode and feed loops run by the owner: sched.Request.advance
              less the above), the scheduler's merging of Passes (passes.run_passes less the
              above), idle (waiting for a job: _Lane.wait)
  the rest    the owner's wall outside every probe (the scheduler loop's bookkeeping, and any
              wait for the interpreter lock between probes), by difference; at concurrency 1
              the owner is the main thread, which also runs the search's own Python (in the
              rest too) and its jobs (through Request.advance, as a lane runs them)

Each row gives the owner's wall seconds, its share of the grid's wall, the owner's CPU seconds
in it (wall minus CPU there is time the thread was runnable but waiting: for the interpreter
lock, which the N search threads share with it, or for a core) and the calls. A probe costs
about a microsecond or two (calibrated and printed), charged to its caller's category. The
search threads' own Python (algorithms, scorers) runs outside the owner; their CPU (with
OpenMP's worker) is printed as the process's CPU less the owner's.
"""

from __future__ import annotations

import importlib
import resource
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reports.bench.eval import GRID_OPTIONS, KERNELS, PIECES, clocked_run, tiny_arith
from reports.eval.grid import Grid
from search.cli import parse

IDLE = "idle (no job in flight)"
REST = "the rest (scheduler loop, waits between probes)"
KERNEL_KINDS = tuple(dict.fromkeys(kind for kind, _, _ in KERNELS if kind != PIECES))

# (category, "module" or "module:Class", attribute) of every probe; a module-level function
# is probed wherever a loaded project module holds it by name (sched imports sample_many)
_HOST = {  # category -> (where, attribute) of its probes
    "KV writes and row copies": [("search.runtime.kv:_SlabLayer", "update"),
                                 ("search.runtime.kv:SlabCache", "take"),
                                 ("search.runtime.kv:SlabCache", "keep"),
                                 ("search.runtime.kvpool:Blocks", "write")],
    "batch caches built": [("search.runtime.kv", "batch_cache"),
                           ("search.runtime.kv:SlabCache", "from_paths"),
                           ("search.runtime.paged:PagedCache", "__init__"),
                           ("search.runtime.kv:SlabCache", "columns")],
    "masks as biases": [("search.runtime.attention", "group_bias")],
    "lean forward's small ops": [("search.runtime.lean:LeanLlama", "_layers")],
    "sampling": [("search.runtime.sampling", "sample_many")],
    "jobs' Python (decode, feed loops)": [("search.runtime.sched:Request", "advance")],
    "scheduler: merging Passes": [("search.runtime.passes", "run_passes")],
    IDLE: [("search.runtime.sched:_Lane", "wait")],
}
PROBES = KERNELS + tuple((cat, where, attr) for cat, probes in _HOST.items()
                         for where, attr in probes)
CATEGORIES = tuple(dict.fromkeys(c for c, _, _ in PROBES)) + (REST,)


@dataclass
class Tally:
    """Exclusive seconds (wall and thread CPU) and calls per category, of the owner's calls."""

    wall: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    cpu: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    calls: defaultdict[str, int] = field(default_factory=lambda: defaultdict(int))


def always() -> bool:
    return True


class Probes:
    """Wraps callables so that each call the owner makes adds its exclusive time to its
    category (the time of probed callees goes to theirs). owns: whether the calling thread is
    the one profiled (a comparison: `current_thread() is owner`); only it touches the stack
    of open probes. clock/cpu: wall and thread-CPU clocks (injectable: tests drive them)."""

    def __init__(self, owns: Callable[[], bool] = always,
                 clock: Callable[[], float] = time.perf_counter,
                 cpu: Callable[[], float] = time.thread_time) -> None:
        self.owns, self.clock, self.cpu = owns, clock, cpu
        self.tally = Tally()
        self._open: list[list[float]] = []  # [child wall, child cpu] per open probe, owner's

    def wrap(self, fn: Callable[..., Any], category: str) -> Callable[..., Any]:
        tally, stack, owns, clock, cpu = self.tally, self._open, self.owns, self.clock, self.cpu

        def probed(*args: Any, **kwargs: Any) -> Any:
            if not owns():
                return fn(*args, **kwargs)
            child = [0.0, 0.0]
            stack.append(child)
            t0, c0 = clock(), cpu()
            try:
                return fn(*args, **kwargs)
            finally:
                dt, dc = clock() - t0, cpu() - c0
                stack.pop()
                tally.wall[category] += dt - child[0]
                tally.cpu[category] += dc - child[1]
                tally.calls[category] += 1
                if stack:
                    stack[-1][0] += dt
                    stack[-1][1] += dc
        return probed


PROJECT = ("search", "rewards", "reports", "verifiers", "problems")  # modules to patch


def _holds(module: Any, name: str, raw: Any) -> bool:
    try:
        return getattr(module, name, None) is raw
    except Exception:  # noqa: BLE001  # a lazy module's __getattr__: it holds nothing
        return False


def _owner(where: str) -> tuple[Any, bool]:
    """The module or class a probe's attribute lives on, and whether it is a class."""
    module, _, cls = where.partition(":")
    mod = importlib.import_module(module)
    return (getattr(mod, cls), True) if cls else (mod, False)


@contextmanager
def probed(probes: Probes, table: Sequence[tuple[str, str, str]] = PROBES) -> Iterator[Probes]:
    """Every probe in `table` installed for the block, then put back, whatever the block
    raises."""
    # the lean forward's TorchScript pieces compile what they call (packed._gemm, ...) when
    # first imported: before the probes wrap those, or they would run as Python
    importlib.import_module("search.runtime.scripted")
    saved: list[tuple[Any, str, Any]] = []
    try:
        for category, where, name in table:
            obj, is_class = _owner(where)
            raw = obj.__dict__.get(name) if is_class else getattr(obj, name, None)
            if raw is None:
                continue
            if isinstance(raw, staticmethod):
                saved.append((obj, name, raw))
                setattr(obj, name, staticmethod(probes.wrap(raw.__func__, category)))
                continue
            wrapped = probes.wrap(raw, category)
            holders = [obj] if is_class else [obj] + [
                m for key, m in list(sys.modules.items())
                if key.split(".")[0] in PROJECT and m is not obj and _holds(m, name, raw)]
            for holder in holders:
                saved.append((holder, name, raw))
                setattr(holder, name, wrapped)
        yield probes
    finally:
        for obj, name, raw in reversed(saved):
            setattr(obj, name, raw)


@dataclass(frozen=True)
class Row:
    category: str
    wall: float
    share: float  # of the grid's wall
    cpu: float | None  # None for the rest (by difference: no CPU clock of its own)
    calls: int


def breakdown(wall: float, tally: Tally) -> list[Row]:
    """The owner thread's rows in CATEGORIES order (the rest by difference), so their wall
    seconds sum to `wall` and their shares to 1."""
    w, c, n = tally.wall, tally.cpu, tally.calls
    named = [c_ for c_ in CATEGORIES if c_ != REST]
    rows = [Row(k, w[k], w[k] / wall, c[k], n[k]) for k in named]
    rest = wall - sum(r.wall for r in rows)
    return rows + [Row(REST, rest, rest / wall, None, 0)]


def render(rows: Sequence[Row], title: str) -> str:
    """A markdown table of the rows, then the kernels' and everything else's share."""
    lines = [f"{title}", "", "| where | owner wall s | share | owner CPU s | calls |",
             "| --- | --- | --- | --- | --- |"]
    for r in rows:
        cpu = "-" if r.cpu is None else f"{r.cpu:.2f}"
        lines.append(f"| {r.category} | {r.wall:.2f} | {r.share:.1%} | {cpu} | {r.calls:,} |")
    kern = sum(r.share for r in rows if r.category in KERNEL_KINDS)
    ts = sum(r.share for r in rows if r.category == PIECES)
    lines += ["", f"kernels seen from Python {kern:.1%} of the wall, TorchScript layer pieces "
                  f"{ts:.1%}, everything else {1 - kern - ts:.1%}"]
    return "\n".join(lines)


def calibrate(probes_cls: type[Probes] = Probes, calls: int = 20000) -> float:
    """Seconds one probe adds to a call (a no-op's, probed minus bare)."""
    def noop() -> None:
        return None
    wrapped = probes_cls().wrap(noop, "x")
    t0 = time.perf_counter()
    for _ in range(calls):
        noop()
    bare = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(calls):
        wrapped()
    return max(0.0, (time.perf_counter() - t0 - bare) / calls)


def profile_grid(grid: Grid, out: Path, concurrency: int, **setup: Any
                 ) -> tuple[float, list[Row], float]:
    """(wall, the owner's rows, CPU seconds of every other thread) of one probed grid, on
    one owner lane (the engine's scheduler's; with two, each would count half of the time)."""
    from search.api import get_engine

    main = threading.main_thread()
    sched = get_engine(setup.get("engine")).scheduler  # type: ignore[attr-defined]

    def owns() -> bool:  # the scheduler's owner runs the forwards at concurrency > 1, else main
        if concurrency == 1:
            return threading.current_thread() is main
        owners = sched.owners
        return bool(owners) and threading.current_thread() is owners[0]

    probes = Probes(owns)
    lanes, sched.lanes = sched.lanes, 1
    try:
        with probed(probes):
            _, wall, cpu = clocked_run(grid, out, concurrency, **setup)
    finally:
        sched.lanes = lanes
    rows = breakdown(wall, probes.tally)
    owner_cpu = sum(r.cpu or 0.0 for r in rows)
    return wall, rows, cpu - owner_cpu


def report(name: str, wall: float, rows: Sequence[Row], others: float, n: int,
           per_probe: float) -> str:
    calls = sum(r.calls for r in rows)
    return (render(rows, f"{name} at concurrency {n}: {wall:.1f} s wall") +
            f"\n{calls:,} probed calls, ~{per_probe * 1e6:.1f} us each: ~{calls * per_probe:.1f}"
            f" s of the wall is the probes'; other threads' CPU (searches, OpenMP worker): "
            f"{others:.1f} s")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse("python -m reports.bench.host", __doc__,
                 {"--parts": dict(default="tiny"), **GRID_OPTIONS}, argv)
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    import torch

    from reports.eval.sweep import load_problems
    from search.api import get_engine

    n = args.concurrency
    per_probe = calibrate()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
    grids: dict[str, tuple[Grid, Mapping[str, Any]]] = {}
    if "tiny" in parts:
        grids["tiny-arith grid"] = tiny_arith(args.tiny_limit)
    if "smol" in parts:
        probs = load_problems("gsm8k", path=args.data, limit=args.smol_limit)
        grids["SmolLM2 GSM8K best_of_n x4"] = (
            Grid(probs, ["best_of_n"], [4], [0], dataset="gsm8k",
                 knobs={"best_of_n": {"step_tokens": 64, "max_depth": 2}}),
            dict(engine=get_engine("smollm2-135m"), scorer="logprob", model="smollm2-135m"))
    if "forward" in parts:
        from reports.bench.forward import forward_alone

        print(forward_alone(get_engine("tiny-arith")) + "\n", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, (grid, setup) in grids.items():
            wall, rows, others = profile_grid(grid, Path(tmp) / f"{len(name)}.jsonl", n,
                                              **setup)
            print(report(name, wall, rows, others, n, per_probe) + "\n", flush=True)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {rss:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
