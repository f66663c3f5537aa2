"""False-positive limits of resampling with an imperfect verifier.

After Stroebl et al. 2024, "Inference Scaling fLaws: The Limits of LLM Resampling with
Imperfect Verifiers". Per problem, from its sampled candidates' flags (`correct`, and
`verified` = the verifier accepted it):

    recorded flags (default): what reports.eval graded, the public tests on code and the
        arithmetic step checker on math (reports.eval.correctness); candidates with no flag are skipped
    --threshold T: a score threshold (a PRM, or any scorer the run used) over the candidate
        scores the rows hold: verified = finished and score >= T, overriding recorded flags
        (a candidate with no finite score is not verified)

    p  = P(sample correct)           tp = P(correct and verified)
    fp = P(wrong but verified)       q  = 1 - tp - fp = P(not verified)

With a verifier that accepts every correct sample (no false negatives) tp = p, the paper's
setting; we keep tp and p apart so that false negatives are not read as false positives.

Resample until verified, at most k samples: the answer is the first verified sample, which
is a true positive with probability tp / (tp + fp), so

    accuracy(k) = tp / (tp + fp) * (1 - q^k)          -> ceiling tp / (tp + fp) as k -> inf
    E[samples]  = (1 - q^k) / (1 - q)                 (= k when q = 1)

If none verifies within k the run abstains (fallback "abstain", counts as wrong) or answers
its last, unverified sample (fallback "last": adds q^(k-1) * (p - tp), zero without false
negatives). A problem nothing verifies has ceiling 0 (or p - tp = p with "last").

Utility knob: +1 for a correct answer, -c for a wrong answer given (a false positive
accepted), 0 for abstaining, -cost per sample drawn. Resampling then earns per problem
    U(k) = (1 - q^k) * (tp - c * fp) / (tp + fp) - cost * E[samples]
Each extra sample changes U by q^(i-1) * (tp - c*fp - cost), one sign per problem, but
problems differ in q, so one k shared by all problems has an interior optimum: problems
with many false positives hit their loss early, the hard ones gain slowly (`optimal_k`).

FP-aware selection: answer a verified sample only when its posterior probability of being
correct, pi = P(correct | verified), makes answering worth it: pi - c * (1 - pi) > 0, i.e.
pi > c / (1 + c); otherwise abstain. pi is estimated per problem from candidate counts with a
Beta(a0, b0) prior: (TP + a0) / (TP + FP + a0 + b0). Deciding with the counts we then score
against is optimistic, so `compare_selection` cross-fits: candidates split in two halves
(seeded), the rule decides on one half and is scored on the other rates, and the reverse;
plain resampling is scored on the same halves.

The per-problem rates (n, p, tp, fp, ceiling) go into each plot's JSON as "per_problem";
the command prints their spread and the problems with the most false positives.

    python -m reports.studies.flaws runs.jsonl --out DIR [--algo best_of_n] [--threshold T]
        [--cost-fp 1,4] [--sample-cost 0] [--k-max 64] [--fallback abstain|last] [--seed 0]
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from reports.analysis.rows import read_rows
from reports.studies.flaws_rates import (
    FALLBACKS,
    Flags,
    Rates,
    accuracy,
    ceiling,
    expected_samples,
    mean_over,
    optimal_k,
    problem_flags,
    problem_table,
    simulate,
    utility,
)

__all__ = ["FALLBACKS", "Flags", "Rates", "Selection", "accuracy", "answers", "ceiling",
           "compare_selection", "expected_samples", "flaws_plot", "main", "mean_over",
           "optimal_k", "posterior", "problem_flags", "problem_table", "simulate", "utility"]


# -- FP-aware selection ------------------------------------------------------------------------
def posterior(tp_count: int, fp_count: int, *, prior: tuple[float, float] = (0.5, 0.5)
              ) -> float:
    """P(correct | verified) with a Beta(prior) prior over verified samples' correctness."""
    a0, b0 = prior
    return (tp_count + a0) / (tp_count + fp_count + a0 + b0)


def answers(tp_count: int, fp_count: int, *, c: float,
            prior: tuple[float, float] = (0.5, 0.5)) -> bool:
    """The FP-aware rule: answer iff the expected utility of answering, pi - c (1 - pi), > 0."""
    pi = posterior(tp_count, fp_count, prior=prior)
    return pi - c * (1.0 - pi) > 0


@dataclass(frozen=True)
class Selection:
    """Mean utility per problem of plain resampling and of the FP-aware rule at one k."""

    k: int
    c: float
    cost: float
    plain: float
    fp_aware: float
    answered: float  # share of (problem, fold) decisions that answer
    problems: int    # problems with >= 2 flagged samples (needed to cross-fit)
    crossfit: bool


