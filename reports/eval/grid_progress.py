"""The progress bar of one eval grid: runs done, runs in flight, generated tokens/s, accuracy.

    eval arith (0/192 done before):  41%|████      | 78/192 [00:09<00:13, 8.4run/s]
        16 in flight, 2,310 tok/s, acc 51/78 = 0.654

Thread-safe: `started` and `stopped` are called around each run (from the threads running
the searches with reports.eval --concurrency), `finished` as its row is written. The runs
made here are watched as they go (`watch()`: a search.progress.Progress for search.solve that
reads the run's meter), so the tokens and tokens/s move while runs are in flight, redrawn at
most every `every` seconds; rows from elsewhere (Ray workers) add their tokens as they come.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from search.budget import Meter
from search.progress import Progress
from search.session import KVScope


class GridProgress:
    """tqdm over the pending runs of a grid (quiet: nothing printed, counts still kept)."""

    def __init__(self, *, pending: int, total: int, desc: str, prior_right: int = 0,
                 prior_seen: int = 0, quiet: bool = False, extra: str = "",
                 every: float = 0.5) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=pending, disable=quiet, file=sys.stderr, unit="run",
                        dynamic_ncols=True, desc=f"{desc} ({total - pending}/{total} done before)")
        self.right, self.seen = prior_right, prior_seen
        self.in_flight = 0
        self.tokens = 0
        self.extra = extra
        self._lock = threading.Lock()
        self._t0 = time.perf_counter()
        self.every, self._drawn = every, -math.inf
        self.watched = False  # runs report their tokens as they go (watch)

    def __enter__(self) -> GridProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.close()

    def started(self) -> None:
        with self._lock:
            self.in_flight += 1

    def stopped(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def finished(self, row: Mapping[str, Any]) -> None:
        """One row written."""
        with self._lock:
            self.right += bool(row["correct"])
            self.seen += 1
            if not self.watched:
                self.tokens += int((row.get("usage") or {}).get("generated_tokens") or 0)
            self.bar.set_postfix_str(self.status(), refresh=False)
            self.bar.update(1)

    def generated(self, tokens: int) -> None:
        """A run in flight generated `tokens` more; redraws at most every `every` s."""
        with self._lock:
            self.tokens += tokens
            now = time.perf_counter()
            if now - self._drawn >= self.every:
                self._drawn = now
                self.bar.set_postfix_str(self.status())  # refreshes the line

    def watch(self) -> Progress:
        """What search.solve(progress=...) takes to report a run's tokens here as it goes."""
        self.watched = True
        return _Watch(self)

    def status(self) -> str:
        rate = self.tokens / max(time.perf_counter() - self._t0, 1e-9)
        acc = f"acc {self.right}/{self.seen} = {self.right / self.seen:.3f}" if self.seen else ""
        return ", ".join(x for x in (f"{self.in_flight} in flight", f"{rate:,.0f} tok/s", acc,
                                     self.extra) if x)


class _Watch(Progress):
    """A run's meter, read into the grid's bar after every charge (draws nothing itself)."""

    def __init__(self, grid: GridProgress) -> None:
        super().__init__(enabled=False)
        self.grid = grid

    @contextmanager
    def watching(self, meter: Meter, trees: KVScope, label: str) -> Iterator[None]:
        del trees, label
        seen = meter.generated_tokens

        def tick(m: Meter) -> None:  # called from the search's thread or the engine's owner
            nonlocal seen
            now = m.generated_tokens
            if now != seen:
                self.grid.generated(now - seen)
                seen = now

        meter.watchers.append(tick)
        try:
            yield
        finally:
            meter.watchers.remove(tick)
