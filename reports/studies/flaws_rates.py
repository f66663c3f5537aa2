"""Per-problem sample rates under an imperfect verifier and what resampling until verified
earns from them: in closed form and by Monte Carlo. The formulas and the FP-aware selection
that uses them are in reports.studies.flaws (the module doc); this is its model.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from reports.analysis.rows import Row, candidates, group, widest

FALLBACKS = ("abstain", "last")
Flags = list[tuple[bool, bool]]  # (correct, verified) per sample


def check_fallback(fallback: str) -> None:
    """ValueError unless `fallback` is one of FALLBACKS."""
    if fallback not in FALLBACKS:
        raise ValueError(f"unknown fallback {fallback!r}; choose from {FALLBACKS}")


@dataclass(frozen=True)
class Rates:
    """One problem's sample rates (module doc), from n samples with a verifier flag."""

    problem_id: str
    n: int
    p: float
    tp: float
    fp: float

    @property
    def q(self) -> float:
        return max(0.0, 1.0 - self.tp - self.fp)

    @classmethod
    def of(cls, problem_id: str, flags: Flags) -> Rates:
        if not flags:
            raise ValueError(f"problem {problem_id}: no samples with a verifier flag")
        n = len(flags)
        return cls(problem_id, n, sum(c for c, _ in flags) / n,
                   sum(c and v for c, v in flags) / n, sum(v and not c for c, v in flags) / n)


def problem_flags(rows: Iterable[Row], *, threshold: float | None = None
                  ) -> dict[str, Flags]:
    """problem_id -> (correct, verified) of every candidate whose `verified` is known, pooled
    over the seeds of the budget holding the most candidates (reports.analysis.rows.widest).
    threshold: verified = finished and score >= threshold instead of the recorded flag (every
    candidate is then known); a ValueError if no candidate has a score."""
    rows = list(rows)
    if threshold is not None and not any(c.get("score") is not None
                                         for r in rows for c in candidates(r)):
        raise ValueError("no candidate scores in these rows: a threshold verifier needs runs "
                         "whose candidates carry a scorer's score")
    out = {}
    for pid, prows in group(rows, lambda r: str(r["problem_id"])).items():
        flags = [(bool(c.get("correct")), v) for r in widest(prows) for c in candidates(r)
                 if (v := _verified(c, threshold)) is not None]
        if flags:
            out[str(pid)] = flags
    return out


def _verified(cand: Mapping[str, Any], threshold: float | None) -> bool | None:
    if threshold is None:
        v = cand.get("verified")
        return None if v is None else bool(v)
    score = cand.get("score")
    return bool(cand.get("finished")) and score is not None and float(score) >= threshold


def problem_table(rates: Sequence[Rates], *, fallback: str = "abstain"
                  ) -> list[dict[str, Any]]:
    """One record per problem: n samples, p = P(correct), tp = P(correct and verified), fp =
    P(wrong and verified) (the false-positive rate), fp_share = fp / (tp + fp) (None when
    nothing verified) and the ceiling of resample-until-verified."""
    return [{"problem_id": r.problem_id, "n": r.n, "p": r.p, "tp": r.tp, "fp": r.fp,
             "fp_share": r.fp / (r.tp + r.fp) if r.tp + r.fp > 0 else None,
             "ceiling": ceiling(r, fallback=fallback)} for r in rates]


# -- analytic ----------------------------------------------------------------------------------
def expected_samples(r: Rates, k: int) -> float:
    q = r.q
    return float(k) if q >= 1.0 else (1.0 - q ** k) / (1.0 - q)


def ceiling(r: Rates, *, fallback: str = "abstain") -> float:
    """Accuracy of resample-until-verified as k -> inf."""
    check_fallback(fallback)
    if r.tp + r.fp > 0:
        return r.tp / (r.tp + r.fp)
    return r.p - r.tp if fallback == "last" else 0.0


def accuracy(r: Rates, k: int, *, fallback: str = "abstain") -> float:
    """Accuracy of resample-until-verified with at most k samples (k = 0: abstain)."""
    check_fallback(fallback)
    if k <= 0:
        return 0.0
    v, q = r.tp + r.fp, r.q
    acc = r.tp / v * (1.0 - q ** k) if v > 0 else 0.0
    return acc + (q ** (k - 1) * (r.p - r.tp) if fallback == "last" else 0.0)


def utility(r: Rates, k: int, *, c: float, cost: float = 0.0, answer: bool = True) -> float:
    """Expected utility of resample-until-verified (abstaining if none verifies); answer=False
    is the FP-aware rule's abstention: the samples are still paid for, nothing is answered."""
    v = r.tp + r.fp
    gain = (1.0 - r.q ** k) * (r.tp - c * r.fp) / v if v > 0 and answer and k > 0 else 0.0
    return gain - cost * expected_samples(r, k)


def mean_over(rates: Sequence[Rates], fn: Any) -> float:
    if not rates:
        raise ValueError("no problems with verifier flags")
    return float(np.mean([fn(r) for r in rates]))


def optimal_k(rates: Sequence[Rates], *, c: float, cost: float = 0.0, k_max: int = 64
              ) -> tuple[int, list[float]]:
    """The k in 0..k_max maximising mean utility (ties: the smaller k), and the curve U(k)."""
    curve = [mean_over(rates, lambda r, k=k: utility(r, k, c=c, cost=cost))
             for k in range(k_max + 1)]
    best = max(range(k_max + 1), key=lambda k: (round(curve[k], 12), -k))
    return best, curve


# -- Monte Carlo check -------------------------------------------------------------------------
def simulate(rates: Sequence[Rates], *, k: int, trials: int = 4000, seed: int = 0,
             c: float = 1.0, cost: float = 0.0, fallback: str = "abstain"
             ) -> tuple[float, float]:
    """(mean accuracy, mean utility) of resample-until-verified, by drawing samples: each
    sample is a true positive, false positive, false negative or a rejected wrong one. The
    fallback changes the accuracy only; utility scores a run with no verified sample as an
    abstention, as `utility` does."""
    check_fallback(fallback)
    if k < 1:
        raise ValueError("simulate needs k >= 1")
    rng = np.random.default_rng(seed)
    accs, utils = [], []
    for r in rates:
        u = rng.random((trials, k))
        verified = u < r.tp + r.fp
        true_pos = u < r.tp
        false_neg = (u >= r.tp + r.fp) & (u < r.tp + r.fp + (r.p - r.tp))
        hit = verified.any(axis=1)
        first = verified.argmax(axis=1)  # index of the first verified sample (0 if none)
        good = np.where(hit, true_pos[np.arange(trials), first],
                        false_neg[:, -1] if fallback == "last" else False)
        spent = np.where(hit, first + 1, k)
        gain = np.where(hit, np.where(good, 1.0, -c), 0.0)
        accs.append(good.mean())
        utils.append((gain - cost * spent).mean())
    return float(np.mean(accs)), float(np.mean(utils))
