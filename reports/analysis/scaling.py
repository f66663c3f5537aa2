"""Scaling-law fits over coverage and accuracy curves.

Coverage vs samples (Brown et al. 2024, "Large Language Monkeys: Scaling Inference Compute
with Repeated Sampling"): coverage c(k) follows an exponentiated power law

    c(k) = exp(a * k^b),   a < 0, b < 0        (c -> 1 as k -> inf, c(1) = exp(a))

Fit: in log space, as the paper fits it: least squares on log c(k) = a * k^b with
scipy.optimize.curve_fit, a and b bounded to (-inf, 0]. Log space makes the residuals
relative, so the small-k points (low coverage) count as much as the many high-k points
crowding near 1. Points with c = 0 carry no information in log space and are dropped. The
starting point comes from the linearised form log(-log c) = log(-a) + b log k.

Accuracy vs compute: a plain power law y = s * x^e, fitted as the line log y = log s + e log x
(use y = 1 - accuracy for an error-vs-compute law, which falls with e < 0).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import OptimizeWarning, curve_fit

ArrayLike = float | Sequence[float] | np.ndarray


def _log_cov(k: np.ndarray, a: float, b: float) -> np.ndarray:
    return a * np.power(k, b)


@dataclass(frozen=True)
class ExpPowerLaw:
    """c(k) = exp(a * k^b) fitted on `points` (k, coverage) pairs; rmse of log c."""

    a: float
    b: float
    rmse_log: float
    points: int

    def predict(self, k: ArrayLike) -> np.ndarray:
        """Coverage at each k (an array, also for a scalar k)."""
        return np.exp(_log_cov(np.asarray(k, dtype=float), self.a, self.b))

    def describe(self) -> str:
        return f"exp({self.a:.3g}·k^{self.b:.3g})"


def fit_exp_power_law(ks: Sequence[float] | np.ndarray,
                      coverage: Sequence[float] | np.ndarray) -> ExpPowerLaw:
    """Least squares in log space (module doc). Needs two points with 0 < c < 1 or more."""
    k = np.asarray(ks, dtype=float)
    c = np.asarray(coverage, dtype=float)
    if k.shape != c.shape or k.ndim != 1:
        raise ValueError(f"fit_exp_power_law: ks and coverage must be equal-length 1-d, got "
                         f"{k.shape} and {c.shape}")
    if np.any(k <= 0) or np.any(c < 0) or np.any(c > 1) or not np.all(np.isfinite(c)):
        raise ValueError("fit_exp_power_law: needs k > 0 and coverage in [0, 1]")
    keep = c > 0
    k, c = k[keep], c[keep]
    inner = (c < 1)
    if np.count_nonzero(inner) < 2:
        raise ValueError("fit_exp_power_law: needs at least two points with 0 < coverage < 1 "
                         f"(got {np.count_nonzero(inner)}); the law is not identified")
    slope, icept = np.polyfit(np.log(k[inner]), np.log(-np.log(c[inner])), 1)
    p0 = (-math.exp(icept), min(float(slope), -1e-6))  # inside the bounds
    with warnings.catch_warnings():  # the parameters' covariance is not used: its warning
        warnings.simplefilter("ignore", OptimizeWarning)  # (too few points) says nothing here
        (a, b), _ = curve_fit(_log_cov, k, np.log(c), p0=p0,
                              bounds=([-np.inf, -np.inf], [0, 0]), maxfev=20000)
    resid = np.log(c) - _log_cov(k, a, b)
    return ExpPowerLaw(float(a), float(b), float(np.sqrt(np.mean(resid ** 2))), int(k.size))


def _line(logx: np.ndarray, logs: float, e: float) -> np.ndarray:
    return logs + e * logx


@dataclass(frozen=True)
class PowerLaw:
    """y = scale * x^exponent fitted on `points` (x, y) pairs; rmse of log y."""

    scale: float
    exponent: float
    rmse_log: float
    points: int

    def predict(self, x: ArrayLike) -> np.ndarray:
        return self.scale * np.power(np.asarray(x, dtype=float), self.exponent)

    def describe(self) -> str:
        return f"{self.scale:.3g}·x^{self.exponent:.3g}"


def fit_power_law(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> PowerLaw:
    """Least squares of log y on log x; every x and y must be > 0 (two points or more)."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xa.shape != ya.shape or xa.ndim != 1 or xa.size < 2:
        raise ValueError("fit_power_law: x and y must be equal-length 1-d with >= 2 points")
    if np.any(xa <= 0) or np.any(ya <= 0):
        raise ValueError("fit_power_law: a power law needs x > 0 and y > 0")
    lx, ly = np.log(xa), np.log(ya)
    (logs, e), _ = curve_fit(_line, lx, ly, p0=tuple(np.polyfit(lx, ly, 1)[::-1]))
    resid = ly - _line(lx, logs, e)
    return PowerLaw(float(math.exp(logs)), float(e), float(np.sqrt(np.mean(resid ** 2))),
                    int(xa.size))
