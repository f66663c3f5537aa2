"""Algorithms by name. Entries are import paths, so nothing loads until it is used.

Every algorithm has the signature
    fn(problem, engine, scorer, meter, *, seed=0, **keyword-only knobs) -> Result
and lives in search/algos/<name>.py as a function of the same name; adding the file
registers it. A module whose algorithm may not consult its scorer says so with
`uses_scorer(knobs) -> bool` beside it (default: it always does).
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import pkgutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

ALGO_DIR = Path(__file__).parent / "algos"


def names() -> list[str]:
    """Every algorithm: the modules of search/algos/ (files starting with _ are helpers)."""
    return sorted(m.name for m in pkgutil.iter_modules([str(ALGO_DIR)])
                  if not m.name.startswith("_"))


def _did_you_mean(word: str, options: list[str]) -> str:
    close = difflib.get_close_matches(word, options, n=3, cutoff=0.5)
    return f"; did you mean {', '.join(map(repr, close))}?" if close else ""


def get(name: str) -> Callable[..., Any]:
    """The algorithm function registered as `name`."""
    if not isinstance(name, str) or name not in names():
        raise ValueError(f"unknown algorithm {name!r}; known: {', '.join(names())}"
                         f"{_did_you_mean(str(name), names())}")
    return getattr(importlib.import_module(f"search.algos.{name}"), name)


def check_knobs(name: str, knobs: Mapping[str, Any]) -> None:
    """Reject knobs the algorithm does not take, before any model is loaded."""
    params = inspect.signature(get(name)).parameters
    allowed = [p for p, v in params.items() if v.kind is inspect.Parameter.KEYWORD_ONLY]
    for knob in knobs:
        if knob not in allowed:
            raise TypeError(f"{name}() has no knob {knob!r}{_did_you_mean(knob, allowed)}; "
                            f"its knobs: {', '.join(allowed)}")


def uses_scorer(name: str, knobs: Mapping[str, Any]) -> bool:
    """Whether `name` run with `knobs` consults its scorer at all (to search or to choose)."""
    get(name)
    decide = getattr(importlib.import_module(f"search.algos.{name}"), "uses_scorer", None)
    return True if decide is None else bool(decide(knobs))


def check_scorer(name: str, knobs: Mapping[str, Any], *, named: bool) -> None:
    """A scorer the caller names must be used: refuse one that `name` with these knobs would
    never consult (greedy, rpc, first_finish, token-level diverse_beam, best_of_n with
    select="vote"), before any model is loaded, rather than label its result with it."""
    if named and not uses_scorer(name, knobs):
        setting = f" with {dict(knobs)}" if knobs else ""
        raise ValueError(f"{name}{setting} never consults a scorer, so the one named would "
                         "be ignored: drop the scorer, or choose a search (or "
                         "knobs, e.g. best_of_n's select='score' or 'weighted_vote') that uses "
                         "it")
