"""The demo sweep (`make demo`): search vs no search on the embedded reasoner.

    python -m reports.demo [--problems 100] [--difficulty 5] [--budgets 4,16] [--seeds 0,1,2]
                           [--data-seeds 2024] [--scorers steps,oracle_steps,prm:tiny-arith-prm]
                           [--select weighted_vote]
                           [--concurrency 16] [--workers N] [--out runs/demo]
                           [--kernels]

tiny-arith (training/models, trained here by training/train.py) solves procedural word
problems (problems.arith) at the default difficulty: generator seed 2024, the demo's set
since it began; `--data-seeds 2024,6173` adds a second set (6173, chosen before any result
on it was seen, so that no choice was tuned on it) and a table of the claims that hold on
every set. Each search runs at each budget (its width: samples in flight, see reports.eval.grid)
under each process scorer: the arithmetic step checker (rewards.verifier.StepCheckScorer: it
knows arithmetic, not whether the right quantities were used, so it is an imperfect verifier
scoring 1 / 0.5 / 0), the oracle step scorer (rewards.oracle_steps: 0 from the first step off
the gold derivation, a perfect PRM's ceiling for studies) and the learned PRM,
prm:tiny-arith-prm (training.prm_train: trained from the policy's own rollouts and equation
drills). Every search that selects ends with the same final rule, `--select` (default
weighted_vote), printed with the table; `--scorers` also takes the value head,
`value` (rewards.value_head: graded scores read off the generator's hidden state, the
demo's second column until the learned PRM took it: its searches stayed below greedy).
Greedy decoding is the baseline; best-of-N also runs at widths 1, 2 and 8, the
curve that A* and compute_optimal are compared with at equal tokens; compute_optimal (its
table fitted on other problems, reports.studies.compute_table) runs under the step checker, the
scorer its table was fitted with. Everything goes through the resumable eval runner
(reports.eval): rows land in OUT/demo.jsonl, a re-run skips what is done, and the plots
(OUT/accuracy_vs_compute_<scorer>.png, OUT/scorer_effect.png, with .svg/.json) are drawn from
those rows alone. The table (reports.analysis.bands) gives each accuracy as the mean over seeds, the
seeds' range and a 95% interval over problems, the pass@k ceiling of the same problems, and
differences against best-of-N only where the paired interval allows. `--workers` processes
(reports.eval.workers: by default one per usable core, up to 4) each run `--concurrency`
searches at a time on their own engine, their forwards batched; every row is as it is run
alone, in one process.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from problems import arith
from reports.eval.grid import parse_ints
from search.cli import parse, printout

ALGOS = ("greedy", "best_of_n", "beam", "astar", "particle_filter", "particle_gibbs",
         "compute_optimal")
SCORERS = ("steps", "oracle_steps", "prm:tiny-arith-prm")
# the demo's problem set; its second, 6173, chosen before any result on it was seen, runs by
# `--data-seeds 2024,6173` (a claim stands only where it holds on both)
DATA_SEEDS = (2024,)
MAX_WORKERS = 4  # the default --workers on a machine with more cores
BON_WIDTHS = (1, 2, 4, 8, 16)  # best-of-N's accuracy-vs-tokens curve
TABLE_SCORER = "steps"  # compute_optimal's shipped table was fitted under this scorer
# run under the step checker only: compute_optimal's table was fitted with it; particle Gibbs
# (4 iterations: ~4x best-of-N's tokens at equal width, the costliest search here) is the
# costliest search here
STEPS_ONLY = ("compute_optimal", "particle_gibbs")
# one final-selection rule for every search in the comparison (`--select`): each answer's
# votes weighed by its path score (the scorer's path_agg), chosen on generator seed 31337
# (docs/results.md); greedy has one path and compute_optimal selects as its table says
SELECT = "weighted_vote"
SELECTING = ("best_of_n", "beam", "astar", "particle_filter", "particle_gibbs")
# every knob that has a reference variant is spelled out, so the rows say what ran (the
# defaults; docs/results.md says which reference each follows)
KNOBS: dict[str, dict[str, Any]] = {
    # rounds 4 (library default 1, the references' one draw of N a depth): a depth's N
    # samples drawn 4 rounds of N/4, stopping once it holds enough at the bar and spending
    # what it saved on a collapsed depth (search/algos/beam.py). Chosen on generator seed
    # 31337 under the oracle scorer (40 problems, seed 0, width 16; docs/results.md): rounds
    # 2 / 4 / 8 gave beam 87.5 / 90.0 / 82.5% at 906 / 744 / 734 tokens and the particle
    # filter 85.0 / 85.0 / 90.0% at 987 / 723 / 579, against best-of-16's 72.5% at 1,265;
    # 4 for all three searches, one rule
    "beam": {"duplicates": "keep", "rounds": 4},
    # max_batches 16, not the library's 40 (a runaway guard): with rounds 4, on the same
    # problems caps 8 / 16 / 40 spent 791 / 911 / 991 tokens for 87.5 / 92.5 / 92.5%, and
    # under the learned PRM (graded scores, few finished states popped) the cap is what
    # stops A*: at 40 it spent 4.4x best-of-16's tokens (3 problems of seed 777)
    "astar": {"ties": "deep", "duplicates": "keep", "finalists": 4, "max_batches": 16,
              "rounds": 4},
    "particle_filter": {"resample_finished": False, "rounds": 4},
    "particle_gibbs": {"reference": "weight", "pool": "all"},
}


def knobs(select: str) -> dict[str, dict[str, Any]]:
    """The demo's knobs per algorithm, `select` the final rule of every selecting search
    (reports.eval.rules.one_rule: one rule for the whole comparison)."""
    from reports.eval.rules import one_rule

    return one_rule(list(dict.fromkeys((*SELECTING, *KNOBS))), KNOBS, select)


PROG = "python -m reports.demo"
OPTIONS: dict[str, dict[str, Any]] = {  # the command line: flag -> add_argument's keywords
    "--model": dict(default="tiny-arith"),
    "--problems": dict(type=int, default=100),
    "--difficulty": dict(type=int, default=arith.DEFAULT_DIFFICULTY),
    "--data-seeds": dict(type=parse_ints, default=list(DATA_SEEDS),
                         help="problem generator seeds, one problem set each (training used "
                              "seeds >= 1,000,000, the PRM 40,000-40,001)"),
    "--algos": dict(default=",".join(ALGOS)),
    "--budgets": dict(type=parse_ints, default=[4, 16]),
    "--seeds": dict(type=parse_ints, default=[0, 1, 2]),
    "--scorers": dict(default=",".join(SCORERS)),
    "--select": dict(default=SELECT, help="the final selection of every search that "
                     "selects (score, vote, weighted_vote): one rule for all"),
    "--concurrency": dict(type=int, default=16, help="searches in flight at once in each "
                          "process (rows are the same at any value)"),
    "--workers": dict(type=int, default=None, help="processes running the searches, one "
                      "engine each (reports.eval.workers; rows are the same at any count); "
                      f"default: the usable cores, at most {MAX_WORKERS}; 1 runs them here"),
    "--out": dict(type=Path, default=Path("runs/demo")),
    "--quiet": dict(action="store_true"),
    "--kernels": dict(action="store_true", help="also time the forward's kernels "
                      "(reports.bench.eval.kernel_clock) and print what a cut of the time "
                      "outside them could still save (issue 35); runs here, in one process"),
}


@printout
def table(rows: Sequence[dict[str, Any]], *, k: int = 16) -> Iterator[str]:
    """The printed tables: the pass@k ceiling, then per scorer one line per (algorithm,
    width) with its bands, and the verdict against best-of-N at the same width."""
    from reports.analysis.bands import accuracy_at, band, ceiling, paired_difference, verdict
    from reports.analysis.rows import group
    from reports.eval.rules import final_selection

    bon = [r for r in rows if r["algo"] == "best_of_n"]
    greedy = [r for r in rows if r["algo"] == "greedy"]
    top = ceiling(bon, k) if bon else float("nan")
    if bon:
        yield ("pass@k ceiling of these problems (best-of-N samples pooled over seeds, "
               "unbiased estimator): " + ", ".join(
                   f"pass@{j} {ceiling(bon, j):.1%}" for j in (1, 4, k)))
    yield final_selection(rows)
    base = band(greedy).accuracy if greedy else float("nan")
    yield (f"{'scorer':>18} {'algorithm':>16} {'width':>5} {'accuracy [seeds] (95% CI)':>27} "
           f"{'gen tokens':>10} {'scorer calls':>12} {'seconds':>7} {'runs':>5}  "
           f"vs best-of-N, same width / at equal tokens")
    by = group(rows, lambda r: (r["scorer"] or "-", r["algo"], r["budget"]["width"]))
    curves = {s: [(band(g).tokens, band(g).accuracy) for (sc, a, _), g in by.items()
                  if sc == s and a == "best_of_n"] for s in {key[0] for key in by}}
    for (scorer, algo, width), g in by.items():
        b = band(g)
        ref = by.get((scorer, "best_of_n", width))
        vs = verdict(paired_difference(g, ref)) if ref is not None and algo != "best_of_n" \
            else ""
        if algo in ("astar", "compute_optimal") and curves.get(scorer):
            eq = accuracy_at(curves[scorer], b.tokens)
            vs += f"{'; ' if vs else ''}best-of-N at {b.tokens:.0f} tokens: " + \
                ("-" if eq is None else f"{eq:.1%}")
        yield (f"{scorer:>18} {algo:>16} {width if width is not None else '-':>5} "
               f"{b.text():>27} {b.tokens:>10.0f} {b.scorer_calls:>12.1f} "
               f"{sum(r['usage']['seconds'] for r in g) / len(g):>7.2f} {b.runs:>5}  "
               f"{vs}")
    wide = [(band(g).accuracy, key) for key, g in by.items() if key[2] == k]
    if wide and greedy and top == top:
        acc, key = max(wide)
        tokens, bon = band(by[key]).tokens, by.get((key[0], "best_of_n", k))
        spent = f", {tokens / band(bon).tokens:.1f}x best-of-{k}'s tokens" if bon else ""
        yield (f"best at width {k}: {key[1]} ({key[0]}) {acc:.1%} at {tokens:.0f} tokens"
               f"{spent}, closing {(acc - base) / (top - base):.0%} of the gap from "
               f"greedy {base:.1%} to pass@{k} {top:.1%}")


@printout
def claims(sets: Mapping[int, Sequence[dict[str, Any]]], *, k: int = 16) -> Iterator[str]:
    """Each search's call against best-of-N at its width and against best-of-k under the
    same scorer (paired over problems; "higher"/"lower" only where the 95% interval excludes
    0), on every problem set; a claim "holds" where every set makes the same call."""
    from reports.analysis.bands import band, paired_difference
    from reports.analysis.rows import group

    per = {seed: group(rows, lambda r: (r["scorer"] or "-", r["algo"], r["budget"]["width"]))
           for seed, rows in sets.items()}
    keys = [key for key in next(iter(per.values())) if key[1] not in ("best_of_n", "greedy")]
    yield f"{'scorer':>18} {'algorithm':>16} {'width':>5}  {'vs':<14} per set -> claim"
    for key in keys:
        scorer, algo, width = key
        for ref_width, label in ((width, "best-of-N same"), (k, f"best-of-{k}")):
            calls, texts = [], []
            for by in per.values():
                mine, ref = by.get(key), by.get((scorer, "best_of_n", ref_width))
                if not mine or not ref:
                    break
                d, lo, hi = paired_difference(mine, ref)
                ratio = band(mine).tokens / max(band(ref).tokens, 1e-9)
                calls.append("higher" if lo > 0 else "lower" if hi < 0 else "no call")
                texts.append(f"{100 * d:+.1f} ({100 * lo:+.1f}..{100 * hi:+.1f}) "
                             f"at {ratio:.2f}x tokens")
            else:
                held = calls[0] if len(set(calls)) == 1 and calls[0] != "no call" else \
                    "does not hold on every set"
                yield (f"{scorer:>18} {algo:>16} {width if width is not None else '-':>5}  "
                       f"{label:<14} " + " | ".join(texts) + f" -> {held}")


def grids(algos: Sequence[str], scorers: Sequence[str], budgets: Sequence[int]
          ) -> Iterator[tuple[str, list[str], list[int]]]:
    """(scorer, algorithms, budgets) of each grid the demo runs, in order."""
    for i, scorer in enumerate(scorers):
        if "greedy" in algos and i == 0:  # greedy consults no scorer: it runs once
            yield scorer, ["greedy"], [1]
        if "best_of_n" in algos:
            yield scorer, ["best_of_n"], sorted({*BON_WIDTHS, *budgets})
        searches = [a for a in algos if a not in ("greedy", "best_of_n", "compute_optimal")
                    and (a not in STEPS_ONLY or scorer == TABLE_SCORER)]
        if searches:
            yield scorer, searches, list(budgets)
        if "compute_optimal" in algos and scorer == TABLE_SCORER:
            yield scorer, ["compute_optimal"], [max(budgets)]  # its table caps tokens


def main(argv: Sequence[str] | None = None) -> int:
    from reports.bench.eval import ceiling, inside, kernel_clock
    from reports.eval.grid import Grid
    from reports.eval.sweep import run_grid
    from reports.eval.workers import Workers, usable_cores
    from reports.figures.plots import accuracy_vs_compute, scorer_effect
    from search.api import check_engine, get_engine

    args = parse(PROG, __doc__, OPTIONS, argv)
    algos = [a.strip() for a in args.algos.split(",") if a.strip()]
    scorers = [s.strip() for s in args.scorers.split(",") if s.strip()]
    problems = [p for seed in args.data_seeds
                for p in arith.generate(args.problems, seed=seed, difficulty=args.difficulty)]
    workers = 1 if args.kernels else args.workers if args.workers is not None else \
        min(usable_cores(), MAX_WORKERS)
    if workers < 1:
        raise SystemExit(f"{PROG}: --workers must be positive, got {workers}")
    # the model loads in each worker process, or here once
    engine = check_engine(args.model) if workers > 1 else get_engine(args.model)
    t0 = time.monotonic()
    rows: list[dict[str, Any]] = []
    ran = resumed = errors = 0
    clock = kernel_clock() if args.kernels else nullcontext(defaultdict(float))
    pool = Workers(workers) if workers > 1 else nullcontext(None)
    with clock as spent, pool as runner:  # spent: seconds in the kernels (--kernels)
        for scorer, grid_algos, budgets in grids(algos, scorers, args.budgets):
            run = run_grid(Grid(problems, algos=grid_algos, budgets=budgets, seeds=args.seeds,
                                dataset="arith",
                                knobs={a: k for a, k in knobs(args.select).items()
                                       if a in grid_algos}),
                           out=args.out / "demo.jsonl", engine=engine, model=args.model,
                           scorer=scorer, quiet=args.quiet, concurrency=args.concurrency,
                           runner=runner)
            rows += run.rows
            ran, resumed, errors = ran + run.ran, resumed + run.resumed, errors + run.errors
    wall = time.monotonic() - t0
    sets = {seed: [r for r in rows if f"/s{seed}/" in r["problem_id"]]
            for seed in args.data_seeds}
    tag = {seed: f"_{seed}" if len(sets) > 1 else "" for seed in sets}  # one set: as before
    plots = [accuracy_vs_compute([r for r in part if r["scorer"] in (s, None)], args.out,
                                 stem=f"accuracy_vs_compute_{s.replace(':', '_')}{tag[seed]}")
             for seed, part in sets.items() for s in scorers]
    plots += [scorer_effect(part, args.out, stem=f"scorer_effect{tag[seed]}")
              for seed, part in sets.items()]
    print(f"\n{args.model} on {args.problems} arith problems (difficulty {args.difficulty}, "
          f"generator seed{'s' if len(sets) > 1 else ''} {', '.join(map(str, sets))}), "
          f"scorers {scorers}, seeds {args.seeds}; {ran} runs now, {resumed} resumed, "
          f"concurrency {args.concurrency} "
          f"{f'on each of up to {workers} worker processes' if workers > 1 else 'here'}, "
          f"{wall:.0f} s")
    print(f"final selection: {args.select} for {', '.join(a for a in SELECTING if a in algos)}"
          "; greedy has one path, compute_optimal selects as its table says")
    if args.kernels:
        print(ceiling(wall, inside(spent)))
    for seed, part in sets.items():
        if len(sets) > 1:
            print(f"\nproblem set: generator seed {seed}")
        print(table(part))
    if len(sets) > 1:
        print(f"\nclaims on every set (generator seeds {', '.join(map(str, sets))})")
        print(claims(sets))
    print("plots: " + ", ".join(p["files"]["png"] for p in plots))
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
