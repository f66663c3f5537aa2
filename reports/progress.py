"""The progress bar of one eval grid: runs done, runs in flight, generated tokens/s, accuracy.

    eval arith (0/192 done before):  41%|████      | 78/192 [00:09<00:13, 8.4run/s]
        16 in flight, 2,310 tok/s, acc 51/78 = 0.654

Thread-safe: `started` and `stopped` are called around each run (from the threads running
the searches with reports.eval --concurrency), `finished` as its row is written. Tokens/s counts the generated
tokens of the runs finished so far over the wall time since the bar opened.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Mapping
from typing import Any


class GridProgress:
    """tqdm over the pending runs of a grid (quiet: nothing printed, counts still kept)."""

    def __init__(self, *, pending: int, total: int, desc: str, prior_right: int = 0,
                 prior_seen: int = 0, quiet: bool = False, extra: str = "") -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=pending, disable=quiet, file=sys.stderr, unit="run",
                        dynamic_ncols=True, desc=f"{desc} ({total - pending}/{total} done before)")
        self.right, self.seen = prior_right, prior_seen
        self.in_flight = 0
        self.tokens = 0
        self.extra = extra
        self._lock = threading.Lock()
        self._t0 = time.perf_counter()

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
            self.tokens += int((row.get("usage") or {}).get("generated_tokens") or 0)
            self.bar.set_postfix_str(self.status(), refresh=False)
            self.bar.update(1)

    def status(self) -> str:
        rate = self.tokens / max(time.perf_counter() - self._t0, 1e-9)
        acc = f"acc {self.right}/{self.seen} = {self.right / self.seen:.3f}" if self.seen else ""
        return ", ".join(x for x in (f"{self.in_flight} in flight", f"{rate:,.0f} tok/s", acc,
                                     self.extra) if x)
