"""The meter: one mutable account per solve, charged by the engine and by scorers.

Limits are hard: no Usage exceeds its Budget in tokens, scorer calls or FLOPs. Algorithms
ask `meter.exhausted()` before each expansion batch; the work already under way then meets
the limits inside the engine and the scorer loop: a decoding loop keeps a token only while
one is left (`token_room`: the batch in flight stops at the limit itself, token by token),
a forward runs only if its FLOPs fit and the seconds are not up (`refuse_forward`), and
search.scoring.score_nodes scores only as many nodes as calls are left (`scorer_room`).
Where a limit cut work short, `cut` names it (Result.status is then "budget_exhausted").
Seconds are checked before each forward and each scorer call, so they overshoot by at most
one forward pass or one scorer call.

A search stops at its budget's stopping points, (1 - reserve) of each limit (Budget.reserve);
the rest is held back for finishing the best partial path when nothing finished
(search.algos: Run.finish), which runs on a sub-meter (`submeter`) whose budget
`Meter.reserve_budget` gives: the reserved tokens (each step capped at what is left of
them), and the other limits up to the limits themselves. `reached()` is the plain question
"is any limit itself reached?".

Each search has its own Meter, carried by its search.session.Session to the engine and
scorer it uses (their views, `part.bind(session)`), so several searches sharing one engine
and scorer are each charged exactly what their own search cost.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from search.types import Budget, Usage

Clock = Callable[[], float]


class BudgetReached(Exception):
    """A limit leaves no room for the model work about to start (a prefill's FLOPs, the
    seconds): raised by the engines' and model scorers' forwards before they run, caught
    where the call can end short (an expand then returns steps cut at the budget)."""


class Meter:
    """Counts what a run spends and says when its Budget is reached.

    clock: where seconds come from (time.perf_counter; tests pass a scripted clock).
    """

    def __init__(self, budget: Budget | None = None, *, clock: Clock = time.perf_counter,
                 stop: threading.Event | None = None) -> None:
        self.budget = budget or Budget()
        # once set, work ends as at a limit (the search's answer so far; cut "interrupted")
        self.stop = stop
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
        self.cut: str | None = None  # the first limit that cut work short (see `refuse`)
        # what the parts the search uses say about how they ran, for Result.stats (a code
        # scorer's sandbox: {"sandbox": {"isolation": "bwrap,seccomp,rlimits", "gaps": []}})
        self.notes: dict[str, Any] = {}

    def _charged(self) -> None:
        for watch in self.watchers:
            watch(self)

    # -- charging ----------------------------------------------------------------------
    def charge_model(self, *, generated: int = 0, prefill: int = 0, flops: float = 0.0,
                     passes: int = 1) -> None:
        """One engine forward batch: its tokens generated and prefilled, its FLOPs (what went
        through the model) and its passes."""
        self.generated_tokens += generated
        self.prefill_tokens += prefill
        self.forward_passes += passes
        self.flops += flops
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
        ((1 - reserve) of it; see Budget.reserve), or a limit already cut work short."""
        return self.cut is not None or self.stopped() or \
            any(self.spent(k) >= self.stop_at(k) for k in self.budget.limits())

    def stopped_by(self) -> str | None:
        """The limit that ended the search: the one that cut work short, else the first
        whose stopping point is reached (None while none is)."""
        return self.cut or next((k for k in self.budget.limits()
                                 if self.spent(k) >= self.stop_at(k)), None)

    def reached(self) -> bool:
        """True once any limit itself is reached (or cut work short)."""
        return self.cut is not None or \
            any(self.spent(k) >= v for k, v in self.budget.limits().items())

    def tokens_left(self) -> int | None:
        if self.budget.tokens is None:
            return None
        return max(0, self.budget.tokens - self.generated_tokens)

    def reserve_budget(self) -> Budget | None:
        """The budget for finishing a partial path once the search has stopped: what is left
        of every limit (the reserved tokens, or fewer where the search's last batch went past
        its stopping point). None when nothing can be spent (a limit other than scorer calls
        is used up, or no token is left to generate). Scorer calls that are used up only
        stop the scoring of the finished path, so they are then left out (see
        `scoring_left`)."""
        if self.stopped():
            return None  # an interrupted search finishes nothing more
        b = self.budget
        left: dict[str, Any] = {"reserve": 0.0}
        for k in ("tokens", "flops", "seconds", "scorer_calls"):
            if getattr(b, k) is None:
                continue
            rest = getattr(b, k) - self.spent(k)
            if rest <= 0 and k != "scorer_calls":
                return None
            if rest > 0:
                left[k] = rest
        return Budget(**left)

    # -- hard limits: what work may still start ---------------------------------------------
    def refuse(self, limit: str) -> None:
        """Record that `limit` cut work short (the first such limit stays)."""
        if self.cut is None:
            self.cut = limit

    def refuse_overtime(self) -> bool:
        """Refuse work once the seconds limit is reached or the stop event is set, recording
        the cut ("seconds", or "interrupted"); True when refused."""
        if self.stopped():
            return True
        up = self.budget.seconds is not None and self.seconds >= self.budget.seconds
        if up:
            self.refuse("seconds")
        return up

    def stopped(self) -> bool:
        """True once the stop event is set (recorded as the cut "interrupted")."""
        if self.stop is not None and self.stop.is_set():
            self.refuse("interrupted")
            return True
        return False

    def token_room(self, want: int) -> int:
        """How many of `want` tokens may still be generated: all, or the tokens left (0 once
        the seconds are up). Fewer than `want` records the cut."""
        if self.refuse_overtime():
            return 0
        left = self.tokens_left()
        if left is not None and left < want:
            self.refuse("tokens")
            return left
        return want

    def refuse_forward(self, flops: float) -> bool:
        """Refuse a forward costing `flops` that may not start: it would pass the FLOPs
        limit, or the seconds are up (recording the cut); True when refused."""
        if self.refuse_overtime():
            return True
        if self.budget.flops is not None and self.flops + flops > self.budget.flops:
            self.refuse("flops")
            return True
        return False

    def scorer_room(self, want: int) -> int:
        """How many of `want` nodes may still be scored: all, or the scorer calls left (0
        once the seconds are up or the FLOPs are over). Fewer than `want` records the cut."""
        if want and self.refuse_forward(0.0):
            return 0
        b = self.budget
        if b.scorer_calls is not None and self.scorer_calls + want > b.scorer_calls:
            self.refuse("scorer_calls")
            return max(0, b.scorer_calls - self.scorer_calls)
        return want

    def scoring_left(self) -> bool:
        """Whether a scorer call may still start (no scorer-call limit, or below it)."""
        b = self.budget
        return b.scorer_calls is None or self.scorer_calls < b.scorer_calls


@contextmanager
def submeter(meter: Meter, budget: Budget) -> Iterator[Meter]:
    """A fresh meter limited to `budget` (same clock) for the block (the engine and scorer
    charge it through their views, search.session.Session.within); whatever was charged to it is
    then charged to `meter` as well."""
    sub = Meter(budget, clock=meter.clock, stop=meter.stop)
    try:
        yield sub
    finally:
        meter.charge_model(generated=sub.generated_tokens, prefill=sub.prefill_tokens,
                           flops=sub.flops, passes=sub.forward_passes)
        meter.charge_scorer(calls=sub.scorer_calls, tokens=sub.scorer_tokens)
        meter.charge_server(sub.server)
        meter.notes.update(sub.notes)
        if sub.cut is not None:
            meter.refuse(sub.cut)
