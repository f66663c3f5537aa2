"""A two-component Weibull mixture, fitted by direct likelihood maximisation (for rpc).

RPC (Zhou et al. 2025) models the probabilities of sampled reasoning paths as a mixture of a
"high" and a "low" Weibull component and prunes paths that more likely belong to the low one.

    density(x) = w * Weibull(x; k_hi, lam_hi) + (1 - w) * Weibull(x; k_lo, lam_lo),  x > 0

Fit: direct maximisation of the likelihood over (w, k_hi, lam_hi, k_lo, lam_lo) with scipy's
bounded minimiser, as in the authors' released code (WNJXYK/RPC), the weight bounded to
[0.2, 0.8] so that neither component can vanish. Our choices, where the paper leaves them open:
  - SLSQP with the analytic gradient (the authors' default L-BFGS-B, with numerical gradients,
    reached worse optima on small samples and was much slower);
  - the data are divided by their maximum before fitting (Weibull is a scale family, so the
    scales are multiplied back afterwards): one set of bounds and starting points fits any scale;
  - bounds="project" (default): shapes capped at `max_shape` (default 100; the likelihood of
    a mixture is unbounded when a component collapses onto one point, and the cap keeps the
    optimum finite), scales in [1e-3, 10] times the data's maximum. bounds="authors": the
    released code's, shapes and scales in [0.01, inf) (scales on the data's own scale);
  - `starts` starting points (default 2), keeping the best optimum: the authors' fixed one
    (w, k, lam, k, lam) = (0.5, 1, 1, 1.5, 2), then single-Weibull moment fits to the lower
    and upper parts of the sorted data split at 1/2, 1/3, 2/3, 1/4, 3/4, ... (the high
    component's weight the upper part's share, clipped to the weight bounds). The authors
    start once, from the fixed point.
The component with the larger mean is called "high" after fitting.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize
from scipy.special import gamma

WEIGHT_BOUNDS = (0.2, 0.8)
MIN_POINTS = 4  # fewer distinct values than this cannot support a two-component fit
BOUNDS = ("project", "authors")
MAX_STARTS = 12


def check_fit(bounds: str, starts: int) -> None:
    if bounds not in BOUNDS or not 1 <= starts <= MAX_STARTS:
        raise ValueError(f"Weibull fit: bounds must be one of {BOUNDS} and starts in "
                         f"1..{MAX_STARTS}, got {bounds!r}, {starts}")


def _splits(n: int) -> list[float]:
    """The split points of the moment starts after the fixed one: 1/2, 1/3, 2/3, 1/4, ..."""
    out: list[float] = []
    d = 2
    while len(out) < n:
        out += [i / d for i in range(1, d) if math.gcd(i, d) == 1]
        d += 1
    return out[:n]


@dataclass(frozen=True)
class WeibullMixture:
    """w * Weibull(k_hi, lam_hi) + (1 - w) * Weibull(k_lo, lam_lo); the high component has
    the larger mean."""

    weight: float
    k_hi: float
    lam_hi: float
    k_lo: float
    lam_lo: float

    @property
    def mean_hi(self) -> float:
        return self.lam_hi * float(gamma(1 + 1 / self.k_hi))

    @property
    def mean_lo(self) -> float:
        return self.lam_lo * float(gamma(1 + 1 / self.k_lo))

    def _log_parts(self, x: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per point: log(w f_hi(x)) and log((1 - w) f_lo(x)), each of shape [n]."""
        x = np.asarray(x, dtype=float)
        return (math.log(self.weight) + _logpdf(x, self.k_hi, self.lam_hi),
                math.log1p(-self.weight) + _logpdf(x, self.k_lo, self.lam_lo))

    def posterior_low(self, x: Sequence[float] | np.ndarray) -> np.ndarray:
        """P(low component | x) per point, shape [n]; 0.5 where both densities vanish."""
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            hi, lo = self._log_parts(x)
            both = np.logaddexp(hi, lo)
            post = np.exp(lo - both)
        return np.where(np.isfinite(both), post, 0.5)



def _logpdf(y: np.ndarray, k: float, lam: float) -> np.ndarray:
    """log Weibull(y; k, lam) for y > 0 (plain numpy: scipy.stats' overhead dominates here)."""
    z = np.log(y) - math.log(lam)
    return math.log(k) - math.log(lam) + (k - 1) * z - np.exp(k * z)


