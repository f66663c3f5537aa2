"""Benchmark: eval grids at concurrency 1 and N side by side, in one run.

    python -m reports.bench.eval                     # every part, N = 16
    python -m reports.bench.eval --parts tiny --tiny-limit 8
    python -m reports.bench.eval --parts workers --workers 2

tiny   the grid `--dataset arith --difficulty 5 --limit 32 --model tiny-arith --scorer steps
       --algos best_of_n,beam,particle_filter --budgets 4,16 --seeds 0` through reports.eval at
       concurrency 1, then N: wall times, their ratio, and whether every row is identical
       apart from its timing fields (`time`, `usage.seconds`).
workers  the tiny grid at concurrency N in this process, then on --workers local worker
       processes (reports.eval.workers, their start and engine loads included; default one
       per usable core, the cores split evenly between their intra-op threads): walls, their
       ratio, rows identical.
smol   SmolLM2-135M on GSM8K (--smol-limit problems, greedy and best-of-4, steps of up to
       --step-tokens, at most --max-steps): aggregate generated tokens/s at concurrency 1 and
       N, against the engine's own throughput on ONE problem at 16 rows (best-of-16, 3 steps
       of up to 32 tokens, like reports/bench/engine.py's workloads; best of 2 runs).

Also printed: the scheduler's counters (forwards merged per tick, peak jobs and batch-cache
bytes in flight) and the process's peak RSS, and per grid where its time goes (`kernel_clock`):
seconds inside the forward's packed GEMMs, its attention kernels (SDPA off the
CPU's kernel) and its norms, rotary and SiLU, or where TorchScript runs a layer's pieces, those
pieces whole (their kernels and small ops, without the interpreter lock), at each
concurrency (summed over the scheduler's lanes, which run side by side), the wall with at
least one of them running ("inside any"), the rest (KV and batch-cache copies, sampling, and
the Python of the engine, the scheduler and the searches, while no kernel runs) by
difference, and the speed-up concurrency N could reach over
today's concurrency 1 if it spent nothing outside those kernels. Timings on a shared machine
are noisy: the ratios are measured side by side, in one process, on one engine.
"""

from __future__ import annotations

import importlib
import json
import resource
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from reports.eval.grid import Grid
from search.cli import parse

TIMING = ("time",)  # row fields that may differ between runs; usage.seconds too


def comparable(row: dict[str, Any]) -> str:
    """A row as JSON without its timing fields."""
    row = {k: v for k, v in row.items() if k not in TIMING}
    row["usage"] = {k: v for k, v in row["usage"].items() if k != "seconds"}
    return json.dumps(row, sort_keys=True)


PIECES = "layer pieces in TorchScript"
# the forward's kernels by kind: (kind, module, attribute) of each entry point the lean
# forward (search/runtime/lean.py) calls them through. Where TorchScript runs a layer's
# pieces (search.runtime.scripted) no wrapper sees their kernels: each piece is timed whole
# (its kernels and small ops, run without the interpreter lock), a kind of its own
KERNELS = (("GEMMs", "search.runtime.packed", "_gemm"),
           ("attention", "torch.nn.functional", "scaled_dot_product_attention"),
           ("norms, rotary, SiLU", "torch", "rms_norm"),
           ("norms, rotary, SiLU", "torch", "addcmul"),
           ("norms, rotary, SiLU", "torch.nn.functional", "silu"),
           (PIECES, "search.runtime.scripted", "ROTATE_AND_WRITE"),
           (PIECES, "search.runtime.scripted", "POST"),
           (PIECES, "search.runtime.scripted", "LAYERS"))
KINDS = tuple(dict.fromkeys(kind for kind, _, _ in KERNELS))  # in print order
BUSY = "busy"


