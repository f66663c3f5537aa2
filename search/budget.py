"""The meter: one mutable account per solve, charged by the engine and by scorers.

Algorithms ask `meter.exhausted()` before each expansion batch, so a run overshoots its
budget by at most the batch that was already under way when the limit was crossed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from search.types import Budget, Usage


class Meter:
    """Counts what a run spends and says when its Budget is reached."""

    def __init__(self, budget: Budget | None = None) -> None:
        self.budget = budget or Budget()
        self.generated_tokens = 0
        self.prefill_tokens = 0
        self.forward_passes = 0
        self.scorer_calls = 0
        self.scorer_tokens = 0
        self.flops = 0.0
        self._start = time.perf_counter()
        self.watchers: list[Callable[[Meter], None]] = []  # called after every charge

    def _charged(self) -> None:
        for watch in self.watchers:
            watch(self)

    # -- charging ----------------------------------------------------------------------
    def charge_model(self, *, generated: int = 0, prefill: int = 0, processed: int = 0,
                     flops: float = 0.0, passes: int = 1) -> None:
        """One engine forward batch: `processed` tokens went through the model."""
        self.generated_tokens += generated
        self.prefill_tokens += prefill
        self.forward_passes += passes
        self.flops += flops
        del processed  # folded into flops; kept as a named argument for readable call sites
        self._charged()

    def charge_scorer(self, *, calls: int, tokens: int = 0, flops: float = 0.0) -> None:
        self.scorer_calls += calls
        self.scorer_tokens += tokens
        self.flops += flops
        self._charged()

    # -- reading -----------------------------------------------------------------------
    @property
    def seconds(self) -> float:
        return time.perf_counter() - self._start

    def usage(self) -> Usage:
        return Usage(generated_tokens=self.generated_tokens, prefill_tokens=self.prefill_tokens,
                     forward_passes=self.forward_passes, scorer_calls=self.scorer_calls,
                     scorer_tokens=self.scorer_tokens, flops=self.flops, seconds=self.seconds)

    def exhausted(self) -> bool:
        """True once any limit of the budget is reached."""
        b = self.budget
        return ((b.tokens is not None and self.generated_tokens >= b.tokens)
                or (b.scorer_calls is not None and self.scorer_calls >= b.scorer_calls)
                or (b.flops is not None and self.flops >= b.flops)
                or (b.seconds is not None and self.seconds >= b.seconds))

    def tokens_left(self) -> int | None:
        if self.budget.tokens is None:
            return None
        return max(0, self.budget.tokens - self.generated_tokens)


@contextmanager
def metered(meter: Meter, *parts: Any) -> Iterator[Meter]:
    """Point every part's `meter` attribute (engine, scorer) at `meter` for the block."""
    saved = [(p, p.meter) for p in parts if p is not None and hasattr(p, "meter")]
    try:
        for p, _ in saved:
            p.meter = meter
        yield meter
    finally:
        for p, old in saved:
            p.meter = old
