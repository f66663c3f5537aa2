"""Algorithms by name. Entries are import paths, so nothing loads until it is used.

Every algorithm has the signature
    fn(problem, engine, scorer, meter, *, seed=0, **keyword-only knobs) -> Result
and lives in search/algos/<name>.py as a function of the same name; adding the file
registers it.
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
