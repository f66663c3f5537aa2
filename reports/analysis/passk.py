"""Coverage: the unbiased pass@k estimator and coverage-vs-k curves from eval rows.

Chen et al. 2021 ("Evaluating Large Language Models Trained on Code"): from n samples of a
problem, c of them correct, the chance that k samples drawn without replacement contain a
correct one is

    pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i = n-c+1}^{n} (1 - k / i)

The product form never builds the huge binomials. Coverage at k is pass@k averaged over
problems. Samples come from rows in one of two ways (`source`):
  "candidates": each candidate of a row is one sample (best-of-N rows: the N independent
                paths, unfinished ones counting as wrong samples). Per problem, rows of the
                budget holding the most candidates are pooled over seeds; other budgets are
                not added, since a run at a smaller width may repeat the same samples.
  "rows":       each row is one sample (its `correct`), pooled over seeds and budgets, for
                runs that return one answer per seed (greedy at temperature, width-1 runs).
Rows that copy a deterministic algorithm's run for another seed (reused_from_seed) are not
samples and are skipped: greedy over three seeds is one sample, not three.
Search algorithms whose candidates are not independent draws (beam, MCTS) give a "coverage"
that is only the share of problems whose tree held a correct leaf; pass@k assumes i.i.d.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from reports.analysis.rows import Row, candidates, curve_label, group, independent, widest

SOURCES = ("candidates", "rows")


def pass_at_k(n: int, c: int, k: int) -> float:
    """P(at least one of k samples drawn from n, c of them correct, is correct)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:  # every k-subset holds a correct sample
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def mean_pass_at_k(counts: Iterable[tuple[int, int]], k: int) -> float:
    """pass@k averaged over problems given as (n, c) pairs."""
    values = [pass_at_k(n, c, k) for n, c in counts]
    if not values:
        raise ValueError("mean_pass_at_k: no problems")
    return sum(values) / len(values)


def problem_counts(rows: Iterable[Row], *, source: str = "candidates"
                   ) -> dict[str, tuple[int, int]]:
    """problem_id -> (samples n, correct c), from the rows of one algorithm (see module doc)."""
    if source not in SOURCES:
        raise ValueError(f"unknown coverage source {source!r}; choose from {SOURCES}")
    out: dict[str, tuple[int, int]] = {}
    for pid, prows in group(independent(rows), lambda r: str(r["problem_id"])).items():
        if source == "rows":
            flags = [bool(r["correct"]) for r in prows]
        else:
            flags = [bool(c.get("correct")) for r in widest(prows) for c in candidates(r)]
        if flags:
            out[str(pid)] = (len(flags), sum(flags))
    return out


def default_ks(max_k: int) -> list[int]:
    """1, 2, 4, ... up to max_k, with max_k itself last."""
    if max_k < 1:
        raise ValueError(f"default_ks needs max_k >= 1, got {max_k}")
    ks = [1 << i for i in range(max_k.bit_length()) if 1 << i <= max_k]
    return ks if ks[-1] == max_k else [*ks, max_k]


@dataclass(frozen=True)
class Coverage:
    """Coverage (mean pass@k over `problems` problems) at each k, for one curve."""

    label: str
    ks: tuple[int, ...]
    coverage: tuple[float, ...]
    problems: int
    min_samples: int  # the fewest samples any problem has: the largest k estimable


def coverage_curve(counts: Mapping[str, tuple[int, int]], *, label: str = "",
                   ks: Sequence[int] | None = None) -> Coverage:
    """Coverage at each k (default: powers of two up to the fewest samples of any problem).
    Every problem must have at least max(ks) samples, so that all ks average the same set."""
    if not counts:
        raise ValueError(f"coverage_curve{f' ({label})' if label else ''}: no samples")
    min_n = min(n for n, _ in counts.values())
    ks = list(ks) if ks is not None else default_ks(min_n)
    if max(ks) > min_n:
        raise ValueError(f"coverage_curve ({label}): k={max(ks)} exceeds the {min_n} samples "
                         "of the sparsest problem")
    cov = tuple(mean_pass_at_k(counts.values(), k) for k in ks)
    return Coverage(label, tuple(ks), cov, len(counts), min_n)


def coverage_by_curve(rows: Iterable[Row], *, source: str = "candidates",
                      knobs: Sequence[str] = (), ks: Sequence[int] | None = None,
                      label: Callable[[Row], str] | None = None) -> list[Coverage]:
    """One Coverage per algorithm (split further by the listed knobs, or per label(row)), in
    order of appearance. Curves without any sample are left out."""
    out = []
    for name, crows in group(rows, label or (lambda r: curve_label(r, knobs))).items():
        counts = problem_counts(crows, source=source)
        if counts:
            out.append(coverage_curve(counts, label=str(name), ks=ks))
    return out
