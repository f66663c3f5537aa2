"""The command line end to end: what a newcomer waits for after typing `python -m search`.

Each round runs, one after another, as separate processes timed from start to exit:

- solve: `python -m search QUESTION --model MODEL --quiet --json` (the defaults: best-of-8,
  votes), whose own `usage.seconds` splits the wall time into the solve and the rest
  (starting Python, importing torch and transformers, loading the cached weights, exiting);
- refusal: the same with a bad knob (`--knob n=0`), which must fail before any model loads.

A first unmeasured solve makes sure the de-quantised weights are cached. Printed: every
round, then the median of each column. Usage:

    python -m reports.bench.command_line [--model smollm2-135m] [--rounds 5] [--question "What is 2+3?"]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def timed(args: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    """(wall seconds from start to exit, the finished process) of `python -m search ARGS`."""
    start = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "search", *args], cwd=REPO,
                         capture_output=True, text=True, timeout=600)
    return time.perf_counter() - start, run


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m reports.bench.command_line", description=__doc__)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--question", default="What is 2+3?")
    args = ap.parse_args(argv)
    solve = [args.question, "--model", args.model, "--quiet", "--json"]
    _, first = timed(solve)  # caches the de-quantised weights if this is the first load
    if first.returncode != 0:
        raise SystemExit(f"python -m search failed:\n{first.stderr}")
    rows = []
    print(f"{'round':>5} {'wall_s':>7} {'solve_s':>7} {'rest_s':>7} {'refusal_s':>9}  answer")
    for k in range(args.rounds):
        wall, run = timed(solve)
        out = json.loads(run.stdout)
        refusal, bad = timed([*solve, "--knob", "n=0"])
        if bad.returncode != 2:
            raise SystemExit(f"a bad knob was not refused:\n{bad.stdout}{bad.stderr}")
        seconds = float(out["usage"]["seconds"])
        rows.append((wall, seconds, wall - seconds, refusal))
        print(f"{k:>5} {wall:7.2f} {seconds:7.2f} {wall - seconds:7.2f} {refusal:9.2f}  "
              f"{out['answer']!r} ({out['usage']['generated_tokens']} tokens)")
    medians = [statistics.median(col) for col in zip(*rows, strict=True)]
    print(f"{'med':>5} " + " ".join(f"{m:{w}.2f}" for m, w in zip(medians, (7, 7, 7, 9),
                                                                  strict=True)))


if __name__ == "__main__":
    main()
