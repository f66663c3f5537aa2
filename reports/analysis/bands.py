"""Seed bands, problem-bootstrap intervals and equal-token comparisons over eval rows.

One configuration's rows (every problem x seed) give:
    accuracy     mean of `correct` over all its rows
    seed band    min and max over seeds of the per-seed accuracy (how much a re-run moves it)
    95% CI       percentile bootstrap over problems (each resampled problem brings all its
                 seeds' rows): how much another draw of problems would move it, the larger
                 of the two on 100 problems
Two configurations run on the same problems and seeds are compared by the paired bootstrap of
their accuracy difference: a difference is called only when its 95% interval excludes 0.

Equal-token comparisons read a reference curve (accuracy against mean generated tokens, e.g.
best-of-N at widths 1..16) as piecewise linear in log tokens:
    accuracy_at(curve, t)     the curve's accuracy at t tokens (None outside its range)
    tokens_to_match(curve, a) the fewest tokens at which the curve's running maximum reaches a
                              (None if it never does)
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

from reports.analysis.passk import mean_pass_at_k, problem_counts
from reports.analysis.rows import Row, group

BOOT = 2000  # bootstrap resamples
LEVEL = 0.95


@dataclass(frozen=True)
class Band:
    """Accuracy and cost of one configuration over problems x seeds."""

    runs: int
    seeds: tuple[int, ...]
    accuracy: float
    seed_min: float
    seed_max: float
    ci_low: float
    ci_high: float
    tokens: float  # mean generated tokens per run
    scorer_calls: float

    def text(self) -> str:
        """"73.0% [71-75] (64-81)": mean, seed min-max, 95% CI over problems."""
        return (f"{self.accuracy:.1%} [{self.seed_min:.0%}-{self.seed_max:.0%}] "
                f"({self.ci_low:.0%}-{self.ci_high:.0%})")


def _by_problem(rows: Iterable[Row]) -> dict[Hashable, list[Row]]:
    return group(rows, lambda r: str(r["problem_id"]))


def _percentiles(values: Sequence[float]) -> tuple[float, float]:
    xs = sorted(values)
    lo = xs[int((1 - LEVEL) / 2 * (len(xs) - 1))]
    hi = xs[int((1 + LEVEL) / 2 * (len(xs) - 1))]
    return lo, hi


def band(rows: Sequence[Row], *, seed: int = 0) -> Band:
    """The Band of one configuration's rows; the bootstrap draws from random.Random(seed)."""
    if not rows:
        raise ValueError("band: no rows")
    per_seed = group(rows, lambda r: int(r["seed"]))
    accs = [sum(bool(r["correct"]) for r in g) / len(g) for g in per_seed.values()]
    probs = list(_by_problem(rows).values())
    means = [sum(bool(r["correct"]) for r in g) / len(g) for g in probs]
    rng = random.Random(seed)
    boot = [sum(rng.choice(means) for _ in means) / len(means) for _ in range(BOOT)]
    lo, hi = _percentiles(boot)
    return Band(len(rows), tuple(sorted(int(s) for s in per_seed)),
                sum(bool(r["correct"]) for r in rows) / len(rows), min(accs), max(accs), lo, hi,
                sum(float(r["usage"]["generated_tokens"]) for r in rows) / len(rows),
                sum(float(r["usage"]["scorer_calls"]) for r in rows) / len(rows))


def paired_difference(a: Sequence[Row], b: Sequence[Row], *, seed: int = 0
                      ) -> tuple[float, float, float]:
    """(mean accuracy of a - b, 95% CI low, high) by the paired bootstrap over the problems
    both ran (each problem's accuracy averaged over its seeds). The rows' order does not
    matter: problems are resampled in sorted order, and sums are exactly rounded (fsum), so
    a difference of exactly 0 never reads as a hair below it."""
    pa, pb = _by_problem(a), _by_problem(b)
    common = sorted(str(p) for p in pa if p in pb)
    if not common:
        raise ValueError("paired_difference: no problem in common")
    diffs = [sum(bool(r["correct"]) for r in pa[p]) / len(pa[p])
             - sum(bool(r["correct"]) for r in pb[p]) / len(pb[p]) for p in common]
    rng = random.Random(seed)
    boot = [math.fsum(rng.choice(diffs) for _ in diffs) / len(diffs) for _ in range(BOOT)]
    lo, hi = _percentiles(boot)
    return math.fsum(diffs) / len(diffs), lo, hi


def verdict(diff: tuple[float, float, float]) -> str:
    """"+3.0 pts (+0.5..+5.7): higher", "... : no call" when the interval holds 0."""
    d, lo, hi = diff
    call = "higher" if lo > 0 else "lower" if hi < 0 else "no call"
    return f"{100 * d:+.1f} pts ({100 * lo:+.1f}..{100 * hi:+.1f}): {call}"


def ceiling(rows: Iterable[Row], k: int) -> float:
    """The pass@k ceiling of the problems in rows: mean unbiased pass@k from the candidates of
    each problem's widest best-of-N runs pooled over seeds (reports.analysis.passk)."""
    counts = [nc for nc in problem_counts(rows).values() if nc[0] >= k]
    return mean_pass_at_k(counts, k)


# -- equal-token comparisons -----------------------------------------------------------------
Curve = Sequence[tuple[float, float]]  # (mean tokens, accuracy), any order


def _sorted(curve: Curve) -> list[tuple[float, float]]:
    return sorted((t, a) for t, a in curve if t > 0)


def accuracy_at(curve: Curve, tokens: float) -> float | None:
    """The curve's accuracy at `tokens`, linear in log tokens between its points."""
    pts = _sorted(curve)
    if not pts or not pts[0][0] <= tokens <= pts[-1][0]:
        return None
    for (t0, a0), (t1, a1) in zip(pts, pts[1:]):
        if t0 <= tokens <= t1:
            if t1 == t0:
                return max(a0, a1)
            u = (math.log(tokens) - math.log(t0)) / (math.log(t1) - math.log(t0))
            return a0 + u * (a1 - a0)
    return pts[0][1]  # a single point


def tokens_to_match(curve: Curve, accuracy: float) -> float | None:
    """The fewest tokens at which the curve's running maximum reaches `accuracy` (its first
    point's tokens if that point already does)."""
    prev: tuple[float, float] | None = None  # the running maximum so far
    for t, a in _sorted(curve):
        if a >= accuracy - 1e-12:
            if prev is None:
                return t
            t0, a0 = prev
            u = (accuracy - a0) / (a - a0)
            return math.exp(math.log(t0) + u * (math.log(t) - math.log(t0)))
        if prev is None or a > prev[1]:
            prev = (t, a)
    return None


def curve_of(rows: Iterable[Row], *, algo: str = "best_of_n") -> list[tuple[float, float]]:
    """(mean tokens, accuracy) per width of one algorithm's rows."""
    out = []
    for _, g in sorted(group((r for r in rows if r["algo"] == algo),
                             lambda r: r["budget"]["width"]).items(),
                       key=lambda kv: (kv[0] is None, kv[0] or 0)):
        b = band(g)
        out.append((b.tokens, b.accuracy))
    return out