@contextmanager
def kernel_clock() -> Iterator[defaultdict[str, float]]:
    """Seconds spent inside the KERNELS while the block runs, by kind (whatever thread calls
    them: the owner lanes while serving, the search's own thread at concurrency 1), and under
    BUSY the wall seconds with at least one of them running on any thread (`inside`): two
    lanes' kernels overlap, and the time outside the kernels is the wall less BUSY, not less
    the sum by kind. Each entry point is wrapped for the block and restored after it; a timer
    costs about a microsecond a call. The pieces are wrapped only where TorchScript compiled
    them (run as Python, the kernels they call are timed one by one)."""
    from search.runtime import scripted  # (compiled before the wrappers: see host.probed)

    spent: defaultdict[str, float] = defaultdict(float)
    saved: list[tuple[Any, str, Any]] = []
    # wall seconds with at least one kernel running on any thread (BUSY): with several
    # owner lanes their kernels overlap, and the sum by kind counts each lane's
    lock, running, since = threading.Lock(), [0], [0.0]

    def timed(fn: Callable[..., Any], kind: str) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            with lock:
                if not running[0]:
                    since[0] = t0
                running[0] += 1
            try:
                return fn(*args, **kwargs)
            finally:
                t1 = time.perf_counter()
                spent[kind] += t1 - t0
                with lock:
                    running[0] -= 1
                    if not running[0]:
                        spent[BUSY] += t1 - since[0]
        return run

    try:
        for kind, module, name in KERNELS:
            if kind == PIECES and not scripted.SCRIPTED:
                continue
            mod = importlib.import_module(module)
            fn = getattr(mod, name, None)
            if fn is not None:
                saved.append((mod, name, fn))
                setattr(mod, name, timed(fn, kind))
        yield spent
    finally:
        for mod, name, fn in reversed(saved):
            setattr(mod, name, fn)


def inside(spent: Mapping[str, float]) -> float:
    """Wall seconds inside at least one kernel, of a kernel_clock's tally (a tally without
    BUSY, one thread's: the sum by kind)."""
    return spent[BUSY] if BUSY in spent else sum(spent.get(kind, 0.0) for kind in KINDS)


def clocked_run(grid: Grid, out: Path, concurrency: int, **setup: Any) -> tuple[Any, float, float]:
    """(the EvalRun, wall seconds, process CPU seconds) of one fresh grid; an error if any of
    its runs failed."""
    from reports.eval.sweep import run_grid

    t0, c0 = time.perf_counter(), time.process_time()
    run = run_grid(grid, out=out, quiet=True, concurrency=concurrency, **setup)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    if run.errors:
        bad = next(r for r in run.rows if r["status"] == "error")
        raise RuntimeError(f"{run.errors} runs failed, e.g. {bad['error']}")
    return run, seconds, cpu


def timed_grid(grid: Grid, out: Path, concurrency: int, **setup: Any
               ) -> tuple[float, dict[str, str], tuple[int, int], float, dict[str, float]]:
    """(seconds, comparable rows by key, (generated, prefilled) tokens, CPU seconds, seconds
    in the forward's kernels by kind) of one fresh grid."""
    with kernel_clock() as kernels:
        run, seconds, cpu = clocked_run(grid, out, concurrency, **setup)
    rows = {r["key"]: comparable(r) for r in run.rows}
    return seconds, rows, (sum(int(r["usage"]["generated_tokens"]) for r in run.rows),
                           sum(int(r["usage"]["prefill_tokens"]) for r in run.rows)), cpu, dict(kernels)


def where_time_goes(t1: float, k1: Mapping[str, float], tn: float, kn: Mapping[str, float],
                    n: int) -> str:
    """Seconds in each kind of kernel and in the rest, at concurrency 1 and n, and the most
    concurrency n could gain over t1 if it spent nothing outside its kernels."""
    def split(t: float, k: Mapping[str, float]) -> str:
        kinds = ", ".join(f"{kind} {k.get(kind, 0.0):.1f}" for kind in KINDS)
        return f"{kinds}; inside any {inside(k):.1f}, the rest {t - inside(k):.1f}"
    floor = inside(kn)
    if floor <= 0:
        return f"  no time seen inside the forward's kernels at concurrency {n} (not the lean forward?)"
    return (f"  seconds inside the forward's kernels: concurrency 1: {split(t1, k1)}; concurrency "
            f"{n}: {split(tn, kn)}\n  concurrency {n} with the rest free would take {floor:.1f} s: "
            f"at most {t1 / floor:.2f}x concurrency 1's {t1:.1f} s"
            + (f"; 4x needs the rest within {t1 / 4 - floor:.1f} s" if t1 / floor >= 4 else ""))


