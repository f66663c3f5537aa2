"""Aggregating per-step rewards into one path score: plain functions over a list of floats.
Part of the scorer contract (search.scoring).

AGGREGATES is a search.plugins.Registry of them by name (the knob `agg`): another package adds
one by an entry point in the group "tts_search.aggregates" (value "module:function").
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable, Sequence

from search.plugins import Registry

Aggregate = Callable[[Sequence[float]], float]


def _nonempty(scores: Sequence[float]) -> Sequence[float]:
    if len(scores) == 0:
        raise ValueError("cannot aggregate an empty list of step scores")
    return scores


def last(scores: Sequence[float]) -> float:
    """The final step's score (an outcome-style reading of a PRM)."""
    return float(_nonempty(scores)[-1])


def min(scores: Sequence[float]) -> float:  # noqa: A001 - the aggregation's name
    """The weakest step: a path is as good as its worst step (NaN if any step is NaN: the
    builtin would return whatever the comparisons happened to leave, depending on order)."""
    s = _nonempty(scores)
    return math.nan if any(math.isnan(x) for x in s) else float(builtins.min(s))


def prod(scores: Sequence[float]) -> float:
    """Product of step scores: the probability that every step is right, if independent."""
    return float(math.prod(_nonempty(scores)))


def mean(scores: Sequence[float]) -> float:
    s = _nonempty(scores)
    return float(math.fsum(s) / len(s))


AGGREGATES: Registry[Aggregate] = Registry("aggregates", "aggregation",
                                           {"last": last, "min": min, "prod": prod, "mean": mean})


def get(agg: str | Aggregate) -> Aggregate:
    """An aggregation by name (ValueError naming the known ones if none) or the function
    itself."""
    return agg if callable(agg) else AGGREGATES.get(agg)
