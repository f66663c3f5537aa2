"""Scorers by name, for `search.solve(scorer="...")` and the command line.

Names: steps (arithmetic step checker), oracle (gold-answer verifier),
self_eval (the generator judges its own steps), unit_tests (public tests in the sandbox),
value (the value head saved next to the generator's model); a PRM by folder, embedded name or
Hugging Face id ("prm:./my-prm", "prm:tiny-arith-prm"; search.scoring.parse reads the string)
loads as rewards.prm.HFPRM.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from search.scoring import Scorer, register, register_path_loader
from search.types import Problem


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


def _needs_answer(problem: Problem, model: str) -> None:
    del model
    if problem.answer is None:
        raise ValueError(f"scorer 'oracle' compares with the gold answer, but problem "
                         f"{problem.id!r} has none; give Problem(answer=...) (--answer on "
                         "the command line)")


def _needs_value_head(problem: Problem, model: str) -> None:
    """The value head lives next to an embedded reasoner or a locally saved model."""
    del problem
    from rewards.value_head import HEAD_FILE, TRAIN, head_folder

    folder = head_folder(model)
    if not (folder / HEAD_FILE).is_file():
        raise ValueError(f"scorer 'value' needs a value head saved next to the model, and "
                         f"model {model!r} has none (no {HEAD_FILE} in {folder}); train one "
                         f"with `{TRAIN} --model {model}`")


NEEDS = {"oracle": _needs_answer, "value": _needs_value_head}

# the core's registry (search.scoring.SCORERS; it holds "logprob" itself) gets this
# plug-in's scorers
for _name, _factory in {
    "steps": _make("rewards.verifier", "StepCheckScorer"),
    "oracle": _make("rewards.verifier", "OracleScorer"),
    "self_eval": _make("rewards.self_eval", "SelfEvalScorer", needs_engine=True),
    "unit_tests": _make("rewards.unit_tests", "UnitTestScorer"),
    "value": _make("rewards.value_head", "value_scorer", needs_engine=True),
}.items():
    register(_name, _factory, check=NEEDS.get(_name))
register_path_loader(_prm)