def ceiling(wall: float, inside: float, target: float = 1 / 3) -> str:
    """What cutting the time outside the kernels can still buy: with `inside` of `wall`
    seconds in the forward's kernels, a run that spent nothing else would take `inside`, so
    no cut saves more than wall - inside; saving `target` of the wall needs that much cut.
    (reports.demo --kernels prints it for the demo.)"""
    rest = wall - inside
    need = target * wall / rest if rest > 0 else float("inf")
    return (f"inside the forward's kernels {inside:.1f} s of {wall:.1f} s ({inside / wall:.1%}): "
            f"with nothing outside them at most {rest / wall:.1%} faster; {target:.0%} faster "
            + (f"needs {need:.0%} of the {rest:.1f} s outside them cut" if need <= 1 else
               f"is out of reach by cuts outside them ({rest:.1f} s)"))


def compare(name: str, grid: Grid, tmp: Path, n: int, **setup: Any) -> dict[str, Any]:
    t1, rows1, (tokens, prefill), cpu1, k1 = timed_grid(grid, tmp / f"{name}-c1.jsonl", 1,
                                                        **setup)
    tn, rowsn, _, cpun, kn = timed_grid(grid, tmp / f"{name}-c{n}.jsonl", n, **setup)
    same = rows1 == rowsn
    from reports.eval.rules import final_selection

    print(f"{name}: {final_selection([json.loads(r) for r in rows1.values()])}")
    print(f"{name}: {len(rows1)} runs, {tokens:,} generated tokens; concurrency 1: {t1:.1f} s "
          f"({tokens / t1:.1f} tok/s), concurrency {n}: {tn:.1f} s ({tokens / tn:.1f} tok/s); "
          f"{t1 / tn:.2f}x; rows identical apart from timings: {same}\n  process CPU time: "
          f"{cpu1:.1f} s vs {cpun:.1f} s ({cpu1 / cpun:.2f}x)", flush=True)
    print(where_time_goes(t1, k1, tn, kn, n), flush=True)
    if not same:
        diff = sorted(k for k in rows1 if rows1[k] != rowsn.get(k))
        print(f"  {len(diff)} rows differ, e.g. {rows1[diff[0]][:300]}\n  vs {rowsn.get(diff[0], '')[:300]}")
    return {"runs": len(rows1), "tokens": tokens, "prefill": prefill, "c1": t1, "cn": tn,
            "ratio": t1 / tn, "kernels1": k1, "kernelsn": kn,
            "cpu1": cpu1, "cpun": cpun, "identical": same}


def one_problem_rate(engine: Any, problem: Any, repeats: int = 2) -> tuple[float, float]:
    """The engine's tokens/s on one problem at 16 rows (best-of-16, 3 steps of <= 32 tokens):
    (generated, generated + prefilled) per second, of the fastest of `repeats` runs."""
    import search

    best = (0.0, 0.0)
    for _ in range(repeats):
        r = search.solve(problem, "best_of_n", engine=engine, scorer="logprob", n=16,
                         step_tokens=32, max_depth=3, temperature=0.7, seed=0)
        u = r.usage
        best = max(best, (u.generated_tokens / u.seconds,
                          (u.generated_tokens + u.prefill_tokens) / u.seconds))
    return best


# the options every grid benchmark takes (reports.bench.host too)
GRID_OPTIONS: dict[str, dict[str, Any]] = {
    "--concurrency": dict(type=int, default=16),
    "--tiny-limit": dict(type=int, default=32),
    "--smol-limit": dict(type=int, default=32),
    "--data": dict(default=None, help="GSM8K file or folder (default: the hub copy, else "
                  "$TTS_DATA_DIR or ../shared/data)"),
}


TINY_ALGOS = ("best_of_n", "beam", "particle_filter")


def tiny_grid(limit: int) -> Grid:
    """The tiny grid: arith level 5, best_of_n/beam/particle_filter at 4 and 16, one
    final-selection rule for all three (search.select.DEFAULT: reports.eval.rules)."""
    from reports.eval.rules import one_rule
    from reports.eval.sweep import load_problems
    from search.select import DEFAULT

    probs = load_problems("arith", limit=limit, difficulty=[5])
    return Grid(probs, TINY_ALGOS, [4, 16], [0], dataset="arith",
                knobs=one_rule(TINY_ALGOS, None, DEFAULT))


def tiny_arith(limit: int, kv_dtype: str | None = None) -> tuple[Grid, dict[str, Any]]:
    """The tiny grid (tiny_grid, under the steps scorer) and the run_grid keywords that set
    it up (kv_dtype: the engine's HFConfig.kv_dtype; None: its default)."""
    from search.api import get_engine

    engine = get_engine("tiny-arith", kv_dtype=kv_dtype) if kv_dtype else get_engine("tiny-arith")
    return tiny_grid(limit), dict(engine=engine, scorer="steps", model="tiny-arith")


