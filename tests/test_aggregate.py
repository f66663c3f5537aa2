"""Step-score aggregation (search.aggregate) against values worked by hand."""

from __future__ import annotations

import math

import pytest

from search import aggregate

SCORES = [0.9, 0.5, 0.8]


@pytest.mark.parametrize(
    "name, expected",
    [("last", 0.8), ("min", 0.5), ("prod", 0.36), ("mean", 2.2 / 3)],  # 0.9*0.5*0.8 = 0.36
)
def test_aggregates_by_hand(name: str, expected: float) -> None:
    fn = aggregate.get(name)
    assert fn is getattr(aggregate, name)  # the registry's entry is the module's function
    assert fn(SCORES) == pytest.approx(expected, abs=1e-12)
    assert fn((0.25,)) == pytest.approx(0.25)  # one step: every aggregate is that step
    assert isinstance(fn(SCORES), float)


def test_order_matters_only_for_last() -> None:
    flipped = SCORES[::-1]
    assert aggregate.last(flipped) == 0.9 != aggregate.last(SCORES)
    for fn in (aggregate.min, aggregate.prod, aggregate.mean):
        assert fn(flipped) == pytest.approx(fn(SCORES))


def test_mean_is_exactly_rounded() -> None:
    # fsum: ten 0.1s average to 0.1 exactly, where a running float sum would drift
    assert aggregate.mean([0.1] * 10) == 0.1


@pytest.mark.parametrize("name", aggregate.AGGREGATES.names())
def test_empty_is_an_error(name: str) -> None:
    with pytest.raises(ValueError, match="empty"):
        aggregate.get(name)([])


def test_get_by_callable_and_unknown_name() -> None:
    def geo(s):
        return math.prod(s) ** (1 / len(s))

    assert aggregate.get(geo) is geo
    with pytest.raises(ValueError, match="unknown aggregation 'median'.*last"):
        aggregate.get("median")


def test_nan_propagates_rather_than_hiding() -> None:
    # a NaN step score must not vanish into a plausible number (the scorers flag it as invalid)
    assert math.isnan(aggregate.last([0.5, float("nan")]))
    assert math.isnan(aggregate.prod([0.5, float("nan")]))
    assert math.isnan(aggregate.mean([0.5, float("nan")]))
    for order in ([0.5, float("nan")], [float("nan"), 0.5]):  # the builtin min is order-dependent
        assert math.isnan(aggregate.min(order))
