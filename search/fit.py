"""Fitting a search's first width to a small token budget, before the search starts.

A search runs some paths at once from its start (best-of-N its n samples, beam its n rows,
MCTS its batch x k children, ...): its function declares them, `@rules(..., width=Width(...))`
(search.traits; none: one path, like greedy). With a token budget and an estimate of one path's tokens on the
model (`path_tokens`: an engine's own `path_tokens` attribute, else PATH_TOKENS by model
name; unknown: nothing is checked), a search whose width cannot finish one path each
within the budget's stopping point (tokens less the reserve) would spend it all on
unfinished paths. `fit` then narrows the width where the algorithm allows (the knobs
lowered to the widest that fits, said in Result.stats["narrowed"]: {"n": (8, 4)}), or
refuses up front with the smallest token budget that can (BudgetTooSmall).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from search.types import Budget

# tokens of one path of the embedded models (finished samples of best_of_n, n=8, at the
# sampler's defaults: tiny-arith on problems.arith.generate(12, seed=31), max 86; tiny-code
# on problems.codegen.generate(8, seed=31), max 61), rounded up
PATH_TOKENS: dict[str, int] = {"tiny-arith": 90, "tiny-code": 64}


class BudgetTooSmall(ValueError):
    """A token budget that cannot finish one path of a search's first width (`needed`:
    the smallest token budget that can)."""

    def __init__(self, message: str, needed: int) -> None:
        super().__init__(message)
        self.needed = needed


@dataclass(frozen=True)
class Width:
    """The paths a search runs at once from its start: the product of `knobs`' values.
    narrow: whether they may be lowered to fit a budget (in `knobs`' order, each down to
    `floor`); multiple_of: a knob the first one stays a multiple of (beam's n of m),
    itself lowered to it where the first falls below; capped: a knob that may not exceed
    the first (first_finish's k <= n); spread: paths' worth of tokens spent per path run
    at once before one finishes (a tree search also expands the siblings of the path it
    follows at every level: 2; searches whose paths run side by side to the end: 1);
    companions: knobs that a budget number sets with these (search.traits.Traits.at): each
    the largest value up to its default that the algorithm's rules allow (beam's m)."""

    knobs: tuple[str, ...]
    narrow: bool = True
    floor: int = 1
    multiple_of: str | None = None
    capped: str | None = None
    spread: float = 1.0
    companions: tuple[str, ...] = ()

    def of(self, knobs: Mapping[str, Any]) -> int:
        return math.prod(int(knobs[k]) for k in self.knobs)

    def smallest(self) -> int:
        return self.floor ** len(self.knobs) if self.narrow else 0

    def narrowed(self, knobs: Mapping[str, Any], paths: int) -> dict[str, int] | None:
        """The knobs that change so at most `paths` run at once (their new values); None
        where even the floors run more."""
        values = {k: int(knobs[k]) for k in self.knobs}
        for k in self.knobs:
            others = math.prod(v for j, v in values.items() if j != k)
            values[k] = max(self.floor, min(values[k], paths // others))
            if math.prod(values.values()) <= paths:
                break
        if math.prod(values.values()) > paths:
            return None
        first = self.knobs[0]
        if self.multiple_of is not None:
            step = int(knobs[self.multiple_of])
            if values[first] < step:
                values[self.multiple_of] = values[first]
            else:
                values[first] -= values[first] % step
        if self.capped is not None:
            values[self.capped] = min(int(knobs[self.capped]), values[first])
        return {k: v for k, v in values.items() if v != int(knobs[k])}


def path_tokens(engine: Any, model: str) -> int | None:
    """The estimate of one path's tokens: the engine's `path_tokens` (an attribute), else
    PATH_TOKENS[model]; None where neither knows."""
    own = getattr(engine, "path_tokens", None) if not isinstance(engine, str | None) else None
    return int(own) if own else PATH_TOKENS.get(model)


def fit(algo: str, width: Width | None, knobs: Mapping[str, Any], budget: Budget | None,
        per_path: int | None) -> dict[str, tuple[int, int]]:
    """The knobs to narrow ({knob: (given, narrowed)}; {} when the width fits, or nothing
    is known to check); BudgetTooSmall where the algorithm cannot narrow enough."""
    if width is None or budget is None or budget.tokens is None or not per_path:
        return {}
    per_path = math.ceil(per_path * width.spread)
    stop = budget.tokens - budget.reserve_tokens  # where the search stops expanding
    paths = width.of(knobs)
    if paths * per_path <= stop:
        return {}
    changed = width.narrowed(knobs, stop // per_path) if width.narrow else None
    if changed is not None:
        return {k: (int(knobs[k]), v) for k, v in changed.items()}
    fewest = width.smallest() or paths
    needed = math.ceil(fewest * per_path / (1.0 - budget.reserve))
    given = ", ".join(f"{k}={knobs[k]}" for k in width.knobs)
    how = (f"even at its narrowest ({', '.join(f'{k}={width.floor}' for k in width.knobs)})"
           if width.narrow else f"with {given} (it cannot be narrowed to fit)")
    raise BudgetTooSmall(
        f"{algo} runs {fewest if width.narrow else paths} path(s) at once {how}, about "
        f"{per_path} tokens each on this model, so Budget(tokens={budget.tokens}) cannot "
        f"finish one: give at least Budget(tokens={needed})"
        + ("" if width.narrow else f" or smaller {', '.join(width.knobs)}"), needed)
