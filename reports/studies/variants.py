"""The reference variants measured on the demo grid, each against the other setting of its knob.

    python -m reports.studies.variants [--problems 100] [--seeds 0,1,2]
                                       [--rows runs/demo/demo.jsonl] [--out runs/variants]
                                       [--parts grids,rpc] [--no-run]

On the demo's problems (tiny-arith, level 5, generator seed 2024) and seeds, through the
resumable eval runner into the demo's own rows file (--rows; `make demo` resumes from the same
file, so the defaults' rows are shared), step checker as the scorer:
  beam             duplicates merge | keep                      widths 4, 16
  particle_filter  resample_finished false | true               widths 4, 16
  particle_gibbs   (reference, pool) (weight, all) | (reward, last)  width 4 (n=4, 4 passes)
and RPC's Weibull fit at n=16 (RPC consults no scorer): its sampled paths do not depend on
the fit, so each (problem, seed) is sampled once and every fit re-ranks the same finished
paths (search.algos.rpc.rank): ours (shapes capped at 100) with 2 and 12 starts, the authors'
bounds with 1 and 12 starts, and the authors' own procedure re-stated as the reference
(scipy's default bounded minimiser, L-BFGS-B with numerical gradients, from their one fixed
start, their bounds, on the raw probabilities). Rows of that part go to OUT/rpc.jsonl.
Each variant prints its accuracy (mean, seeds' min-max, 95% CI over problems), tokens and
scorer calls, and the paired difference against the first setting of its knob.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from reports.analysis.bands import band, paired_difference, verdict
from reports.analysis.rows import Row, group, read_rows
from search.cli import parse, printout

# (algorithm, widths, [(label, knobs)]): the first setting is the one the others are compared to
GRIDS: list[tuple[str, list[int], list[tuple[str, dict[str, Any]]]]] = [
    ("beam", [4, 16], [("duplicates=merge", {"duplicates": "merge"}),
                       ("duplicates=keep", {"duplicates": "keep"})]),
    ("particle_filter", [4, 16], [("resample_finished=false", {"resample_finished": False}),
                                  ("resample_finished=true", {"resample_finished": True})]),
    ("particle_gibbs", [4], [("reference=weight, pool=all",
                              {"reference": "weight", "pool": "all"}),
                             ("reference=reward, pool=last",
                              {"reference": "reward", "pool": "last"})]),
]
FITS: list[tuple[str, dict[str, Any] | None]] = [
    ("ours, 2 starts", {"bounds": "project", "starts": 2}),
    ("ours, 12 starts", {"bounds": "project", "starts": 12}),
    ("authors' bounds, 1 start", {"bounds": "authors", "starts": 1}),
    ("authors' bounds, 12 starts", {"bounds": "authors", "starts": 12}),
    ("authors' procedure (reference)", None),
]
RPC_WIDTH = 16


def authors_prune(p: Sequence[float]) -> np.ndarray:
    """The authors' pruning as their released code states it: a two-Weibull mixture fitted
    by scipy's default bounded minimiser (L-BFGS-B, numerical gradients) from the one start
    (w, k1, lam1, k2, lam2) = (.5, 1, 1, 1.5, 2), w in [.2, .8], the rest in [.01, inf), on
    the raw probabilities; a path goes when its high-component membership is below its low
    one's and its probability below the mean."""
    from scipy.optimize import minimize

    from search.weibull import MIN_POINTS, WeibullMixture, weibull_nll

    x = np.asarray(p, dtype=float)
    if len(np.unique(x)) < MIN_POINTS:
        return np.zeros(len(x), dtype=bool)
    with np.errstate(all="ignore"):
        res = minimize(lambda t: weibull_nll(t, x)[0], np.array([0.5, 1.0, 1.0, 1.5, 2.0]),
                       bounds=[(0.2, 0.8)] + [(0.01, None)] * 4)
        w, k1, l1, k2, l2 = (float(v) for v in res.x)
        mix = WeibullMixture(w, k1, l1, k2, l2)
        if mix.mean_hi < mix.mean_lo:
            mix = WeibullMixture(1 - w, k2, l2, k1, l1)
        return (mix.posterior_low(x) > 0.5) & (x < x.mean())


