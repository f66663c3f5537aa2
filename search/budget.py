"""The meter: one mutable account per solve, charged by the engine and by scorers.

Algorithms ask `meter.exhausted()` before each expansion batch, so a run overshoots its
budget by at most the batch that was already under way when the limit was crossed.

A search stops at its budget's stopping points, (1 - reserve) of each limit (Budget.reserve);
the rest is held back for finishing the best partial path when nothing finished
(search/algos/_stepwise.py `complete`), which runs on a sub-meter (`submeter`) whose budget
`Meter.reserve_budget` gives: the reserved tokens (each step capped at what is left of
them), and the other limits up to the limits themselves. `reached()` is the plain question
"is any limit itself reached?".

Several searches may share one engine and scorer, each in its own thread (search.solve_many):
their `meter` is then per thread (PerThreadMeter), which `metered` sets for the calling
thread only, and the engine's scheduler runs a search's model work under that search's thread state
(`as_thread`), so each Meter is charged exactly what its own search cost.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from typing import Any

from search.types import Budget, Usage

Clock = Callable[[], float]


class Meter:
    """Counts what a run spends and says when its Budget is reached.

    clock: where seconds come from (time.perf_counter; tests pass a scripted clock).
    """

    def __init__(self, budget: Budget | None = None, *, clock: Clock = time.perf_counter
                 ) -> None:
        self.budget = budget or Budget()
        self.generated_tokens = 0
        self.prefill_tokens = 0
        self.forward_passes = 0
        self.scorer_calls = 0
        self.scorer_tokens = 0
        self.flops = 0.0
        self.server: Counter[str] = Counter()  # a server's own counts of this run's requests
        self.clock = clock
        self._start = clock()
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

    def charge_server(self, counts: Mapping[str, int]) -> None:
        """What a server reported for this run's requests (engines that talk to one)."""
        self.server.update(counts)

    # -- reading -----------------------------------------------------------------------
    @property
    def seconds(self) -> float:
        return self.clock() - self._start

    def usage(self) -> Usage:
        return Usage(generated_tokens=self.generated_tokens, prefill_tokens=self.prefill_tokens,
                     forward_passes=self.forward_passes, scorer_calls=self.scorer_calls,
                     scorer_tokens=self.scorer_tokens, flops=self.flops, seconds=self.seconds)

    def spent(self, limit: str) -> float:
        """What the run has spent of one Budget limit ("tokens", "scorer_calls", ...)."""
        return {"tokens": self.generated_tokens, "scorer_calls": self.scorer_calls,
                "flops": self.flops, "seconds": self.seconds}[limit]

    def stop_at(self, limit: str) -> float:
        """Where a search stops for one limit: the limit less its reserve."""
        b = self.budget
        value = float(getattr(b, limit))
        return value - b.reserve_tokens if limit == "tokens" else value * (1.0 - b.reserve)

    def exhausted(self) -> bool:
        """True once the search should stop expanding: a limit's stopping point is reached
        ((1 - reserve) of it; see Budget.reserve)."""
        return any(self.spent(k) >= self.stop_at(k) for k in self.budget.limits())

    def reached(self) -> bool:
        """True once any limit itself is reached."""
        return any(self.spent(k) >= v for k, v in self.budget.limits().items())

    def tokens_left(self) -> int | None:
        if self.budget.tokens is None:
            return None
        return max(0, self.budget.tokens - self.generated_tokens)

    def reserve_budget(self) -> Budget | None:
        """The budget for finishing a partial path once the search has stopped: the reserved
        tokens (or all the tokens left, if more), and what is left of every other limit.
        None when nothing can be spent (a limit other than scorer calls is used up, or no
        token is left to generate). Scorer calls that are used up only stop the scoring
        of the finished path, so they are left out here (see `scoring_left`)."""
        b = self.budget
        left: dict[str, Any] = {"reserve": 0.0}
        if b.tokens is not None:
            tokens = max(b.reserve_tokens, b.tokens - self.generated_tokens)
            if tokens < 1:
                return None
            left["tokens"] = tokens
        for k in ("flops", "seconds"):
            if getattr(b, k) is not None:
                rest = getattr(b, k) - self.spent(k)
                if rest <= 0:
                    return None
                left[k] = rest
        return Budget(**left)

    def scoring_left(self) -> bool:
        """Whether a scorer call may still start (no scorer-call limit, or below it)."""
        b = self.budget
        return b.scorer_calls is None or self.scorer_calls < b.scorer_calls


# -- per-thread attributes ----------------------------------------------------------------
class ThreadState:
    """What one thread has set of per-thread attributes: values[(id(obj), name)]. It also
    names the thread's searches (an engine frees the KV of its own trees only)."""

    __slots__ = ("values", "__weakref__")

    def __init__(self) -> None:
        self.values: dict[tuple[int, str], Any] = {}


_local = threading.local()


def thread_state() -> ThreadState:
    """The calling thread's state (or, inside `as_thread`, the state it runs under)."""
    state = getattr(_local, "state", None)
    if state is None:
        state = _local.state = ThreadState()
    return state


@contextmanager
def as_thread(state: ThreadState) -> Iterator[None]:
    """Run the block as if on the thread that owns `state` (the engine's scheduler runs each
    search's model work under its caller's state: the caller's meters, the caller's trees)."""
    saved = getattr(_local, "state", None)
    _local.state = state
    try:
        yield
    finally:
        _local.state = saved


class PerThreadMeter:
    """Base class of engines and scorers that several searches share (search.solve_many):
    their `meter` is per thread. Plain assignment sets the meter every thread sees;
    `metered` sets the calling thread's own for a block."""

    @property
    def meter(self) -> Meter:
        value = thread_state().values.get((id(self), "meter"), _UNSET)
        return self.__dict__["_meter"] if value is _UNSET else value

    @meter.setter
    def meter(self, value: Meter) -> None:
        self.__dict__["_meter"] = value


@contextmanager
def _override(part: PerThreadMeter, meter: Meter) -> Iterator[None]:
    values, key = thread_state().values, (id(part), "meter")
    saved = values.get(key, _UNSET)
    values[key] = meter
    try:
        yield
    finally:
        if saved is _UNSET:
            values.pop(key, None)
        else:
            values[key] = saved


_UNSET = object()


def per_thread_meter(part: Any) -> bool:
    """Whether `part.meter` is per thread (safe for several searches at once)."""
    return isinstance(part, PerThreadMeter)


@contextmanager
def metered(meter: Meter, *parts: Any) -> Iterator[Meter]:
    """Point every part's `meter` attribute (engine, scorer) at `meter` for the block: for
    the calling thread only where it is per thread (PerThreadMeter), else for everyone."""
    with ExitStack() as stack:
        for p in parts:
            if p is None or not hasattr(p, "meter"):
                continue
            if isinstance(p, PerThreadMeter):
                stack.enter_context(_override(p, meter))
            else:
                stack.callback(setattr, p, "meter", p.meter)
                p.meter = meter
        yield meter


@contextmanager
def submeter(meter: Meter, budget: Budget, *parts: Any) -> Iterator[Meter]:
    """A fresh meter limited to `budget` (same clock) that the parts charge for the block;
    whatever they spent is then charged to `meter` as well."""
    sub = Meter(budget, clock=meter.clock)
    try:
        with metered(sub, *parts):
            yield sub
    finally:
        meter.charge_model(generated=sub.generated_tokens, prefill=sub.prefill_tokens,
                           flops=sub.flops, passes=sub.forward_passes)
        meter.charge_scorer(calls=sub.scorer_calls, tokens=sub.scorer_tokens)
        meter.charge_server(sub.server)
