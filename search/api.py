"""`search.solve`: one problem, one algorithm, one budget -> a Result with its true cost.
`search.solve_many`: many of them at once on one engine, results as each would be alone."""

from __future__ import annotations

import functools
import os
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from search import registry, scoring
from search.engines.base import Engine
from search.engines.kinds import kind_of
from search.knobs import Labels, run
from search.logprob import LogprobScorer
from search.progress import Progress
from search.scoring import Scorer
from search.session import Session, bind, shares
from search.types import Budget, Problem, Result

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
    return scoring.load(scorer or "logprob", engine=engine) \
        if scorer is None or isinstance(scorer, str) else scorer


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
    path = scorer.removeprefix("prm:")
    if scorer in scoring.known():
        check = scoring.CHECKS.get(scorer)
        if check is not None and problem is not None and model is not None:
            check(problem, model)
        return scorer
    if scorer.startswith("prm:") or "/" in path:
        from search.models import check_model

        check_model(path)
        return scorer
    scoring.load(scorer)  # an unknown name: the registry's "unknown scorer ... did you mean" error
    return scorer


def solve(problem: Problem | str, algo: str = "best_of_n", budget: Budget | None = None, *,
          engine: Engine | str | None = None, scorer: Scorer | str | None = None, seed: int = 0,
          progress: bool | Progress = True, stop: threading.Event | None = None,
          **knobs: Any) -> Result:
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
    stop: an event that, once set, ends the search's model work (its next engine or PRM
        call raises search.runtime.sched.Interrupted); a driver of many searches sets it.
    knobs: the algorithm's keyword-only parameters (see `search.registry.get(algo)`).
    Every name, knob and text is checked before any model loads. The Result names the model
    and scorer that produced it (Result.selected_by says what chose the answer);
    stats["server"] holds this solve's server counts (engines that talk to a server).
    The search runs in a search.session.Session of its own (its meter, KV scope and stop
    event), which the engine and scorer receive as views (`part.bind(session)`), so an
    engine and scorer shared with other searches keep each search's charges and KV apart.
    """
    problem = Problem.of(problem)  # text that is not UTF-8 is refused here
    named = scorer is not None
    knobs = registry.upgrade_knobs(algo, knobs, stacklevel=2)  # old names, with a warning
    scorer = _check(problem, algo, budget, seed, scorer, knobs)
    model_name = check_engine(engine)
    scorer_name = check_scorer(scorer, problem, model_name)
    fn = registry.get(algo)
    session = Session.start(budget, stop=stop)
    shared = get_engine(engine)
    eng = shared.bind(session)
    sc = bind(get_scorer(scorer, shared, implicit=not named), session)
    watch = progress if isinstance(progress, Progress) else Progress(enabled=bool(progress))
    # the Result names the model, and the scorer only if the run consulted it (as eval rows
    # do); an engine that talks to a server adds its counts
    labels = Labels(model=model_name, scorer=scorer_name,
                    consulted=functools.partial(registry.uses_scorer, algo),
                    server=getattr(eng, "server_stats", None) is not None)
    try:
        with watch.watching(session.meter, session.kv, f"{algo} on {model_name}"):
            return run(fn, (problem, eng, sc, session.meter), dict(seed=seed, **knobs), labels)
    finally:
        eng.retain([])  # the tree stays in the Result; its KV cache (this session's) is freed


def _check(problem: Problem, algo: str, budget: Budget | None, seed: int,
           scorer: Scorer | str | None, knobs: dict[str, Any]) -> Scorer | str:
    """solve's checks, before any model loads; the scorer to use."""
    registry.check_knobs(algo, knobs)  # fail fast on a typo, before loading any model
    registry.check_scorer(algo, knobs, named=scorer is not None)
    if budget is not None and not isinstance(budget, Budget):
        raise TypeError(f"budget must be a search.Budget, got {type(budget).__name__}")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {seed!r}")
    # also before any model loads: pgtd without tests fails here
    return default_scorer(algo, problem) if scorer is None else scorer


# -- many searches at once ---------------------------------------------------------------------
T = TypeVar("T")
R = TypeVar("R")
JOIN_SECONDS = 3.0  # how long an interrupted concurrently() waits for its threads


class SolveManyError(RuntimeError):
    """Some of solve_many's runs raised. results[i] is run i's Result (None where it raised),
    errors[i] its exception (None where it did not): nothing that finished is lost."""

    def __init__(self, results: list[Result | None], errors: list[BaseException | None]) -> None:
        failed = [i for i, e in enumerate(errors) if e is not None]
        first = errors[failed[0]]
        super().__init__(f"{len(failed)} of {len(errors)} runs raised; run {failed[0]}: "
                         f"{type(first).__name__}: {first}")
        self.results, self.errors = results, errors