def compare_selection(flags: Mapping[str, Flags], *, k: int, c: float, cost: float = 0.0,
                      crossfit: bool = True, seed: int = 0,
                      prior: tuple[float, float] = (0.5, 0.5)) -> Selection:
    """Plain resample-until-verified vs the FP-aware rule (module doc), mean over problems."""
    rng = random.Random(seed)
    plain, aware, answered, used = [], [], [], 0
    for pid, f in flags.items():
        if len(f) < 2 and crossfit:
            continue
        used += 1
        if crossfit:
            f = list(f)
            rng.shuffle(f)
            half = len(f) // 2
            folds = [(f[:half], f[half:]), (f[half:], f[:half])]
        else:
            folds = [(list(f), list(f))]
        for decide, score in folds:
            r = Rates.of(pid, score)
            ok = answers(sum(a and b for a, b in decide), sum(b and not a for a, b in decide),
                         c=c, prior=prior)
            plain.append(utility(r, k, c=c, cost=cost))
            aware.append(utility(r, k, c=c, cost=cost, answer=ok))
            answered.append(ok)
    if not plain:
        raise ValueError("compare_selection: no problem has enough flagged samples")
    return Selection(k, c, cost, float(np.mean(plain)), float(np.mean(aware)),
                     float(np.mean(answered)), used, crossfit)


