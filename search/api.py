"""`search.solve`: one problem, one algorithm, one budget -> a Result with its true cost.
(Many of them at once on one engine: search.many.)"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from typing import Any

from search import fit, registry, scoring
from search.engines.base import Engine
from search.engines.kinds import kind_of
from search.knobs import Labels, run
from search.logprob import LogprobScorer
from search.progress import Progress
from search.scoring import Scorer
from search.session import Session, bind
from search.types import Budget, Problem, Result

DEFAULT_MODEL = "smollm2-135m"
_ENGINES: dict[str, Engine] = {}  # loaded models stay in memory between calls
_LOADS: dict[str, threading.Lock] = {}  # one per model name: its one load, the others wait
_LOADS_LOCK = threading.Lock()
_PRMS: dict[str, Scorer] = {}  # PRMs named by string stay loaded too, by their canonical spec


def default_model() -> str:
    """The model `solve` uses when none is given: $TTS_MODEL, else the embedded default."""
    return os.environ.get("TTS_MODEL") or DEFAULT_MODEL


def get_engine(engine: Engine | str | None = None, **kwargs: Any) -> Engine:
    """An engine instance, or one loaded by model name/path (cached per name)."""
    if engine is not None and not isinstance(engine, str):
        return engine
    name = engine or default_model()
    if kwargs:  # options make an engine of its own, never cached
        return _load_engine(name, **kwargs)
    with _LOADS_LOCK:
        lock = _LOADS.setdefault(name, threading.Lock())
    with lock:  # threads asking for the same model at once: one loads it, the others wait
        if name not in _ENGINES:
            _ENGINES[name] = _load_engine(name)
    return _ENGINES[name]


def _load_once(table: dict[str, Any], name: str, load: Any) -> Any:
    """table[name], made by load() on first need: threads asking for the same name at once
    wait for its one load (a lock per name); other names load meanwhile."""
    with _LOADS_LOCK:
        lock = _LOADS.setdefault(name, threading.Lock())
    with lock:
        if name not in table:
            table[name] = load()
    return table[name]


def _load_prm(scorer: str, engine: Engine) -> Scorer:
    from search.models import LOADING

    with LOADING:  # a PRM loads through transformers: one load at a time (search.models)
        return scoring.load(scorer, engine=engine)


def _load_engine(name: str, **kwargs: Any) -> Engine:
    """The engine `name` names, loaded by its kind (search.engines.kinds: openai:URL#MODEL,
    vllm:MODEL, a package's own prefix, else a transformers model)."""
    return kind_of(name).load(name, **kwargs)


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
    caller named none, so solve supplies the logprob scorer built marked so
    (search.scoring.implicit) and a search that can do without one does; any other scorer
    is used as it is (nothing is set on it)."""
    if implicit and scorer in (None, "logprob"):
        return LogprobScorer(implicit=True)
    if scorer is not None and not isinstance(scorer, str):
        return scorer
    from search.models import LOADING

    spec = scoring.parse(scorer or "logprob")
    if spec.prm is not None:  # a model: loaded once per process, like an engine
        return _load_once(_PRMS, scoring.prm_spec(spec.prm, format=spec.format,
                                                  trust_remote_code=spec.trust_remote_code),
                          functools.partial(_load_prm, str(scorer), engine))
    with LOADING:  # a PRM loads through transformers: one load at a time (search.models)
        made = scoring.load(scorer or "logprob", engine=engine)
    if not getattr(made, "name", "") and scorer in scoring.known():
        # a scorer the factory made for this run, without a name of its own: records and
        # Result.selected_by call it by the name it is registered under, not its class
        with contextlib.suppress(AttributeError, TypeError):
            made.name = scorer  # type: ignore[attr-defined]
    return made


# -- checks that load nothing ---------------------------------------------------------------------
def check_engine(engine: Engine | str | None) -> str:
    """The engine's name, after checking (without loading) that it can load here, by its
    kind (search.engines.kinds): an openai:URL#MODEL spec that parses, vllm: with vLLM
    installed, an embedded model that is fetched, an existing model folder, a hub id (see
    search.models.check_model)."""
    if engine is None:
        engine = default_model()
    if not isinstance(engine, str):
        if not all(callable(getattr(engine, m, None)) for m in ("root", "expand")):
            raise TypeError(f"engine must be an Engine, a model name or None, got "
                            f"{type(engine).__name__}")
        return str(getattr(engine, "name", "") or type(engine).__name__)
    if engine not in _ENGINES:
        kind_of(engine).check(engine)
    return engine


def check_scorer(scorer: Scorer | str | None, problem: Problem | None = None,
                 model: str | None = None) -> str:
    """The scorer's name, after checking (without loading) that a name is a registered
    scorer or a PRM folder/hub id that can load here; with the problem and the model's name,
    also that a registered scorer can work on them (scoring.CHECKS: the oracle's gold
    answer, the value head next to the model)."""
    if scorer is None:
        return "logprob"
    if not isinstance(scorer, str):
        if not callable(getattr(scorer, "score", None)):
            raise TypeError(f"scorer must be a Scorer, a scorer name or None, got "
                            f"{type(scorer).__name__}")
        return str(getattr(scorer, "name", "") or type(scorer).__name__)
    spec = scoring.parse(scorer)  # an unknown name: "unknown scorer ... did you mean"
    if spec.prm is not None:
        from search.models import check_model

        check_model(spec.prm)
        scoring.check_prm(spec)
        return scorer
    check = scoring.CHECKS.get(scorer, None)
    if check is not None and problem is not None and model is not None:
        check(problem, model)
    return scorer


def solve(problem: Problem | str, algo: str = "best_of_n", budget: Budget | None = None, *,
          engine: Engine | str | None = None, scorer: Scorer | str | None = None, seed: int = 0,
          progress: bool | Progress = True, cancel: threading.Event | None = None,
          interrupt: threading.Event | None = None, fit_budget: bool = True, **knobs: Any
          ) -> Result:
    """Search for an answer to `problem` with algorithm `algo` within `budget`: its limits
    hold (usage never exceeds them in tokens, scorer calls or FLOPs; seconds by at most one
    forward or scorer call, see search.budget), and a search they cut short returns its best
    answer so far with status "budget_exhausted".

    engine: an Engine, a model name/path, or None for the default model.
    scorer: a Scorer, a scorer name, or None for `default_scorer(algo, problem)`: the free
        log-probability scorer, or for pgtd the public tests ("unit_tests") of a code problem.
        A named scorer is always used: a search that would not consult it is refused
        (registry.check_scorer); with none named, best_of_n votes (see its docs).
    progress: a line on stderr, when it is a terminal, once the solve runs for a few seconds
        (tokens, candidates, best score); False silences it. It never changes the result.
    cancel: an event that, once set, ends the search's model work (its next engine or PRM
        call raises search.runtime.sched.Interrupted); a driver of many searches sets it.
    interrupt: an event that, once set, ends the search as a spent budget would: no more model
        or scorer work starts, and the Result holds its best answer so far with status
        "interrupted" (the command line sets it on Ctrl-C).
    knobs: the algorithm's keyword-only parameters (see `search.registry.get(algo)`).
    Every name, knob and text is checked before any model loads, and so is the budget: with
    a token budget too small for the search's first width to finish a path each (by an
    estimate of a path's tokens on the model, search.fit), the width is narrowed where the
    algorithm allows (stats["narrowed"]: {"n": (8, 2)}), else search.fit.BudgetTooSmall (a
    ValueError) names the smallest budget that can; fit_budget=False runs the search as
    given (the budget then cuts its paths short). The Result names the model
    and scorer that produced it (Result.selected_by says what chose the answer);
    stats["server"] holds this solve's server counts (engines that talk to a server).
    The search runs in a search.session.Session of its own (its meter, KV scope and cancel
    event), which the algorithm receives with the engine and scorer as its views
    (`part.bind(session)`), so an engine and scorer shared with other searches keep each
    search's charges and KV apart.
    """
    problem = Problem.of(problem)  # text that is not UTF-8 is refused here
    named = scorer is not None
    knobs = registry.upgrade_knobs(algo, knobs, stacklevel=2)  # old names, with a warning
    scorer = check_run(problem, algo, budget, seed, scorer, knobs)
    model_name = check_engine(engine)
    scorer_name = check_scorer(scorer, problem, model_name)
    # a first width the token budget cannot finish: narrowed, or refused before any load
    narrowed = fit.fit(algo, registry.width(algo), registry.check_knobs(algo, knobs), budget,
                       fit.path_tokens(engine, model_name)) if fit_budget else {}
    knobs = {**knobs, **{k: new for k, (_, new) in narrowed.items()}}
    fn = registry.get(algo)
    # loading (or waiting for another thread's load) is not the search's: its session, and
    # with it the meter's clock, starts once the engine and scorer are here
    watch = progress if isinstance(progress, Progress) else Progress(enabled=bool(progress))
    cold = isinstance(engine, str | None) and model_name not in _ENGINES
    loading = time.perf_counter()
    with watch.loading(model_name) if cold else contextlib.nullcontext():
        shared = get_engine(engine)
        loaded = get_scorer(scorer, shared, implicit=not named)
    load_seconds = time.perf_counter() - loading
    session = Session.start(budget, cancel=cancel, stop=interrupt)
    eng = shared.bind(session)
    sc = bind(loaded, session)
    # the Result names the model, and the scorer only if the run consulted it (as eval rows
    # do); an engine that talks to a server adds its counts
    labels = Labels(model=model_name, scorer=scorer_name,
                    consulted=functools.partial(registry.uses_scorer, algo),
                    server=getattr(eng, "server_stats", None) is not None,
                    load_seconds=load_seconds, narrowed=narrowed)
    try:
        with watch.watching(session.meter, session.kv, f"{algo} on {model_name}"):
            return run(fn, (problem, eng, sc, session), dict(seed=seed, **knobs), labels)
    finally:
        session.kv.close()  # the tree stays in the Result; the engine drops its KV


def check_run(problem: Problem, algo: str, budget: Budget | None, seed: int,
              scorer: Scorer | str | None, knobs: dict[str, Any]) -> Scorer | str:
    """solve's checks of one run, before any model loads; the scorer to use."""
    registry.check_knobs(algo, knobs)  # fail fast on a typo, before loading any model
    registry.check_scorer(algo, knobs, named=scorer is not None)
    if budget is not None and not isinstance(budget, Budget):
        raise TypeError(f"budget must be a search.Budget, got {type(budget).__name__}")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {seed!r}")
    # also before any model loads: pgtd without tests fails here
    return default_scorer(algo, problem) if scorer is None else scorer
