"""Scorers by name, for `search.solve(scorer="...")` and the command line.

Names: logprob (free), steps (arithmetic step checker), oracle (gold-answer verifier),
self_eval (the generator judges its own steps), unit_tests (public tests in the sandbox),
value (the value head saved next to the generator's model); anything else is loaded as an HF PRM from a
local path or Hugging Face id (prefix "prm:" to be explicit, e.g. "prm:./my-prm").
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from typing import Any

from rewards.base import Scorer


def _make(module: str, cls: str, *, needs_engine: bool = False) -> Callable[..., Scorer]:
    def make(engine: Any = None) -> Scorer:
        factory = getattr(importlib.import_module(module), cls)
        if needs_engine:
            if engine is None:
                raise ValueError(f"scorer {cls} needs the generator engine")
            return factory(engine)
        return factory()

    return make


SCORERS: dict[str, Callable[..., Scorer]] = {
    "logprob": _make("rewards.logprob", "LogprobScorer"),
    "steps": _make("rewards.verifier", "StepCheckScorer"),
    "oracle": _make("rewards.verifier", "OracleScorer"),
    "self_eval": _make("rewards.self_eval", "SelfEvalScorer", needs_engine=True),
    "unit_tests": _make("rewards.unit_tests", "UnitTestScorer"),
    "value": _make("rewards.value_head", "value_scorer", needs_engine=True),
}


def load(name: str, *, engine: Any = None) -> Scorer:
    """A scorer by registry name or PRM path/id; `engine` goes to scorers that reuse it.
    The scorer is named by its registry name (Result.selected_by and eval rows say it)."""
    if name in SCORERS:
        scorer: Any = SCORERS[name](engine=engine)
        scorer.name = name  # the Scorer protocol's optional name
        return scorer
    path = name.removeprefix("prm:")
    if name.startswith("prm:") or "/" in path:
        from rewards.prm import HFPRM

        return HFPRM.load(path)
    close = difflib.get_close_matches(name, SCORERS, n=3)
    hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
    raise ValueError(f"unknown scorer {name!r}; known: {', '.join(sorted(SCORERS))}, or a PRM "
                     f"path{hint}")
