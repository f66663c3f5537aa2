"""Scorers by name, for `search.solve(scorer="...")` and the command line.

Names: logprob (free), steps (arithmetic step checker), oracle (gold-answer verifier),
self_eval (the generator judges its own steps), unit_tests (public tests in the sandbox),
value (the value head saved next to the generator's model); anything else is loaded as an HF PRM from a
local path or Hugging Face id (prefix "prm:" to be explicit, e.g. "prm:./my-prm").
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from search.scoring import SCORERS, Scorer, load, register, register_path_loader

__all__ = ["SCORERS", "load"]


def _make(module: str, cls: str, *, needs_engine: bool = False) -> Callable[..., Scorer]:
    def make(engine: Any = None) -> Scorer:
        factory = getattr(importlib.import_module(module), cls)
        if needs_engine:
            if engine is None:
                raise ValueError(f"scorer {cls} needs the generator engine")
            return factory(engine)
        return factory()

    return make


def _prm(path: str) -> Scorer:
    from rewards.prm import HFPRM

    return HFPRM.load(path)


# the core's registry (search.scoring.SCORERS, the same dict) gets this plug-in's scorers
for _name, _factory in {
    "logprob": _make("rewards.logprob", "LogprobScorer"),
    "steps": _make("rewards.verifier", "StepCheckScorer"),
    "oracle": _make("rewards.verifier", "OracleScorer"),
    "self_eval": _make("rewards.self_eval", "SelfEvalScorer", needs_engine=True),
    "unit_tests": _make("rewards.unit_tests", "UnitTestScorer"),
    "value": _make("rewards.value_head", "value_scorer", needs_engine=True),
}.items():
    register(_name, _factory)
register_path_loader(_prm)
