"""The meter: one mutable account per solve, charged by the engine and by scorers.

Algorithms ask `meter.exhausted()` before each expansion batch, so a run overshoots its
budget by at most the batch that was already under way when the limit was crossed.

Several searches may share one engine and scorer, each in its own thread (search.solve_many):
their `meter` is then a `PerThread` attribute, which `metered` sets for the calling thread
only, and the engine's scheduler runs a search's model work under that search's thread state
(`as_thread`), so each Meter is charged exactly what its own search cost.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
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

    # -- charging ----------------------------------------------------------------------
    def charge_model(self, *, generated: int = 0, prefill: int = 0, processed: int = 0,
                     flops: float = 0.0, passes: int = 1) -> None:
        """One engine forward batch: `processed` tokens went through the model."""
        self.generated_tokens += generated
        self.prefill_tokens += prefill
        self.forward_passes += passes
        self.flops += flops
        del processed  # folded into flops; kept as a named argument for readable call sites

    def charge_scorer(self, *, calls: int, tokens: int = 0, flops: float = 0.0) -> None:
        self.scorer_calls += calls
        self.scorer_tokens += tokens
        self.flops += flops

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


# -- per-thread attributes ----------------------------------------------------------------
class ThreadState:
    """What one thread has set of PerThread attributes: values[(id(obj), name)]. It also
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


class PerThread:
    """A class attribute (`meter = PerThread()`) whose value a thread may override for itself:
    plain assignment sets the value every thread sees; `override` (what `metered` uses) sets
    the calling thread's own for a block."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        value = thread_state().values.get((id(obj), self.name), _UNSET)
        if value is not _UNSET:
            return value
        try:
            return obj.__dict__[self.name]
        except KeyError:
            raise AttributeError(self.name) from None

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__[self.name] = value

    @contextmanager
    def override(self, obj: Any, value: Any) -> Iterator[None]:
        values, key = thread_state().values, (id(obj), self.name)
        saved = values.get(key, _UNSET)
        values[key] = value
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
    return isinstance(getattr(type(part), "meter", None), PerThread)


@contextmanager
def metered(meter: Meter, *parts: Any) -> Iterator[Meter]:
    """Point every part's `meter` attribute (engine, scorer) at `meter` for the block: for
    the calling thread only where the attribute is PerThread, else for everyone."""
    with ExitStack() as stack:
        for p in parts:
            if p is None or not hasattr(p, "meter"):
                continue
            slot = getattr(type(p), "meter", None)
            if isinstance(slot, PerThread):
                stack.enter_context(slot.override(p, meter))
            else:
                stack.callback(setattr, p, "meter", p.meter)
                p.meter = meter
        yield meter
