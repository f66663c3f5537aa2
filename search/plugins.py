"""The one door from the core to its plug-ins.

The core (search/) imports no plug-in package; rewards, verifiers and problems import the core
and register what they add (scorers in search.scoring, answer extractors in search.answers,
embedded models in search.models). `load()` imports them, once, the first time a name has to
be resolved ("steps", "tiny-arith", a problem's domain), so `import search` alone loads
nothing more and `search.solve(..., scorer="steps")` still finds everything.

Which modules: DEFAULT (this project's own, the table pyproject.toml declares in the
entry-point group "tts_search.plugins") and every installed entry point of that group, so
another distribution can add its own, and a source tree without installed metadata, or with
metadata older than pyproject.toml, still loads this project's.
"""

from __future__ import annotations

import importlib
import threading
from importlib import metadata

GROUP = "tts_search.plugins"
# plug-in name -> the module whose import registers it (kept equal to pyproject.toml's table)
DEFAULT = {"rewards": "rewards.registry", "verifiers": "verifiers.answers",
           "problems": "problems.reasoners"}

_lock = threading.RLock()  # a plug-in that resolves a name while it loads re-enters
_loaded: dict[str, str] = {}


def entry_modules() -> dict[str, str]:
    """Plug-in name -> module to import: DEFAULT and the installed entry points."""
    found = {ep.name: ep.value.partition(":")[0] for ep in metadata.entry_points(group=GROUP)}
    return {**DEFAULT, **found}


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
