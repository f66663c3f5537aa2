"""The searches behind the server: one engine, loaded once, shared by every request.

A Service runs each search of a request (one per choice) in a pool of `concurrency` threads,
through a search.many.Driver, its schedulers serving for the server's life (the engine's,
`engine.scheduler.serving()`, and a PRM's): their lanes batch the model calls of every search
in flight into shared forwards, as they do for search.solve_many, so N clients at once are batched, not queued, and each Result
is what search.solve alone returns. Searches past `concurrency` wait for a thread.

Each search has its own cancel event (its Session's): a client that goes away, or a shutdown
past its grace period, sets it (search.many.interrupt), and the search ends at its next
forward.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from search import scoring
from search.budget import Meter
from search.fit import BudgetTooSmall
from search.many import Driver, Scorers, interrupt, serving
from search.models import form_of
from search.progress import Progress, line
from search.runtime.sched import Interrupted, SchedStats
from search.serve.plan import BadRequest, Plan
from search.session import KVScope
from search.types import Problem, Result

PROGRESS_EVERY = 0.5  # seconds between two progress snapshots of one search
TRIM_EVERY = 2.0  # seconds between two hand-backs of freed memory to the OS (trim_memory)


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, where the C library has one."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


MALLOC_TRIM = _malloc_trim()


def trim_memory() -> None:
    """Hand the C heap's free pages back to the OS. Searches of many sizes, in many threads,
    leave glibc's arenas holding freed memory in pieces it does not return by itself: without
    this, a soak's RSS crept up while the Python objects stayed flat, and a trim brought it
    back (docs/serve.md). A no-op off glibc."""
    if MALLOC_TRIM is not None:
        MALLOC_TRIM(0)


class Watch(Progress):
    """A search's progress line (search.progress.line), kept for the stream to send instead of
    drawn: refreshed from the meter's charges in the search's own calls, at most every
    PROGRESS_EVERY seconds; it reads the tree and the meter and writes nothing back."""

    def __init__(self) -> None:
        super().__init__(enabled=False)
        self.latest = ""

    @contextmanager
    def watching(self, meter: Meter, trees: KVScope, label: str) -> Iterator[None]:
        start, last = time.perf_counter(), -math.inf

        def tick(m: Meter) -> None:
            nonlocal last
            now = time.perf_counter()
            if now - last >= PROGRESS_EVERY:
                last = now
                self.latest = line(label, m, list(trees.roots), now - start)

        meter.watchers.append(tick)
        try:
            yield
        finally:
            meter.watchers.remove(tick)


class Cancelled(RuntimeError):
    """The search was cancelled before it ended (its client left, or the server stopped)."""


@dataclass(eq=False)
class Search:
    """One search in flight: its Result (or error) to come, its cancel event, its progress."""

    index: int  # the choice it answers
    problem: Problem
    seed: int
    cancel: threading.Event = field(default_factory=threading.Event)
    watch: Watch = field(default_factory=Watch)
    future: Future[Result] = field(default_factory=Future)


class Service:
    """The engine, the drivers (one per scorer source) and the searches in flight, run by a
    pool of `concurrency` threads that live as long as the service."""

    def __init__(self, driver: Driver, model: str) -> None:
        self.model = model
        self.driver = driver  # the server's scorer
        self._drivers: dict[str | None, Driver] = {}
        self._pool = ThreadPoolExecutor(driver.concurrency, thread_name_prefix="tts-serve")
        self._guard = threading.Lock()
        self._live: set[Search] = set()  # started, not ended (running or waiting for a thread)
        self.counts: Counter[str] = Counter()
        self.closing = False
        self._stack = ExitStack()
        self._ended = threading.Event()  # a search ended since the last trim (_janitor)
        self._stopping = threading.Event()

    @classmethod
    def load(cls, model: str, scorer: str | None = None, *, concurrency: int = 32,
             max_kv_bytes: int | None = None) -> Service:
        """The engine and the server's scorer (a PRM loads here, once)."""
        driver = Driver.load(model, scorer, concurrency=concurrency, max_kv_bytes=max_kv_bytes)
        return cls(driver, model)

    # -- life ----------------------------------------------------------------------------------
    def open(self) -> None:
        """Start serving: the engine's lanes batch every search from now on."""
        self._stack.enter_context(serving(self.driver.schedulers, self.driver.max_kv_bytes))
        threading.Thread(target=self._janitor, name="tts-serve-trim", daemon=True).start()

    def _janitor(self) -> None:
        """Hand freed memory back to the OS (trim_memory) after searches end, at most every
        TRIM_EVERY seconds, in a thread of its own: a trim walks every arena of the C heap,
        which takes milliseconds, and run by a search's own thread it would delay that
        search's answer."""
        while True:
            self._ended.wait()
            if self._stopping.is_set():
                return
            self._ended.clear()
            trim_memory()
            if self._stopping.wait(TRIM_EVERY):
                return

    def close(self, join_seconds: float = 10.0) -> None:
        """Cancel what still runs, wait for it (up to join_seconds), stop serving."""
        self.closing = True
        self.cancel_all()
        deadline = time.monotonic() + join_seconds
        while self.in_flight and time.monotonic() < deadline:
            time.sleep(0.05)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._stopping.set()
        self._ended.set()
        self._stack.close()

    def drain(self, grace: float) -> None:
        """Take no more searches; let those in flight finish for up to `grace` seconds, then
        cancel the rest (a blocking call: run it off the event loop)."""
        self.closing = True
        deadline = time.monotonic() + grace
        while self.in_flight and time.monotonic() < deadline:
            time.sleep(0.05)
        self.cancel_all()

    # -- searches ------------------------------------------------------------------------------
    def driver_for(self, scorer: str | None) -> Driver:
        """The driver whose scorer source is `scorer`: the server's own, or a registered
        scorer's name (each run builds its own); a PRM the server has not loaded is refused."""
        if scorer == self.driver.scorers.given:
            return self.driver
        if scorer is not None and scorer not in scoring.known():
            raise BadRequest(f"the scorer {scorer!r} is not loaded on this server (it loads "
                             f"PRMs at start: --scorer); registered scorers: "
                             f"{', '.join(scoring.known())}", param="scorer")
        with self._guard:
            if scorer not in self._drivers:
                d = self.driver
                self._drivers[scorer] = Driver(d.engine, Scorers(scorer), d.concurrency,
                                               d.max_kv_bytes)
            return self._drivers[scorer]

    def check_prompts(self, plan: Plan) -> None:
        """BadRequest for a prompt the model cannot read: one longer than its context, or
        text its tokenizer has no token for (it would read its unknown token there, and
        answer something else: tiny-arith's alphabet has no "W"), naming the characters and
        what the model reads where it declares it. Blocking: run it off the event loop."""
        engine = self.driver.engine
        problems = list({id(p): p for p, _ in plan.runs}.values())  # n seeds: one Problem
        if not hasattr(engine, "prompt_ids"):  # an engine that tokenises nothing here
            return
        try:
            sched = getattr(engine, "scheduler", None)  # its tokenizer: one call at a time
            unread = [unreadable(engine, p) for p in problems] if sched is None else \
                sched.call(lambda: [unreadable(engine, p) for p in problems])
        except ValueError as err:  # too long for the context
            raise BadRequest(str(err)) from None
        chars = sorted({c for u in unread for c in u})
        if chars:
            form = form_of(self.model)
            reads = f"; it reads {form.reads}" if form is not None and form.reads else ""
            raise BadRequest(f"the model {self.model!r} cannot read "
                             f"{', '.join(map(repr, chars))}: its tokenizer has no token for "
                             f"{'it' if len(chars) == 1 else 'them'}{reads}", param="messages"
                             if plan.chat else "prompt")

    def start(self, plan: Plan) -> list[Search]:
        """Start every search of the plan (one per choice, in order)."""
        if self.closing:
            raise BadRequest("the server is shutting down", status=503)
        driver = self.driver_for(plan.scorer)
        searches = [Search(i, p, s) for i, (p, s) in enumerate(plan.runs)]
        with self._guard:
            self.counts["requests"] += 1
            self.counts["searches"] += len(searches)
            self._live.update(searches)
        # each prompt computed once, before the searches (this request's n, and other
        # requests' in flight) that would each miss it at once (the engine's prompt cache, as
        # solve_many's): in a pool thread, ahead of them
        prefill = getattr(driver.engine, "prefill", None)
        ready = None if prefill is None else self._pool.submit(prefill, [p for p, _ in plan.runs])
        for s in searches:
            s.future = self._pool.submit(self._run, s, driver, plan, ready)
        return searches

    def _run(self, s: Search, driver: Driver, plan: Plan, ready: Future[Any] | None) -> Result:
        """One search in a pool thread, once `ready` (its prompt's prefill) is done: its
        Result, or Cancelled, or the error it raised (a prefill's error is the search's own
        to meet)."""
        outcome = "failed"
        if ready is not None:
            wait([ready])
        try:
            result = self._solve(s, driver, plan)
            if result is None:  # its KV is dropped already: search.solve ended its session
                outcome = "cancelled"
                raise Cancelled("the search was interrupted")
            outcome = "finished"
            return result
        except BudgetTooSmall:  # the request's budget, refused before the search began
            outcome = "refused"
            raise
        finally:
            with self._guard:
                self.counts[outcome] += 1
                self._live.discard(s)
            self._ended.set()  # the janitor trims the heap, off this search's answer

    @staticmethod
    def _solve(s: Search, driver: Driver, plan: Plan) -> Result | None:
        """The search's Result; None if it was cancelled."""
        if s.cancel.is_set():
            return None
        try:
            return driver.solve(s.problem, plan.algo, plan.budget, seed=s.seed,
                                cancel=s.cancel, progress=s.watch, fit_budget=plan.fit_budget,
                                **plan.knobs)
        except Interrupted:
            return None
        except Exception:
            if s.cancel.is_set():  # ended by its cancel another way (a scorer's own error)
                return None
            raise

    def cancel(self, searches: list[Search]) -> None:
        """End these searches: one still waiting for a thread ends as it gets one, one running
        ends at its next forward; ended ones are untouched."""
        live = [s.cancel for s in searches if not s.future.done()]
        if live:
            interrupt(self.driver.schedulers, live)

    def cancel_all(self) -> None:
        with self._guard:
            live = list(self._live)
        self.cancel(live)

    # -- reading -------------------------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        return len(self._live)

    def health(self) -> Mapping[str, Any]:
        """What /health reports: the counts so far, the searches in flight, the engine's cached
        KV tokens (where it reports them) and the scheduler's batching."""
        cached = getattr(type(self.driver.engine), "cached_tokens", None)
        sched = getattr(self.driver.engine, "scheduler", None)
        stats = SchedStats() if sched is None else sched.stats
        return {"status": "shutting down" if self.closing else "ok", "model": self.model,
                "in_flight": self.in_flight, **{k: self.counts[k] for k in (
                    "requests", "searches", "finished", "cancelled", "refused", "failed")},
                "kv_cached_tokens": self.driver.engine.cached_tokens  # type: ignore[attr-defined]
                if cached is not None else None,
                "batching": {"peak_jobs": stats.peak_jobs, "widest": stats.widest,
                             "ticks": stats.ticks, "passes": stats.passes}}


def unreadable(engine: Any, problem: Problem) -> str:
    """The characters of the problem's text that the engine's tokenizer reads as its unknown
    token ("" where it has none, or reads them all); ValueError for a prompt too long for the
    engine's context (engine.prompt_ids's)."""
    ids = engine.prompt_ids(problem)
    tokenizer = getattr(engine, "tokenizer", None)
    unk = getattr(tokenizer, "unk_token_id", None)
    if tokenizer is None or unk is None or unk not in ids:
        return ""
    texts = [problem.prompt, *(m.get("content", "") for m in problem.messages)]
    chars = dict.fromkeys(c for t in texts for c in t)
    return "".join(c for c in chars
                   if unk in tokenizer(c, add_special_tokens=False)["input_ids"])