def run_rpc(problems: Sequence[Any], seeds: Sequence[int], out: Path, engine: Any) -> list[Row]:
    """One RPC sampling per (problem, seed), re-ranked by every fit; rows appended to out."""
    import search
    from reports.eval.correctness import Grader
    from search.algos.rpc import path_prob, rank
    from search.weibull import prune_low

    done = {(r["problem_id"], r["seed"], r["variant"]) for r in read_rows(out)} \
        if out.exists() else set()
    grader = Grader()
    with out.open("a", encoding="utf-8") as fh:
        for p in problems:
            for seed in seeds:
                if all((p.id, seed, label) in done for label, _ in FITS):
                    continue
                res = search.solve(p, "rpc", engine=engine, n=RPC_WIDTH, seed=seed)
                nodes = {n.id: n for n in res.tree.walk()}
                paths = [nodes[c.node_id] for c in res.candidates if c.finished]
                for label, fit in FITS:
                    if fit is None:
                        _, chosen, pruned = rank(p, paths, [], lambda ns: [
                            bool(m) for m in authors_prune([path_prob(n) for n in ns])])
                    else:
                        _, chosen, pruned = rank(p, paths, [], lambda ns, f=fit: [
                            bool(m) for m in prune_low([path_prob(n) for n in ns], **f)[0]])
                    answer = chosen.answer if chosen else None
                    row = {"problem_id": p.id, "seed": seed, "variant": label, "algo": "rpc",
                           "answer": answer, "pruned": pruned, "key": f"{p.id}/{seed}/{label}",
                           "correct": answer is not None and grader.text(p, answer).correct,
                           "budget": {"width": RPC_WIDTH}, "scorer": None,
                           "usage": {"generated_tokens": res.usage.generated_tokens,
                                     "scorer_calls": 0}}
                    fh.write(json.dumps(row) + "\n")
                fh.flush()
    return read_rows(out)


@printout
def rpc_table(rows: Sequence[Row]) -> Iterator[str]:
    by = group(rows, lambda r: r["variant"])
    ref = by.get(FITS[-1][0], [])
    first = by.get(FITS[0][0], [])
    agree_key = {(r["problem_id"], r["seed"]): r["answer"] for r in ref}
    yield f"\nRPC n={RPC_WIDTH}: the same sampled paths re-ranked by each Weibull fit"
    yield (f"{'fit':<32} {'accuracy [seeds] (95% CI)':>27} {'pruned':>6} "
           f"{'same answer as the reference':>28}  vs {FITS[0][0]}")
    for label, _ in FITS:
        g = by.get(label, [])
        if not g:
            continue
        same = np.mean([agree_key.get((r["problem_id"], r["seed"])) == r["answer"] for r in g])
        vs = verdict(paired_difference(g, first)) if label != FITS[0][0] else ""
        yield (f"{label:<32} {band(g).text():>27} {np.mean([r['pruned'] for r in g]):>6.1f} "
               f"{same:>28.1%}  {vs}")


@printout
def grid_table(rows: Sequence[Row]) -> Iterator[str]:
    yield (f"{'algorithm':<16} {'variant':<28} {'width':>5} {'accuracy [seeds] (95% CI)':>27} "
           f"{'tokens':>7} {'scorer':>7}  vs the first setting")
    for algo, widths, settings in GRIDS:
        for width in widths:
            groups = [[r for r in rows if r["algo"] == algo and r["budget"]["width"] == width
                       and all(r["knobs"].get(k) == v for k, v in knobs.items())]
                      for _, knobs in settings]
            for (label, _), g in zip(settings, groups):
                if not g:
                    continue
                b = band(g)
                vs = verdict(paired_difference(g, groups[0])) if g is not groups[0] and \
                    groups[0] else ""
                yield (f"{algo:<16} {label:<28} {width:>5} {b.text():>27} "
                       f"{b.tokens:>7.0f} {b.scorer_calls:>7.1f}  {vs}")


def main(argv: Sequence[str] | None = None) -> int:
    from problems import arith
    from reports.eval.grid import Grid, parse_ints
    from reports.eval.sweep import run_grid
    from search.api import get_engine

    args = parse("python -m reports.studies.variants", __doc__, {
        "--problems": dict(type=int, default=100),
        "--seeds": dict(type=parse_ints, default=[0, 1, 2]),
        "--rows": dict(type=Path, default=Path("runs/demo/demo.jsonl")),
        "--out": dict(type=Path, default=Path("runs/variants")),
        "--parts": dict(default="grids,rpc"),
        "--no-run": dict(action="store_true"),
        "--concurrency": dict(type=int, default=16,
                              help="runs in flight at once (rows are the same at any value)"),
    }, argv)
    parts = set(args.parts.split(","))
    problems = arith.generate(args.problems, seed=2024, difficulty=arith.DEFAULT_DIFFICULTY)
    ids = {p.id for p in problems}
    args.out.mkdir(parents=True, exist_ok=True)
    grid_file, rpc_file = args.rows, args.out / "rpc.jsonl"
    engine = None if args.no_run else get_engine("tiny-arith")
    rows: list[Row] = []
    if "grids" in parts:
        if not args.no_run:
            for algo, widths, settings in GRIDS:
                for _, knobs in settings:
                    run_grid(Grid(problems, algos=[algo], budgets=widths, seeds=args.seeds,
                                  dataset="arith", knobs={algo: knobs}),
                             out=grid_file, engine=engine, model="tiny-arith", scorer="steps",
                             quiet=True, concurrency=args.concurrency)
        # the demo's file also holds its value-head rows: the variants ran under the step checker
        rows = [r for r in read_rows(grid_file) if r["problem_id"] in ids
                and r["scorer"] == "steps"] if grid_file.exists() else []
        print(grid_table(rows))
    if "rpc" in parts:
        rrows = read_rows(rpc_file) if args.no_run and rpc_file.exists() else [] \
            if args.no_run else run_rpc(problems, args.seeds, rpc_file, engine)
        print(rpc_table([r for r in rrows if r["problem_id"] in ids]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
