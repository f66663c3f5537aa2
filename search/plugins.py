"""The one door from the core to its plug-ins, and the one registry type (Registry).

Every kind of thing the core finds by name is one Registry (kind -> name -> entry, an entry
being the object or its "module:attr", imported on first use), each with its built-ins in
one place: algorithms (search.registry.ALGORITHMS: the files of search/algos/), scorers
(search.scoring.SCORERS: the core's logprob), answer readers (search.answers.READERS),
embedded models (search.models.EMBEDDED), engine kinds by prefix
(search.engines.kinds.ENGINE_KINDS), path aggregations (search.aggregate.AGGREGATES), SMC
resampling schemes (search.resample.RESAMPLERS), final selection rules
(search.select.SELECTIONS), the scorers' checks before any load (search.scoring.CHECKS) and
datasets (problems.datasets.DATASETS: the benchmarks). Another distribution adds entries by
entry points in the group "tts_search.<kind>" (algorithms, scorers, answers, models,
engines, aggregates, resamplers, selections, scorer_checks, datasets), with no edit to this
project.

The core (search/) imports no plug-in package; rewards, verifiers and training import the core
and register what they add (scorers in search.scoring, answer extractors in search.answers,
embedded models and their folders in search.models). `load()` imports them, once, the first time a name has to
be resolved ("steps", "tiny-arith", a problem's domain), so `import search` alone loads
nothing more and `search.solve(..., scorer="steps")` still finds everything.

Which modules: DEFAULT (this project's own, the table pyproject.toml declares in the
entry-point group "tts_search.plugins") and every entry point of that group that another
installed distribution declares, so it can add its own; this project's own installed entry
points are not read (DEFAULT is), so a source tree without installed metadata, or with
metadata older than pyproject.toml (a plug-in module since renamed), loads this project's.
"""

from __future__ import annotations

import difflib
import importlib
import re
import threading
from collections.abc import Iterator, Mapping
from importlib import metadata
from typing import Any, Generic, TypeVar

PREFIX = "tts_search."  # entry-point groups: tts_search.<kind> (algorithms, scorers, ...)
GROUP = PREFIX + "plugins"
# plug-in name -> the module whose import registers it (kept equal to pyproject.toml's table)
DEFAULT = {"rewards": "rewards.scorers", "verifiers": "verifiers.domains",
           "training": "training.reasoners"}
DIST = "tts-search"  # this project's distribution, whose installed table DEFAULT stands for

_lock = threading.RLock()  # a plug-in that resolves a name while it loads re-enters
_loaded: dict[str, str] = {}


def entry_modules() -> dict[str, str]:
    """Plug-in name -> module to import: DEFAULT and the entry points other installed
    distributions declare."""
    found = {ep.name: ep.value.partition(":")[0] for ep in metadata.entry_points(group=GROUP)
             if not _ours(ep)}
    return {**DEFAULT, **found}


def _ours(ep: metadata.EntryPoint) -> bool:
    """Whether this project's own distribution declares `ep` (its metadata may be older than
    the source tree that runs)."""
    dist = getattr(ep, "dist", None)
    return dist is not None and re.sub(r"[-_.]+", "-", dist.name).lower() == DIST


def load() -> dict[str, str]:
    """Import every plug-in module (once; thread-safe) and return name -> module loaded."""
    if _loaded:
        return dict(_loaded)
    with _lock:
        if not _loaded:
            modules = entry_modules()
            for name, module in modules.items():
                try:
                    importlib.import_module(module)
                except ImportError as err:
                    raise ImportError(f"the tts-search plug-in {name!r} ({module}) does not "
                                      f"import: {err}") from err
            _loaded.update(modules)
    return dict(_loaded)


# -- one registry type for every kind of thing the core finds by name --------------------------
T = TypeVar("T")
_MISSING: Any = object()  # Registry.get without a default
_REGISTRIES: list[Registry[Any]] = []  # every registry made, for rescan()


def resolve(target: str) -> Any:
    """"package.module:attr.sub" -> that object (the module imported now)."""
    module, sep, attrs = target.partition(":")
    if not sep or not module or not attrs:
        raise ValueError(f"a registry entry is 'module:attribute', got {target!r}")
    found: Any = importlib.import_module(module)
    for attr in attrs.split("."):
        found = getattr(found, attr)
    return found


