"""Algorithms by name. Entries are import paths, so nothing loads until it is used.

Every algorithm has the signature
    fn(problem, engine, scorer, meter, *, seed=0, **keyword-only knobs) -> Result
and lives in search/algos/<name>.py as a function of the same name; adding the file
registers it. Its knobs are checked by search.knobs (names, types, value rules) before any
model loads. A module that sets DETERMINISTIC = True declares that its result never depends
on the seed (the eval runner then runs it once and reuses the row for every seed).
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from search import knobs as _knobs

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


def knob_names(name: str) -> list[str]:
    """The algorithm's knobs (its keyword-only parameters but seed)."""
    return _knobs.names(get(name))


def check_knobs(name: str, knobs: Mapping[str, Any], *, values_too: bool = True
                ) -> dict[str, Any]:
    """Reject knobs the algorithm does not take, values of the wrong type and (values_too)
    values its rules refuse, before any model is loaded; returns every knob's value
    (defaults filled in)."""
    return _knobs.check(get(name), knobs, values_too=values_too)


def parse_knobs(name: str, texts: Mapping[str, str]) -> dict[str, Any]:
    """Command-line knob texts ({"n": "8", "select": "vote"}) -> checked values."""
    fn = get(name)
    values = {k: _knobs.parse(fn, k, v) for k, v in texts.items()}
    _knobs.check(fn, values)
    return values


def deterministic(name: str) -> bool:
    """Whether the algorithm declares (DETERMINISTIC = True) that the seed cannot change its
    result."""
    get(name)
    return bool(getattr(sys.modules[f"search.algos.{name}"], "DETERMINISTIC", False))
