"""`search.solve`: one problem, one algorithm, one budget -> a Result with its true cost."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from search import registry
from search.budget import Meter, metered
from search.engines.base import Engine
from search.types import Budget, Problem, Result

if TYPE_CHECKING:  # rewards imports search; a runtime import here would be circular
    from rewards.base import Scorer

DEFAULT_MODEL = "smollm2-135m"
_ENGINES: dict[str, Engine] = {}  # loaded models stay in memory between calls


def default_model() -> str:
    """The model `solve` uses when none is given: $TTS_MODEL, else the embedded default."""
    return os.environ.get("TTS_MODEL") or DEFAULT_MODEL


def get_engine(engine: Engine | str | None = None, **kwargs: Any) -> Engine:
    """An engine instance, or one loaded by model name/path (cached per name)."""
    if engine is not None and not isinstance(engine, str):
        return engine
    name = engine or default_model()
    if name not in _ENGINES or kwargs:
        loaded = _load_engine(name, **kwargs)
        if kwargs:
            return loaded
        _ENGINES[name] = loaded
    return _ENGINES[name]


def _load_engine(name: str, **kwargs: Any) -> Engine:
    """openai:URL#MODEL (an OpenAI-compatible server), vllm:MODEL (offline vLLM on a GPU),
    else a transformers model by embedded name, path or Hugging Face id."""
    if name.startswith("openai:"):
        from search.engines.openai import OpenAIEngine

        return OpenAIEngine.from_spec(name, **kwargs)
    if name.startswith("vllm:"):
        from search.engines.vllm import VLLMEngine

        return VLLMEngine.load(name[len("vllm:"):], **kwargs)
    from search.engines.hf import HFEngine

    return HFEngine.load(name, **kwargs)


def default_scorer(algo: str, problem: Problem) -> str:
    """The scorer `solve` uses when none is given: for pgtd, the public-test pass rate of a
    code problem's programs (as PG-TD scores its rollouts); otherwise the free
    log-probability scorer."""
    if algo == "pgtd":
        if problem.domain == "code" and problem.tests:
            return "unit_tests"
        why = "has no public tests" if problem.domain == "code" else "is not a code problem"
        raise ValueError(f"pgtd scores programs by a code problem's public tests, but problem "
                         f"{problem.id!r} {why}; give it public tests (and domain='code') or "
                         f"pass a scorer")
    return "logprob"


def get_scorer(scorer: Scorer | str | None, engine: Engine, *, implicit: bool = False
               ) -> Scorer:
    """A scorer by name (None: the free logprob scorer), or the one given. implicit: the
    caller named none (rewards.base.implicit), so a search that can do without one does."""
    from rewards.registry import load

    sc: Any = load(scorer or "logprob", engine=engine) \
        if scorer is None or isinstance(scorer, str) else scorer
    if implicit:
        sc.implicit = True  # the Scorer protocol's optional mark (rewards.base.implicit)
    return sc


def solve(problem: Problem | str, algo: str = "best_of_n", budget: Budget | None = None, *,
          engine: Engine | str | None = None, scorer: Scorer | str | None = None, seed: int = 0,
          **knobs: Any) -> Result:
    """Search for an answer to `problem` with algorithm `algo` within `budget`.

    engine: an Engine, a model name/path, or None for the default model.
    scorer: a Scorer, a scorer name, or None for `default_scorer(algo, problem)`: the free
        log-probability scorer, or for pgtd the public tests ("unit_tests") of a code problem.
        A named scorer is always used: a search that would not consult it is refused
        (registry.check_scorer); with none named, best_of_n votes (see its docs).
    knobs: the algorithm's keyword-only parameters (see `search.registry.get(algo)`).
    Result.selected_by says what chose the answer.
    """
    problem = Problem.of(problem)
    registry.check_knobs(algo, knobs)  # fail fast on a typo, before loading any model
    named = scorer is not None
    registry.check_scorer(algo, knobs, named=named)
    if budget is not None and not isinstance(budget, Budget):
        raise TypeError(f"budget must be a search.Budget, got {type(budget).__name__}")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {seed!r}")
    if scorer is None:  # also before any model loads: pgtd without tests fails here
        scorer = default_scorer(algo, problem)
    fn = registry.get(algo)
    eng = get_engine(engine)
    sc = get_scorer(scorer, eng, implicit=not named)
    meter = Meter(budget)
    try:
        with metered(meter, eng, sc):
            return fn(problem, eng, sc, meter, seed=seed, **knobs)
    finally:
        eng.retain([])  # the tree stays in the Result; its KV cache is freed
