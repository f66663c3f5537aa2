"""Resampling schemes for sequential Monte Carlo (the knob `resample` of particle_filter and
particle_gibbs; search.algos._smc runs them): each draws n ancestor indices from normalised
or unnormalised weights with E[count_i] = n w_i / sum(w).

    multinomial  n independent draws from Categorical(w)
    systematic   u ~ U[0, 1/n); ancestor j is the particle whose CDF interval holds u + j/n,
                 so count_i is floor(n w_i) or ceil(n w_i) (less variance)
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections.abc import Callable, Sequence

from search.plugins import Registry

Resampler = Callable[[Sequence[float], int, random.Random], list[int]]


def multinomial(weights: Sequence[float], n: int, rng: random.Random) -> list[int]:
    """n ancestor indices drawn independently with probability proportional to weights."""
    return rng.choices(range(len(weights)), weights=weights, k=n)


def systematic(weights: Sequence[float], n: int, rng: random.Random) -> list[int]:
    """n ancestor indices at the evenly spaced points u + j/n, u ~ U[0, 1/n)."""
    total = math.fsum(weights)
    cdf = list(itertools.accumulate(w / total for w in weights))
    cdf[-1] = 1.0  # rounding must not leave a point past the last particle
    u = rng.random() / n
    # bisect_right: particle i owns [cdf[i-1], cdf[i]), so zero weight owns nothing
    return [bisect.bisect_right(cdf, u + j / n) for j in range(n)]


# the knob `resample`; another package adds a scheme by the entry-point group
# "tts_search.resamplers"
RESAMPLERS: Registry[Resampler] = Registry("resamplers", "resampling scheme",
                                           {"multinomial": multinomial, "systematic": systematic})


def resampler(name: str) -> Resampler:
    """A resampling scheme by name (ValueError naming the known ones if none)."""
    return RESAMPLERS.get(name)
