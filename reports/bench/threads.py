"""A tiny-arith solve's time alone and beside a CPU-bound neighbour, per thread setting.

    python -m reports.bench.threads [--problems 3] [--repeats 3] [--neighbours 1]
    python -m reports.bench.threads --sizes     # one thread against two, by model size

Each setting runs in its own process (OpenMP reads its wait policy once, when torch loads):
  passive    the default (`import search` sets OMP_WAIT_POLICY=PASSIVE), torch's threads
  active     OMP_WAIT_POLICY=ACTIVE (libgomp's spin-then-sleep, torch's threads)
  1 thread   --threads 1
A process loads tiny-arith, solves a few arith problems with best_of_n (n=4) once to warm
up, then `--repeats` times; the fastest time counts. "busy" runs the same with
`--neighbours` processes spinning a CPU-bound Python loop beside it. Printed: seconds idle
and busy and their ratio (target: busy <= 2x idle), and the load average when the bench
started (other jobs on the machine load "idle" too).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

SIZES = ((128, 6), (256, 8), (576, 8))  # random Llamas' (hidden, layers) for --sizes
SETTINGS = {"passive": ({}, None), "active": ({"OMP_WAIT_POLICY": "ACTIVE"}, None),
            "1 thread": ({}, 1)}
SPIN = "while True: pass"


def child(problems: int, repeats: int, threads: int | None) -> float:
    """The fastest of `repeats` timed solves in this process (after one warm-up)."""
    import search
    from problems import arith
    from search.runtime.omp import use_threads

    if threads is not None:
        use_threads(threads)
    engine = search.get_engine("tiny-arith")
    probs = arith.generate(problems, seed=5, difficulty=4)

    def once() -> float:
        start = time.perf_counter()
        for p in probs:
            search.solve(p, "best_of_n", engine=engine, progress=False, n=4)
        return time.perf_counter() - start

    once()
    return min(once() for _ in range(repeats))


def sizes(rows: tuple[int, ...] = (1, 4, 16, 64), tokens: int = 16) -> None:
    """Per random Llama (SIZES) and rows a forward: seconds a decoded token on one intra-op
    thread and on two, side by side (the fewest of two tries each), under this process's wait
    policy, beside the weights' bytes against omp.CACHED_BYTES (what omp.one_thread reads)."""
    import search
    from reports.bench.kvbytes import engine, random_roots
    from search.runtime.omp import CACHED_BYTES, threads_here, weight_bytes

    print(f"OpenMP wait policy {search.WAIT_POLICY or 'libgomp default'}; one thread up to "
          f"{CACHED_BYTES >> 20} MB of weights")
    for hidden, layers in SIZES:
        eng = engine(vocab=512, hidden=hidden, layers=layers, heads=4, kv_heads=4)
        eng.kv.forward.threads = 0  # (the count set around each call, not one_thread's)
        roots = random_roots(eng, 1, 64)
        eng.kv.ensure(roots, eng.session)
        mb = weight_bytes(eng.model) / 2**20
        for n in rows:
            best = {}
            for threads in (1, 2, 1, 2):
                with threads_here(threads):
                    start = time.perf_counter()
                    eng.expand(roots, n, stop=None, max_tokens=tokens, seed=1)
                    took = (time.perf_counter() - start) / tokens
                best[threads] = min(best.get(threads, took), took)
            print(f"hidden {hidden}, {layers} layers ({mb:.0f} MB), {n} rows: one thread "
                  f"{best[1] * 1e3:.2f} ms a token, two {best[2] * 1e3:.2f} ms "
                  f"({best[2] / best[1]:.2f}x)", flush=True)


@contextmanager
def neighbours(count: int) -> Iterator[None]:
    """`count` CPU-bound processes for the block."""
    procs = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(count)]
    try:
        time.sleep(0.5)  # let them take their cores
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def measure(name: str, problems: int, repeats: int) -> float:
    env_extra, threads = SETTINGS[name]
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")}
    cmd = [sys.executable, "-m", "reports.bench.threads", "--child", "--problems", str(problems),
           "--repeats", str(repeats)] + ([] if threads is None else ["--threads", str(threads)])
    out = subprocess.run(cmd, env={**env, **env_extra}, check=True, capture_output=True,
                         text=True, timeout=3600).stdout
    return float(json.loads(out.strip().splitlines()[-1])["seconds"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m reports.bench.threads", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problems", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--neighbours", type=int, default=1, help="CPU-bound processes when busy")
    ap.add_argument("--settings", default=",".join(SETTINGS), help="which to run, in order")
    ap.add_argument("--sizes", action="store_true",
                    help="instead: one thread against two by model size and rows (in this process)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.sizes:
        sizes()
        return 0
    if args.child:
        print(json.dumps({"seconds": child(args.problems, args.repeats, args.threads)}))
        return 0
    names = [n.strip() for n in args.settings.split(",") if n.strip()]
    unknown = [n for n in names if n not in SETTINGS]
    if unknown:
        ap.error(f"unknown settings {unknown}; known: {', '.join(SETTINGS)}")
    load = os.getloadavg()
    print(f"{os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
          f"at start; tiny-arith best_of_n n=4 on {args.problems} arith problems, fastest of "
          f"{args.repeats}; busy: {args.neighbours} CPU-bound neighbour(s)")
    print(f"{'setting':>10} {'idle s':>8} {'busy s':>8} {'busy/idle':>10}")
    for name in names:
        idle = measure(name, args.problems, args.repeats)
        with neighbours(args.neighbours):
            busy = measure(name, args.problems, args.repeats)
        print(f"{name:>10} {idle:8.2f} {busy:8.2f} {busy / idle:10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
