"""Algorithms by name. Entries are import paths, so nothing loads until it is used.

Every algorithm has the signature
    fn(problem, engine, scorer, meter, *, seed=0, **keyword-only knobs) -> Outcome
decorated with search.knobs.rules (the decorated function returns the Result, built once from
the Outcome with every knob's actual value), and lives in search/algos/<name>.py as a function
of the same name; adding the file registers it. Another package adds one without editing this
project: an entry point in the group "tts_search.algorithms", name = "module:function" (see
search.plugins.Registry). Its knobs are checked by search.knobs (names, types, value rules) before any
model loads. Everything else others need of it (its width, what a budget number sets, whether
it consults its scorer, whether the seed can change its result) it declares on its function,
in the same @rules (search.traits), so an algorithm from anywhere carries it.
"""

from __future__ import annotations

import pkgutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from search import knobs as _knobs
from search.fit import Width
from search.plugins import Registry
from search.traits import Traits, traits

ALGO_DIR = Path(__file__).parent / "algos"
# the built-ins: the modules of search/algos/ (files starting with _ are helpers)
ALGORITHMS: Registry[Callable[..., Any]] = Registry("algorithms", "algorithm", {
    m.name: f"search.algos.{m.name}:{m.name}"
    for m in pkgutil.iter_modules([str(ALGO_DIR)]) if not m.name.startswith("_")})


def names() -> list[str]:
    """Every algorithm: the built-ins and the installed packages' entry points."""
    return ALGORITHMS.names()


def get(name: str) -> Callable[..., Any]:
    """The algorithm function registered as `name`."""
    return ALGORITHMS.get(name)


def knob_names(name: str) -> list[str]:
    """The algorithm's knobs (its keyword-only parameters but seed)."""
    return _knobs.names(get(name))


def check_knobs(name: str, knobs: Mapping[str, Any], *, values_too: bool = True
                ) -> dict[str, Any]:
    """Reject knobs the algorithm does not take, values of the wrong type and (values_too)
    values its rules refuse, before any model is loaded; returns every knob's value
    (defaults filled in)."""
    return _knobs.check(get(name), knobs, values_too=values_too)


def upgrade_knobs(name: str, knobs: Mapping[str, Any], *, stacklevel: int = 2
                  ) -> dict[str, Any]:
    """knobs with old names (search.knobs.RENAMED) replaced by their names now, each with a
    DeprecationWarning (stacklevel as warnings.warn's, counted from the caller)."""
    return _knobs.upgrade(get(name), knobs, stacklevel=stacklevel + 1)


def parse_knobs(name: str, texts: Mapping[str, str]) -> dict[str, Any]:
    """Command-line knob texts ({"n": "8", "select": "vote"}) -> checked values."""
    fn = get(name)
    values = {k: _knobs.parse(fn, k, v) for k, v in upgrade_knobs(name, texts).items()}
    _knobs.check(fn, values)
    return values


def declared(name: str) -> Traits:
    """What the algorithm declares (search.traits.Traits)."""
    return traits(get(name))


def deterministic(name: str) -> bool:
    """Whether the algorithm declares that the seed cannot change its result."""
    return declared(name).deterministic


def width(name: str) -> Width | None:
    """The search.fit.Width the algorithm declares: the paths it runs at once from its
    start; None: one path."""
    return declared(name).width


def uses_scorer(name: str, knobs: Mapping[str, Any]) -> bool:
    """Whether `name` run with `knobs` consults its scorer at all (to search or to choose)."""
    return declared(name).uses_scorer(knobs)


def at_width(name: str, n: int, given: Mapping[str, Any]) -> dict[str, Any]:
    """The knobs budget number n sets for `name` (search.traits.Traits.at: its declared
    scale; {} where it has none, or a token scale), the caller's `given` knobs winning for
    companions. ValueError, naming the algorithm, where n or a given knob cannot fit."""
    try:
        return declared(name).at(n, _knobs.defaults(get(name)), given)
    except ValueError as err:
        raise ValueError(f"{name}: {err}") from None


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
