"""The demo sweep (`make demo`): search vs no search on the embedded reasoner, in minutes.

    python -m reports.demo [--problems 100] [--difficulty 5] [--budgets 4,16] [--seeds 0,1,2]
                           [--concurrency 16] [--out runs/demo]

tiny-arith (problems/models, trained here by problems/train.py) solves procedural word
problems (problems.arith) at the default difficulty. Each algorithm runs at each budget
(its width: samples in flight, see reports.grid) with the arithmetic step checker as its
process reward (rewards.verifier.StepCheckScorer: it knows arithmetic, not whether the right
quantities were used, so it is an imperfect verifier). Greedy decoding is the baseline.
Everything goes through the resumable eval runner (reports.eval), `--concurrency` searches at
a time on the one engine (their forwards batched; every row as it is run alone): rows land in
OUT/demo.jsonl, a re-run skips what is done, and the accuracy-vs-compute plot
(OUT/accuracy_vs_compute.png/.svg/.json, the band spanning the seeds) is drawn from those rows
alone. The table gives each accuracy as the mean over seeds and their range.
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


def table(summary: Sequence[dict[str, Any]], rows: Sequence[dict[str, Any]] = ()) -> str:
    """The printed table: one line per (algorithm, budget); with `rows`, the accuracy's range
    over seeds (each seed's accuracy over the problems) after the mean."""
    spread = seed_spread(rows)
    lines = [f"{'algorithm':>16} {'width':>5} {'accuracy':>9} {'seeds (min-max)':>16} "
             f"{'gen tokens':>11} {'scorer calls':>12} {'seconds':>8} {'runs':>5}"]
    for s in summary:
        lo, hi = spread.get((s["algo"], s["width"], s["tokens"]), (s["accuracy"],) * 2)
        lines.append(f"{s['algo']:>16} {s['width'] if s['width'] is not None else '-':>5} "
                     f"{s['accuracy']:>9.1%} {f'{lo:.1%}-{hi:.1%}':>16} "
                     f"{s['generated_tokens']:>11.0f} {s['scorer_calls']:>12.1f} "
                     f"{s['seconds']:>8.2f} {s['runs']:>5}")
    return "\n".join(lines)


def seed_spread(rows: Sequence[dict[str, Any]]) -> dict[tuple[Any, ...], tuple[float, float]]:
    """Per (algo, width, tokens): the lowest and highest accuracy of one seed."""
    acc: dict[tuple[Any, ...], dict[int, list[bool]]] = {}
    for r in rows:
        key = (r["algo"], r["budget"]["width"], r["budget"]["tokens"])
        acc.setdefault(key, {}).setdefault(r["seed"], []).append(bool(r["correct"]))
    return {k: (min(sum(v) / len(v) for v in by.values()), max(sum(v) / len(v) for v in by.values()))
            for k, by in acc.items()}


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
    ap.add_argument("--seeds", type=_ints, default=[0, 1, 2])
    ap.add_argument("--concurrency", type=int, default=16,
                    help="searches in flight at once (rows are the same at any value)")
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
                   quiet=args.quiet, concurrency=args.concurrency)
    plot = accuracy_vs_compute(list(run.rows), args.out)
    print(f"\n{args.model} on {args.problems} arith problems (difficulty {args.difficulty}, "
          f"generator seed {args.data_seed}), scorer {args.scorer}, seeds {args.seeds}; "
          f"{run.ran} runs now, {run.resumed} resumed, concurrency {args.concurrency}, "
          f"{time.monotonic() - t0:.0f} s")
    print(table(summarize(list(run.rows)), list(run.rows)))
    print(f"plot: {plot['files']['png']}")
    return 0 if not run.errors else 1


if __name__ == "__main__":
    sys.exit(main())