def _path(entry: object) -> str | None:
    """"module:qualname" of an object entry (what a path entry naming it says)."""
    module, name = getattr(entry, "__module__", None), getattr(entry, "__qualname__", None)
    return f"{module}:{name}" if isinstance(module, str) and isinstance(name, str) else None


class Registry(Generic[T]):
    """One kind of named thing (algorithms, scorers, datasets, engines, ...): name -> entry.

    An entry is the object itself or its import path "module:attr", imported the first time
    the name is used, so registering loads nothing heavy. Three sources, in this order:
      builtins     the core's or the owning package's own, given at construction;
      add()        what this project's plug-ins register when load() imports them;
      entry points the group "tts_search.<kind>" of any installed distribution (name =
                   "module:attr"), so another package adds entries without editing this one.
    A name already known resolves without loading any plug-in (the default path runs with
    none); an unknown one first loads the plug-ins and reads the entry points, then raises
    a ValueError that lists the known names. A name add()ed twice with different entries is
    an error, not a silent override; an entry point cannot replace a name the project holds.
    Locks: load()'s, then a registry's (never the other way), so threads resolving names of
    different kinds at once cannot deadlock."""

    def __init__(self, kind: str, noun: str, builtins: Mapping[str, str | T] | None = None
                 ) -> None:
        self.kind, self.noun, self.group = kind, noun, f"{PREFIX}{kind}"
        self._entries: dict[str, str | T] = dict(builtins or {})
        self._from_metadata: set[str] = set()  # names the entry points added (rescan drops)
        self._complete = False
        self._lock = threading.RLock()
        _REGISTRIES.append(self)

    def add(self, name: str, entry: str | T) -> None:
        """Register `entry` (an object or "module:attr") as `name`."""
        with self._lock:
            old = self._entries.get(name)
            if isinstance(entry, str) and old is not None and _path(old) == entry:
                return  # the object its path names is here already
            if old is not None and old != entry and name not in self._from_metadata and \
                    not (isinstance(old, str) and old == _path(entry)):
                raise ValueError(f"two {self.kind} named {name!r}: {old!r} and {entry!r}")
            self._entries[name] = entry  # an object replaces the path that names it

    def entries(self) -> dict[str, str | T]:
        """Every entry by name (the live table), after loading the plug-ins and reading the
        entry points."""
        if not self._complete:
            load()  # outside this registry's lock: a plug-in's import add()s to it
        with self._lock:
            if not self._complete:
                for ep in metadata.entry_points(group=self.group):
                    if ep.name not in self._entries:
                        self._entries[ep.name] = ep.value
                        self._from_metadata.add(ep.name)
                self._complete = True
        return self._entries

    def names(self) -> list[str]:
        return sorted(self.entries())

    def registered(self) -> list[str]:
        """The names registered so far, loading nothing."""
        return sorted(self._entries)

    def __iter__(self) -> Iterator[str]:
        """The names, sorted (as names(): after loading the plug-ins)."""
        return iter(self.names())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self._entries or name in self.entries())

    def get(self, name: str, default: Any = _MISSING) -> T:
        """The entry `name` (imported on first use); `default` where there is none and one
        is given, else unknown(name)."""
        if name not in self:
            if default is not _MISSING:
                return default
            raise self.unknown(name)
        entry = self._entries[name]
        if isinstance(entry, str):
            try:
                return resolve(entry)
            except (ImportError, AttributeError) as err:
                raise ImportError(f"{self.noun} {name!r} ({entry}) does not load: {err}"
                                  ) from err
        return entry

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def items(self) -> list[tuple[str, T]]:
        """(name, entry) for every name, sorted, each entry imported."""
        return [(name, self.get(name)) for name in self.names()]

    def unknown(self, name: object, also: str = "") -> ValueError:
        """The error for a name nobody registered: the known names, and the close ones."""
        known = self.names()
        close = difflib.get_close_matches(str(name), known, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        return ValueError(f"unknown {self.noun} {name!r}; known: {', '.join(known) or 'none'}"
                          f"{also}{hint}")


def rescan() -> None:
    """Read the entry points again (after a distribution was installed in this process)."""
    for reg in _REGISTRIES:
        with reg._lock:
            for name in reg._from_metadata:
                reg._entries.pop(name, None)
            reg._from_metadata.clear()
            reg._complete = False