def weibull_nll(theta: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Negative log-likelihood of the mixture at theta = (w, k1, lam1, k2, lam2) and its
    gradient [5]. With a_j = log w_j + log f_j(y) (shape [n]) and r_j = exp(a_j - ll):
    d log f / dk = 1/k + z - z e^(kz), d log f / dlam = k (e^(kz) - 1) / lam, z = log(y / lam)."""
    w, k1, l1, k2, l2 = theta
    grads, parts = [], []
    for k, lam in ((k1, l1), (k2, l2)):
        z = np.log(y) - math.log(lam)
        ekz = np.exp(k * z)
        parts.append(math.log(k) - math.log(lam) + (k - 1) * z - ekz)
        grads.append((1 / k + z - z * ekz, k * (ekz - 1) / lam))
    a = np.stack([math.log(w) + parts[0], math.log1p(-w) + parts[1]])  # [2, n]
    ll = np.logaddexp(a[0], a[1])  # [n]
    r = np.exp(a - ll)  # [2, n]: posterior of each component
    g = [np.sum(r[0]) / w - np.sum(r[1]) / (1 - w)]
    for j in (0, 1):
        g += [np.sum(r[j] * grads[j][0]), np.sum(r[j] * grads[j][1])]
    return float(-np.sum(ll)), -np.array(g)


def _single_fit(y: np.ndarray, max_shape: float) -> tuple[float, float]:
    """(shape, scale) of one Weibull matched to y by log-moments, clipped to the bounds: log y
    is Gumbel-distributed with sd pi / (k sqrt 6) and mean log(lam) - euler_gamma / k."""
    logs = np.log(y)
    sd = float(np.std(logs))
    k = max_shape if sd == 0 else float(np.clip(math.pi / (sd * math.sqrt(6)), 0.01, max_shape))
    lam = math.exp(float(np.mean(logs)) + np.euler_gamma / k)
    return k, float(np.clip(lam, 1e-3, 10.0))


def fit_weibull_mixture(x: Sequence[float] | np.ndarray, *,
                        weight_bounds: tuple[float, float] = WEIGHT_BOUNDS,
                        max_shape: float = 100.0, bounds: str = "project",
                        starts: int = 2) -> WeibullMixture:
    """Maximum-likelihood two-component Weibull mixture of positive data x (shape [n])."""
    x = np.asarray(x, dtype=float)
    if x.ndim != 1 or len(x) < 2 or not np.all(x > 0) or not np.all(np.isfinite(x)):
        raise ValueError("fit_weibull_mixture needs at least two positive finite values")
    check_fit(bounds, starts)
    s = float(x.max())
    y = x / s  # shape [n], in (0, 1]
    if bounds == "project":
        shape, scale = (0.01, max_shape), (1e-3, 10.0)
    else:  # the released code's (0.01, None) for shapes and for scales of the raw data
        shape, scale, max_shape = (0.01, math.inf), (0.01 / s, math.inf), 1e4
    box = [weight_bounds, shape, scale, shape, scale]
    ys = np.sort(y)
    x0s = [np.array([0.5, 1.0, 1.0, 1.5, 2.0])]
    for q in _splits(starts - 1):
        cut = min(max(1, round(q * len(ys))), len(ys) - 1)
        k_lo, l_lo = _single_fit(ys[:cut], max_shape)
        k_hi, l_hi = _single_fit(ys[cut:], max_shape)
        w = float(np.clip(1 - cut / len(ys), *weight_bounds))
        x0s.append(np.array([w, k_hi, l_hi, k_lo, l_lo]))
    best, best_nll = x0s[-1], math.inf  # the last start stands if no optimum is finite
    for x0 in x0s:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # far tails: inf
            res = minimize(weibull_nll, x0, args=(y,), jac=True, method="SLSQP", bounds=box)
            theta = np.clip(res.x, [lo for lo, _ in box], [hi for _, hi in box])
            nll = weibull_nll(theta, y)[0]
        if nll < best_nll:  # nan (an overflowing optimum) never wins
            best, best_nll = theta, nll
    w, k1, l1, k2, l2 = (float(v) for v in best)
    mix = WeibullMixture(w, k1, l1 * s, k2, l2 * s)
    if mix.mean_hi < mix.mean_lo:  # name the components by their means
        mix = WeibullMixture(1 - w, k2, l2 * s, k1, l1 * s)
    return mix


def prune_low(p: Sequence[float] | np.ndarray, *, max_shape: float = 100.0,
              bounds: str = "project", starts: int = 2
              ) -> tuple[np.ndarray, WeibullMixture | None]:
    """RPC's pruning rule on path probabilities p (shape [n], in (0, 1]).

    Returns (pruned mask [n], fitted mixture or None). A path is pruned when its posterior of
    the low component exceeds that of the high one AND its probability is below the mean of
    all n (the second condition, from the authors' code, keeps a poor fit from pruning the
    likelier half). With fewer than MIN_POINTS distinct values nothing is fitted or pruned.
    """
    check_fit(bounds, starts)
    p = np.clip(np.asarray(p, dtype=float), 1e-12, None)
    if len(np.unique(p)) < MIN_POINTS:
        return np.zeros(len(p), dtype=bool), None
    mix = fit_weibull_mixture(p, max_shape=max_shape, bounds=bounds, starts=starts)
    return (mix.posterior_low(p) > 0.5) & (p < p.mean()), mix