# -- plot and CLI ------------------------------------------------------------------------------
def flaws_plot(flags: Mapping[str, Flags], out_dir: str | Path, *, k_max: int = 64,
               c: float = 1.0, cost: float = 0.0, fallback: str = "abstain",
               trials: int = 2000, seed: int = 0, prior: tuple[float, float] = (0.5, 0.5),
               stem: str = "flaws", verifier: str = "recorded flags") -> dict[str, Any]:
    """Left: accuracy of resample-until-verified vs k (analytic, Monte Carlo at powers of two)
    against the ceiling. Right: utility vs k of plain resampling and of the FP-aware rule
    (cross-fitted), at false-positive cost c. PNG + SVG + sidecar JSON (reports.figures.plots.save),
    the JSON with the per-problem rates (`problem_table`); verifier: what set the flags."""
    from reports.figures.plots import save  # plots imports matplotlib's colour maps; keep it lazy

    rates = [Rates.of(pid, f) for pid, f in flags.items()]
    ks = list(range(1, k_max + 1))
    acc = [mean_over(rates, lambda r, k=k: accuracy(r, k, fallback=fallback)) for k in ks]
    top = mean_over(rates, lambda r: ceiling(r, fallback=fallback))
    mc_ks = [k for k in ks if k & (k - 1) == 0]
    mc = [simulate(rates, k=k, trials=trials, seed=seed + k, c=c, cost=cost,
                   fallback=fallback)[0] for k in mc_ks]
    best, ucurve = optimal_k(rates, c=c, cost=cost, k_max=k_max)
    sel = [compare_selection(flags, k=k, c=c, cost=cost, seed=seed, prior=prior) for k in ks]
    fig = Figure(figsize=(11, 4.2))
    ax, bx = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    series: list[tuple[Any, str, list[int], list[float], dict[str, Any]]] = [(ax, "resample-until-verified (analytic)", ks, acc, dict(color="C0")),
              (ax, "Monte Carlo", mc_ks, mc, dict(color="C0", marker="o", ls="none")),
              (ax, f"ceiling tp/(tp+fp) = {top:.3f}", ks, [top] * len(ks),
               dict(color="C3", ls="--")),
              (bx, "plain resampling (all problems)", [0, *ks], ucurve, dict(color="C0")),
              (bx, "plain resampling (cross-fit halves)", ks, [s.plain for s in sel],
               dict(color="C0", ls=":")),
              (bx, "FP-aware abstention (cross-fit halves)", ks, [s.fp_aware for s in sel],
               dict(color="C2"))]
    curves = []
    for i, (axis, label, xs, ys, style) in enumerate(series):
        (line,) = axis.plot(xs, ys, label=label, **style)
        line.set_gid(f"curve-{i}")
        curves.append({"label": label, "x": list(xs), "y": [float(y) for y in ys]})
    bx.axvline(best, color="k", lw=0.8, ls=":")
    ax.set(xscale="log", xlabel="k (samples)", ylabel="accuracy",
           title=f"Resample until verified ({len(rates)} problems; {verifier})")
    bx.set(xlabel="k (samples)", ylabel="mean utility per problem",
           title=f"Utility (+1 right, -{c:g} wrong, -{cost:g}/sample); best k = {best}")
    for axis in (ax, bx):
        axis.title.set_fontsize(10)
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=7)
    data = {"kind": "flaws", "verifier": verifier, "problems": len(rates), "c": c,
            "cost": cost, "fallback": fallback, "prior": list(prior), "ceiling": top,
            "optimal_k": best, "mean_p": mean_over(rates, lambda r: r.p),
            "mean_fp": mean_over(rates, lambda r: r.fp), "curves": curves,
            "per_problem": problem_table(rates, fallback=fallback)}
    return save(fig, data, out_dir, stem)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m reports.studies.flaws", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="JSONL files written by reports.eval")
    ap.add_argument("--out", required=True, help="directory for the plot files")
    ap.add_argument("--algo", default="best_of_n", help="rows of this algorithm ('all': any)")
    ap.add_argument("--threshold", type=float, default=None, metavar="T",
                    help="verified = candidate score >= T (a PRM threshold), instead of the "
                    "recorded flags")
    ap.add_argument("--worst", type=int, default=5,
                    help="problems with the highest false-positive rate to list")
    ap.add_argument("--cost-fp", default="1,4", help="false-positive costs c to tabulate")
    ap.add_argument("--sample-cost", type=float, default=0.0)
    ap.add_argument("--k-max", type=int, default=64)
    ap.add_argument("--fallback", default="abstain", choices=FALLBACKS)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prior", default="0.5,0.5",
                    help="Beta prior a0,b0 of the FP-aware rule's posterior P(correct|verified)")
    args = ap.parse_args(argv)
    rows = [r for r in read_rows(args.runs) if args.algo in ("all", r["algo"])]
    scorers = sorted({str(r.get("scorer")) for r in rows})
    if args.threshold is None:
        verifier = "recorded flags"
    else:
        verifier = f"score >= {args.threshold:g} ({', '.join(scorers)})"
    try:
        flags = problem_flags(rows, threshold=args.threshold)
    except ValueError as err:
        raise SystemExit(f"{err} (among {args.algo} rows)") from None
    if not flags:
        raise SystemExit(f"no candidates with a `verified` flag among {args.algo} rows "
                         "(math rows written before the step checker was recorded have none: "
                         "re-run them, or use --threshold T on the candidate scores)")
    if args.threshold is not None and len(scorers) > 1:
        print(f"warning: one threshold over the scores of {len(scorers)} scorers "
              f"({', '.join(scorers)}); pass rows of one scorer", file=sys.stderr)
    costs = [float(x) for x in args.cost_fp.split(",") if x]
    a0, b0 = (float(x) for x in args.prior.split(","))
    rates = [Rates.of(pid, f) for pid, f in flags.items()]
    print(f"verifier: {verifier}")
    print(f"{len(rates)} problems, mean samples {np.mean([r.n for r in rates]):.1f}, "
          f"mean p {mean_over(rates, lambda r: r.p):.3f}, "
          f"mean fp {mean_over(rates, lambda r: r.fp):.3f}, ceiling "
          f"{mean_over(rates, lambda r: ceiling(r, fallback=args.fallback)):.3f}")
    _print_problems(problem_table(rates, fallback=args.fallback), args.worst)
    for k in sorted({1, 4, 16, args.k_max}):
        acc = mean_over(rates, lambda r, k=k: accuracy(r, k, fallback=args.fallback))
        print(f"  accuracy at k={k}: {acc:.3f}")
    print(f"{'c':>6} {'best k':>7} {'U(best)':>8} {'U(k_max)':>9} {'FP-aware':>9} {'plain':>7}"
          f" {'answers':>8}   (FP-aware vs plain: cross-fit halves at best k)")
    for c in costs:
        best, curve = optimal_k(rates, c=c, cost=args.sample_cost, k_max=args.k_max)
        s = compare_selection(flags, k=max(best, 1), c=c, cost=args.sample_cost,
                              seed=args.seed, prior=(a0, b0))
        print(f"{c:>6g} {best:>7} {curve[best]:>8.3f} {curve[-1]:>9.3f} {s.fp_aware:>9.3f} "
              f"{s.plain:>7.3f} {s.answered:>8.2f}")
    for c in costs:
        data = flaws_plot(flags, args.out, k_max=args.k_max, c=c, cost=args.sample_cost,
                          fallback=args.fallback, seed=args.seed, prior=(a0, b0),
                          stem=f"flaws_c{c:g}", verifier=verifier)
        print(f"wrote {data['files']['png']}")


def _print_problems(table: Sequence[Mapping[str, Any]], worst: int) -> None:
    """The spread of per-problem false-positive rates and the worst problems."""
    fps = np.array([t["fp"] for t in table])
    none = sum(t["fp_share"] is None for t in table)
    print(f"per problem: fp rate min {fps.min():.3f}, median {np.median(fps):.3f}, "
          f"90th pct {np.percentile(fps, 90):.3f}, max {fps.max():.3f}; "
          f"{int((fps > 0).sum())}/{len(table)} with a false positive, {none} with nothing "
          "verified")
    top = sorted((t for t in table if t["fp"] > 0), key=lambda t: (-t["fp"], t["ceiling"]))
    if top and worst > 0:
        print(f"  {'problem':<24} {'n':>4} {'p':>6} {'tp':>6} {'fp':>6} {'ceiling':>8}")
        for t in top[:worst]:
            print(f"  {t['problem_id']:<24} {t['n']:>4} {t['p']:>6.3f} {t['tp']:>6.3f} "
                  f"{t['fp']:>6.3f} {t['ceiling']:>8.3f}")


if __name__ == "__main__":
    main()
