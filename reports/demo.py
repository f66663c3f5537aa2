"""The demo sweep (`make demo`): search vs no search on the embedded reasoner, in minutes.

    python -m reports.demo [--problems 100] [--difficulty 5] [--budgets 4,16] [--seeds 0]
                           [--out runs/demo]

tiny-arith (problems/models, trained here by problems/train.py) solves procedural word
problems (problems.arith) at the default difficulty. Each algorithm runs at each budget
(its width: samples in flight, see reports.grid) with the arithmetic step checker as its
process reward (rewards.verifier.StepCheckScorer: it knows arithmetic, not whether the right
quantities were used, so it is an imperfect verifier). Greedy decoding is the baseline.
Everything goes through the resumable eval runner (reports.eval): rows land in
OUT/demo.jsonl, a re-run skips what is done, and the accuracy-vs-compute plot
(OUT/accuracy_vs_compute.png/.svg/.json) is drawn from those rows alone.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ALGOS = ("greedy", "best_of_n", "beam", "astar", "particle_filter")
# the step checker's path score is its worst step (its path_agg, "min": every search's
# default agg with it), the final step judged by whether its answer follows from the work;
# best-of-N weighs each answer's votes by those scores
KNOBS: dict[str, dict[str, Any]] = {"best_of_n": {"select": "weighted_vote"}}


def table(summary: Sequence[dict[str, Any]]) -> str:
    """The printed table: one line per (algorithm, budget)."""
    lines = [f"{'algorithm':>16} {'width':>5} {'accuracy':>9} {'gen tokens':>11} "
             f"{'scorer calls':>12} {'seconds':>8} {'runs':>5}"]
    for s in summary:
        lines.append(f"{s['algo']:>16} {s['width'] if s['width'] is not None else '-':>5} "
                     f"{s['accuracy']:>9.1%} {s['generated_tokens']:>11.0f} "
                     f"{s['scorer_calls']:>12.1f} {s['seconds']:>8.2f} {s['runs']:>5}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    from problems import arith
    from reports.eval import _ints, run_grid, summarize
    from reports.plots import accuracy_vs_compute

    ap = argparse.ArgumentParser(prog="python -m reports.demo", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny-arith")
    ap.add_argument("--problems", type=int, default=100)
    ap.add_argument("--difficulty", type=int, default=arith.DEFAULT_DIFFICULTY)
    ap.add_argument("--data-seed", type=int, default=2024, help="problem generator seed "
                    "(training used seeds >= 1,000,000)")
    ap.add_argument("--algos", default=",".join(ALGOS))
    ap.add_argument("--budgets", type=_ints, default=[4, 16])
    ap.add_argument("--seeds", type=_ints, default=[0])
    ap.add_argument("--scorer", default="steps")
    ap.add_argument("--out", type=Path, default=Path("runs/demo"))
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    algos = [a.strip() for a in args.algos.split(",") if a.strip()]
    problems = arith.generate(args.problems, seed=args.data_seed, difficulty=args.difficulty)
    t0 = time.monotonic()
    run = run_grid(problems, algos=algos, budgets=args.budgets, seeds=args.seeds,
                   out=args.out / "demo.jsonl", engine=args.model, scorer=args.scorer,
                   dataset="arith", knobs={a: k for a, k in KNOBS.items() if a in algos},
                   quiet=args.quiet)
    plot = accuracy_vs_compute(list(run.rows), args.out)
    print(f"\n{args.model} on {args.problems} arith problems (difficulty {args.difficulty}, "
          f"generator seed {args.data_seed}), scorer {args.scorer}, seeds {args.seeds}; "
          f"{run.ran} runs now, {run.resumed} resumed, {time.monotonic() - t0:.0f} s")
    print(table(summarize(list(run.rows))))
    print(f"plot: {plot['files']['png']}")
    return 0 if not run.errors else 1


if __name__ == "__main__":
    sys.exit(main())
