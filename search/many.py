"""Many searches on one engine: the one driver behind `search.solve_many` and the eval
runner (reports.eval.cells, reports.eval.ray_workers).

A `Driver` loads the engine once and the scorer once where loading costs something (a PRM
path, or a Scorer object given: one instance shared by every run, each run scoring through
its own view, search.session), and gives each run a fresh scorer where the scorer is a
registered name (cheap to build, and no cache, such as the sandbox's answers, carries from
one run to the next). `Driver.map` runs up to `concurrency` searches at once, each in its
own thread with its own Session, while the schedulers of its engine and scorer (each
model's owner's: `engine.scheduler`, search.runtime.sched) batch their model calls; every
Result is what `search.solve` alone returns.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from search import registry, scoring
from search.api import check_engine, check_run, check_scorer, get_engine, get_scorer, solve
from search.engines.base import Engine
from search.scoring import Scorer
from search.session import shares
from search.types import Budget, Problem, Result

T = TypeVar("T")
R = TypeVar("R")
JOIN_SECONDS = 3.0  # how long an interrupted concurrently() waits for its threads


@dataclass(frozen=True)
class Scorers:
    """Where each run's scorer comes from (calling it gives one run's): None (search.solve's
    default) when none is named; the name itself for a registered scorer (search.solve
    builds a fresh one per run); else `shared`, loaded once (a PRM path) or given (a Scorer
    object), for every run."""

    given: Scorer | str | None = None
    shared: Scorer | None = None

    @classmethod
    def of(cls, scorer: Scorer | str | None, engine: Engine) -> Scorers:
        if scorer is None or (isinstance(scorer, str) and scorer in scoring.known()):
            return cls(scorer)
        return cls(scorer, get_scorer(scorer, engine))  # a PRM loads here, once

    def __call__(self) -> Scorer | str | None:
        return self.shared if self.shared is not None else self.given


@dataclass(frozen=True)
class Driver:
    """One engine and one scorer source for many searches, up to `concurrency` at once
    (see the module doc). Build it with `Driver.load`, which checks that the engine and a
    shared scorer can serve that many."""

    engine: Engine
    scorers: Scorers
    concurrency: int = 1
    max_kv_bytes: int | None = None  # caps the batch caches in flight (Scheduler.serving)

    @classmethod
    def load(cls, engine: Engine | str | None = None, scorer: Scorer | str | None = None, *,
             concurrency: int = 1, max_kv_bytes: int | None = None,
             engine_kwargs: Mapping[str, Any] | None = None) -> Driver:
        check_concurrent(concurrency)
        eng = get_engine(engine, **dict(engine_kwargs or {}))
        scorers = Scorers.of(scorer, eng)
        check_concurrent(concurrency, eng, scorers.shared)
        return cls(eng, scorers, concurrency, max_kv_bytes)

    def solve(self, problem: Problem, algo: str, budget: Budget | None = None, *,
              seed: int = 0, cancel: threading.Event | None = None, progress: Any = False,
              fit_budget: bool = True, **knobs: Any) -> Result:
        """search.solve of one run on the driver's engine, with its scorer (none for a search
        that consults none: solve then uses its default, and refuses nothing)."""
        scorer = self.scorers() if registry.uses_scorer(algo, knobs) else None
        return solve(problem, algo, budget, engine=self.engine, scorer=scorer, seed=seed,
                     progress=progress, cancel=cancel, fit_budget=fit_budget, **knobs)

    @property
    def schedulers(self) -> list[Any]:
        """The schedulers its model calls run on: the engine's, and a shared scorer's own
        where it has one (a PRM: search.runtime.sched.Scheduler); none for engines that
        schedule nothing here (a server's, the fake one)."""
        return schedulers_of(self.engine, self.scorers.shared)

    def map(self, fn: Callable[[T, threading.Event], R], items: Sequence[T]
            ) -> Iterator[tuple[int, R | BaseException]]:
        """`concurrently(fn, items)` at the driver's concurrency and KV cap, on its
        schedulers."""
        return concurrently(fn, items, concurrency=self.concurrency,
                            max_kv_bytes=self.max_kv_bytes, schedulers=self.schedulers)


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
    `concurrency` searches at once on one engine (a Driver): each search runs in its own
    thread, and the engine's scheduler batches the model calls in flight into shared
    forwards (search.runtime.sched). Every Result is what `solve` alone returns (the same answer,
    candidates, scores, tree and token counts; only timings differ). max_kv_bytes caps the
    batch caches in flight.

    A run that raises does not stop the others: SolveManyError then carries every Result
    and every error. scorer: a registered name builds one scorer per run; a PRM path loads
    once and a Scorer object is used as given, shared by all runs (each charges its own
    session through it: a scorer that charges a meter must be a search.session.Bindable,
    like every scorer in rewards/)."""
    probs = [Problem.of(p) for p in problems]
    knobs = registry.upgrade_knobs(algo, knobs, stacklevel=2)
    runs = [(p, s) for p in probs for s in seeds]
    check_concurrent(concurrency)  # everything a run needs is checked before any model loads
    model_name = check_engine(engine)
    for p, s in runs:
        check_scorer(check_run(p, algo, budget, s, scorer, knobs), p, model_name)
    driver = Driver.load(engine, scorer, concurrency=concurrency, max_kv_bytes=max_kv_bytes)
    prefill = getattr(driver.engine, "prefill", None)  # an engine with a prompt cache
    if prefill is not None and concurrency > 1 and len(runs) > 1:
        prefill(probs)  # each prompt once: the runs in flight would each miss it at once
    results: list[Result | None] = [None] * len(runs)
    errors: list[BaseException | None] = [None] * len(runs)

    def one(run: tuple[Problem, int], cancel: threading.Event) -> Result:
        return driver.solve(run[0], algo, budget, seed=run[1], cancel=cancel, **knobs)

    for i, out in driver.map(one, runs):
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


def schedulers_of(*parts: Any) -> list[Any]:
    """The distinct schedulers (`part.scheduler`) of these engines and scorers."""
    found = [getattr(p, "scheduler", None) for p in parts]
    return list({id(s): s for s in found if s is not None}.values())


@contextmanager
def serving(schedulers: Iterable[Any], max_kv_bytes: int | None = None) -> Iterator[None]:
    """Every scheduler serving (search.runtime.sched.Scheduler.serving) for the block."""
    with ExitStack() as stack:
        for s in schedulers:
            stack.enter_context(s.serving(max_kv_bytes))
        yield


def interrupt(schedulers: Iterable[Any], cancels: Iterable[threading.Event]) -> None:
    """Set these cancel events (searches' Session.cancel), and have every scheduler's lanes
    see it at once: the searches' model work raises Interrupted at its next forward."""
    cancels = list(cancels)
    for cancel in cancels:
        cancel.set()
    for s in schedulers:
        s.interrupt(cancels)


def concurrently(fn: Callable[[T, threading.Event], R], items: Sequence[T], *,
                 concurrency: int, max_kv_bytes: int | None = None,
                 schedulers: Sequence[Any] = ()) -> Iterator[tuple[int, R | BaseException]]:
    """(i, fn(items[i], cancel) or the exception it raised) for every item, as each finishes,
    up to `concurrency` at a time, each in its own thread, while `schedulers` (those of the
    engines and scorers fn uses: schedulers_of) serve, batching their model calls
    (concurrency 1: in order, in this thread, nothing shared).
    cancel: this call's event, which fn hands to the searches it runs (solve's `cancel`,
    their Session.cancel). Stopping the iteration early (a KeyboardInterrupt in the caller, or
    leaving the loop) starts no more items and ends the ones in flight: `cancel` is set, so
    their model work raises search.runtime.sched.Interrupted at its next forward (their
    results are dropped), and their threads are given JOIN_SECONDS to end."""
    items = list(items)
    cancel = threading.Event()
    if concurrency == 1 or len(items) <= 1:
        for i, item in enumerate(items):
            try:
                yield i, fn(item, cancel)
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
                out: Any = fn(items[i], cancel)
            except Exception as err:
                out = err
            done.put((i, out))

    with serving(schedulers, max_kv_bytes):
        threads = [threading.Thread(target=worker, name=f"tts-search-{k}", daemon=True)
                   for k in range(min(concurrency, len(items)))]
        for t in threads:
            t.start()
        try:
            for _ in items:
                yield done.get()
        except BaseException:  # Ctrl-C, SIGTERM, or the caller stopped: end the runs in flight
            done_taking.set()
            interrupt(schedulers, [cancel])
            for t in threads:  # they stop at their next forward; one may be in a scorer
                t.join(timeout=JOIN_SECONDS)
            raise
        done_taking.set()
        for t in threads:
            t.join()
