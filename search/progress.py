"""A solve's progress line on a terminal: tokens, candidates so far, best score, seconds.

    search  beam on smollm2-135m · 1,204 tokens · 9 candidates · best 0.871 · 6.3 s

Drawn on stderr only when it is a terminal (never into a pipe, a file or a test's capture),
only once the solve has run `after` seconds, redrawn in place at most every `every` seconds
from the meter's charges, and erased when the solve ends. It reads the search tree and the
meter and writes nothing back, so a result is the same with or without it.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from search.budget import Meter
from search.session import KVScope
from search.types import Node


class Progress:
    """stream: where to draw (default sys.stderr, read when a solve starts); enabled=False
    draws nothing. announce: say "loading MODEL ..." when a solve loads its model even
    where the stream is no terminal (the command line's; default: only on a terminal)."""

    def __init__(self, stream: TextIO | None = None, *, after: float = 3.0,
                 every: float = 0.25, enabled: bool = True, announce: bool = False) -> None:
        self.stream, self.after, self.every, self.enabled = stream, after, every, enabled
        self.announce = announce
        self.searching = False  # set once a solve's search has begun (its loading is done)
        self.drawn = 0  # lines drawn (redraws included), for tests

    @contextmanager
    def loading(self, what: str) -> Iterator[None]:
        """A line for the block that loads `what`: "loading tiny-arith ..." when it starts,
        completed with the seconds it took ("loaded in 2.1 s, not part of the search")."""
        out = self.stream or sys.stderr
        if not self.enabled or not (self.announce or _is_tty(out)):
            yield
            return
        out.write(f"loading {what} ...")
        out.flush()
        start = time.perf_counter()
        try:
            yield
        finally:
            out.write(f" {time.perf_counter() - start:.1f} s (not part of the search)\n")
            out.flush()

    @contextmanager
    def watching(self, meter: Meter, trees: KVScope, label: str) -> Iterator[None]:
        """Draw while the block runs: ticks come from the search's meter; its trees are
        those of its KV scope (Session.kv: the roots its engine makes)."""
        self.searching = True
        out = self.stream or sys.stderr
        if not self.enabled or not _is_tty(out):
            yield
            return
        start, last = time.perf_counter(), -math.inf
        shown = False

        def tick(m: Meter) -> None:
            nonlocal last, shown
            now = time.perf_counter()
            if now - start < self.after or now - last < self.every:
                return
            last, shown = now, True
            out.write("\r" + line(label, m, list(trees.roots), m.seconds) + "\x1b[K")
            out.flush()
            self.drawn += 1

        meter.watchers.append(tick)
        try:
            yield
        finally:
            meter.watchers.remove(tick)
            if shown:
                out.write("\r\x1b[K")  # erase the line: what follows starts clean
                out.flush()


def line(label: str, meter: Meter, roots: list[Node], seconds: float) -> str:
    """The progress line: tokens generated, finished paths (candidates) in the trees so far,
    the best score among them (of any scored partial path while none is scored), seconds
    (the search's, as its meter counts them: usage.seconds)."""
    nodes = [n for root in roots for n in root.walk()]
    finished = [n for n in nodes if n.finished]
    best = "best -"
    for pool, what in ((nodes, "best partial"), (finished, "best")):  # finished ones win
        scores = [r for n in pool if (r := n.scores.reward) is not None and math.isfinite(r)]
        best = f"{what} {max(scores):.4g}" if scores else best
    return (f"search  {label} · {meter.generated_tokens:,} tokens · {len(finished)} "
            f"candidates · {best} · {seconds:.1f} s")


def _is_tty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or not a file
        return False