def on_workers(limit: int, n: int, workers: int | None, tmp: Path) -> dict[str, Any]:
    """The tiny grid at concurrency n in this process, then on local worker processes
    (reports.eval.workers: their start and loads included): walls, ratio, rows identical."""
    from reports.eval.workers import Workers, usable_cores

    grid, setup = tiny_arith(limit)
    here, t_here, _ = clocked_run(grid, tmp / "here.jsonl", n, **setup)
    with Workers(usable_cores() if workers is None else workers) as runner:
        there, t_there, _ = clocked_run(grid, tmp / "workers.jsonl", n,
                                        **{**setup, "engine": "tiny-arith"}, runner=runner)
        count, threads = len(runner.pids), runner.threads
    same = sorted(map(comparable, here.rows)) == sorted(map(comparable, there.rows))
    print(f"tiny-arith grid at concurrency {n}: {t_here:.1f} s in this process, {t_there:.1f} s "
          f"on {count} worker processes ({threads} thread{'s' if threads > 1 else ''} each, "
          f"{n} in flight each): {t_here / t_there:.2f}x; rows "
          f"{'identical' if same else 'DIFFER'}", flush=True)
    return {"here": t_here, "workers": t_there, "ratio": t_here / t_there, "identical": same}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse("python -m reports.bench.eval", __doc__, {
        "--parts": dict(default="tiny,smol,workers"), **GRID_OPTIONS,
        "--workers": dict(type=int, default=None, help="worker processes of the workers part "
                          "(default: the usable cores)"),
        "--step-tokens": dict(type=int, default=64),
        "--max-steps": dict(type=int, default=2),
    }, argv)
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    import torch

    from reports.eval.rules import one_rule
    from reports.eval.sweep import load_problems
    from search.api import get_engine
    from search.select import DEFAULT

    n = args.concurrency
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; concurrency 1 vs {n}",
          flush=True)
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        if "tiny" in parts:
            grid, setup = tiny_arith(args.tiny_limit)
            out["tiny"] = compare("tiny-arith grid", grid, Path(tmp), n, **setup)
        if "workers" in parts:
            out["workers"] = on_workers(args.tiny_limit, n, args.workers, Path(tmp))
        if "smol" in parts:
            eng = get_engine("smollm2-135m")
            probs = load_problems("gsm8k", path=args.data, limit=args.smol_limit)
            ref, ref_all = one_problem_rate(eng, probs[0])
            print(f"SmolLM2 one problem, 16 rows: {ref:.1f} generated tok/s, {ref_all:.1f} "
                  f"tok/s counting its prefill", flush=True)
            knobs = {a: {"step_tokens": args.step_tokens, "max_depth": args.max_steps}
                     for a in ("greedy", "best_of_n")}
            for algo, budgets in (("greedy", [1]), ("best_of_n", [4])):
                grid = Grid(probs, [algo], budgets, [0], dataset="gsm8k",
                            knobs=one_rule([algo], {algo: knobs[algo]}, DEFAULT))
                r = compare(f"SmolLM2 GSM8K {algo} x{budgets[0]}", grid, Path(tmp), n,
                            engine=eng, scorer="logprob", model="smollm2-135m")
                rate, rate_all = r["tokens"] / r["cn"], (r["tokens"] + r["prefill"]) / r["cn"]
                print(f"  at concurrency {n}: {rate:.1f} generated tok/s = {rate / ref:.0%} of "
                      f"one problem's 16-row rate, {r['ratio']:.2f}x concurrency 1; counting "
                      f"prefill ({r['prefill']:,} prompt tokens for {r['tokens']:,} generated: "
                      f"one prompt per problem): {rate_all:.1f} tok/s = {rate_all / ref_all:.0%}",
                      flush=True)
                out[algo] = {**r, "one_problem": ref, "share": rate / ref,
                             "share_with_prefill": rate_all / ref_all}
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    ran = {"tiny": "tiny-arith", "smol": "smollm2-135m"}  # the engines this process ran
    for name in (ran[p] for p in ran if p in parts):
        print(f"{name}'s scheduler: {get_engine(name).scheduler.stats}")  # type: ignore[attr-defined]
    print(f"peak RSS {rss:.0f} MB")
    return 0 if all(v["identical"] for v in out.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
