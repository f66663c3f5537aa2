"""Scorers by name, for `search.solve(scorer="...")` and the command line."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

from rewards.base import Scorer


def _logprob(engine: Any = None) -> Scorer:
    from rewards.logprob import LogprobScorer

    del engine
    return LogprobScorer()


SCORERS: dict[str, Callable[..., Scorer]] = {"logprob": _logprob}


def load(name: str, *, engine: Any = None) -> Scorer:
    """A scorer by registry name; `engine` is passed to scorers that reuse the generator."""
    if name not in SCORERS:
        close = difflib.get_close_matches(name, SCORERS, n=3)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        raise ValueError(f"unknown scorer {name!r}; known: {', '.join(sorted(SCORERS))}{hint}")
    return SCORERS[name](engine=engine)