def solve_many(problems: Sequence[Problem | str], algo: str = "best_of_n",
               budget: Budget | None = None, *, engine: Engine | str | None = None,
               scorer: Scorer | str | None = None, seeds: Sequence[int] = (0,),
               concurrency: int = 16, max_kv_bytes: int | None = None, **knobs: Any
               ) -> list[Result]:
    """`solve` for every problem and seed (problem-major: problem 0's seeds first), up to
    `concurrency` searches at once on one engine: each search runs in its own thread, and the
    engine batches the model calls in flight into shared forwards (search.runtime.sched).
    Every Result is what `solve` alone returns (the same answer, candidates, scores, tree and
    token counts; only timings differ). max_kv_bytes caps the batch caches in flight.

    A run that raises does not stop the others: SolveManyError then carries every Result
    and every error. scorer: a name builds one scorer per run; a Scorer object is shared by
    all runs (each charges its own session through it: a scorer that charges a meter must
    be a search.session.Bindable, like every scorer in rewards/)."""
    probs = [Problem.of(p) for p in problems]
    seeds = list(seeds)
    knobs = registry.upgrade_knobs(algo, knobs, stacklevel=2)
    runs = [(p, s) for p in probs for s in seeds]
    check_concurrent(concurrency)  # everything a run needs is checked before any model loads
    model_name = check_engine(engine)
    for p, s in runs:
        check_scorer(_check(p, algo, budget, s, scorer, knobs), p, model_name)
    eng = get_engine(engine)
    shared = scorer if scorer is not None and not isinstance(scorer, str) else None
    check_concurrent(concurrency, eng, shared)
    results: list[Result | None] = [None] * len(runs)
    errors: list[BaseException | None] = [None] * len(runs)

    def one(run: tuple[Problem, int], stop: threading.Event) -> Result:
        return solve(run[0], algo, budget, engine=eng, scorer=scorer, seed=run[1],
                     progress=False, stop=stop, **knobs)  # one line per search would interleave

    for i, out in concurrently(one, runs, concurrency=concurrency, max_kv_bytes=max_kv_bytes):
        if isinstance(out, BaseException):
            errors[i] = out
        else:
            results[i] = out
    if any(e is not None for e in errors):
        raise SolveManyError(results, errors)
    return results  # type: ignore[return-value]


def check_concurrent(concurrency: int, *parts: Any) -> None:
    """A clear error unless these engines/scorers can serve `concurrency` searches at once."""
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
        raise ValueError(f"concurrency must be a positive int, got {concurrency!r}")
    if concurrency == 1:
        return
    for part in parts:
        if part is None:
            continue
        name = type(part).__name__
        if hasattr(part, "expand") and not getattr(part, "concurrent", False):
            raise ValueError(f"engine {name} does not serve concurrent searches; use "
                             "concurrency=1")
        if hasattr(part, "meter") and not shares(part):
            raise ValueError(f"{name} has a meter but no views per search, so concurrent "
                             "searches would charge each other's meters; derive the class "
                             "from search.session.Bindable, or use concurrency=1")


def concurrently(fn: Callable[[T, threading.Event], R], items: Sequence[T], *,
                 concurrency: int, max_kv_bytes: int | None = None
                 ) -> Iterator[tuple[int, R | BaseException]]:
    """(i, fn(items[i], stop) or the exception it raised) for every item, as each finishes,
    up to `concurrency` at a time, each in its own thread, while the engines' scheduler
    batches their model calls (concurrency 1: in order, in this thread, nothing shared).
    stop: this call's event, which fn hands to the searches it runs (solve's `stop`, their
    Session.stop). Stopping the iteration early (a KeyboardInterrupt in the caller, or
    leaving the loop) starts no more items and ends the ones in flight: `stop` is set, so
    their model work raises search.runtime.sched.Interrupted at its next forward (their
    results are dropped), and their threads are given JOIN_SECONDS to end."""
    from search.runtime.sched import SCHED  # torch loads only here

    items = list(items)
    stop = threading.Event()
    if concurrency == 1 or len(items) <= 1:
        for i, item in enumerate(items):
            try:
                yield i, fn(item, stop)
            except Exception as err:  # the caller records it; the others go on
                yield i, err
        return
    done: queue.SimpleQueue[tuple[int, Any]] = queue.SimpleQueue()
    order = iter(range(len(items)))
    take, done_taking = threading.Lock(), threading.Event()

    def worker() -> None:
        while not done_taking.is_set():
            with take:
                i = next(order, None)
            if i is None:
                return
            try:
                out: Any = fn(items[i], stop)
            except Exception as err:
                out = err
            done.put((i, out))

    with SCHED.serving(max_kv_bytes):
        threads = [threading.Thread(target=worker, name=f"tts-search-{k}", daemon=True)
                   for k in range(min(concurrency, len(items)))]
        for t in threads:
            t.start()
        try:
            for _ in items:
                yield done.get()
        except BaseException:  # Ctrl-C, SIGTERM, or the caller stopped: end the runs in flight
            done_taking.set()
            SCHED.interrupt([stop])
            for t in threads:  # they stop at their next forward; one may be in a scorer
                t.join(timeout=JOIN_SECONDS)
            raise
        done_taking.set()
        for t in threads:
            t.join()
