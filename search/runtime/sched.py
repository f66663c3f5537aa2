"""An engine's scheduler: its calls from many searches, merged into shared forwards.

Each engine owns one Scheduler (`engine.scheduler`; an HF PRM owns its own or shares its
engine's): two engines in one process never wait for each other, and no module holds one.
Engine calls are *jobs* (search.runtime.passes: generators that yield a `Pass` and get its
output back). `run(job)` drives a job to its return value:

  inline   (the default) in the calling thread, each Pass alone, under the scheduler's
           lock: any number of threads may share an engine, one call at a time;
  serving  (`with engine.scheduler.serving():`, what search.solve_many opens) as a
           `Request` (its job, batch-cache bytes, cancel event, pending Pass) in one of the
           scheduler's *lanes*. Each tick a lane's `schedule()` ends the interrupted
           requests, admits waiting ones and returns those that wait on a Pass; one forward
           per model runs their Passes (run_passes: one GEMM per linear over every row);
           `update()` hands each request its output and retires the ended ones. A request
           joins at the lane's next tick, leaves when its rows are done (continuous batching).

Lanes. A tick is the jobs' Python (under the interpreter lock and `lock`), then the forward
(the lean layers run without either: search.runtime.scripted). With two lanes (a request
goes to the one with fewer), one lane's Python runs while the other's forward runs, each on
`threads // lanes` intra-op threads (omp.set_threads_here); Passes that cannot merge (a
model's own forward: its bits may depend on the thread count, its modules keep state within
a forward) run one lane at a time on the process's count (`apart`). `default_lanes`: two
where torch has two or more intra-op threads, else one. Lanes start with the first serving
block and end once the last closes and they are idle; its close waits for them.

Results depend neither on the batch nor on the lane: a Pass keeps its own cache, mask and
attention, and every op the Passes share computes each row the same way whatever rows are
beside it and on any thread count (tests/test_concurrency.py: bit for bit). On a GPU, cuBLAS
picks its GEMM kernel by the batch's rows (merge=False keeps Passes apart: HFConfig). Shared
state (KV trees, meters) is touched only under `lock`, held while jobs run, not while the
forward runs. A job carries its search's Session (meter, trees, cancel event) to any thread.

Memory: requests declare the batch-cache bytes they will hold (`cost`); lanes admit them,
first come first served, while those in flight in every lane hold at most `max_kv_bytes`
(a larger one runs alone). Errors stay with their job: a merged forward that raises is
rewound and its Passes re-run one by one, and only the job whose Pass fails gets the error.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch

from search.runtime.omp import release_pool, set_threads_here, threads_here
from search.runtime.passes import Job, Pass, call, run_passes

T = TypeVar("T")
DEFAULT_KV_BYTES = 2 << 30  # batch caches in flight while serving
MAX_LANES = 2  # owner threads by default (default_lanes)
LANE_WAIT = 30.0  # seconds serving's close waits for its lanes to end


class Interrupted(RuntimeError):
    """The run that started this job was interrupted (Ctrl-C, SIGTERM): its model work ends
    at the next forward, and its later engine calls fail at once (Scheduler.interrupt)."""


def default_lanes() -> int:
    """Owner lanes while serving: two where this process runs torch on two or more intra-op
    threads (each lane then on half of them), else one; one where torch sees a GPU (a GPU
    forward is queued kernels, which the lane's Python overlaps anyway, and one lane merges
    every search's Passes into one forward: two would stream the weights twice a step)."""
    if torch.cuda.is_available():
        return 1
    return max(1, min(MAX_LANES, torch.get_num_threads()))


def default_kv_bytes() -> int:
    """The batch-cache bytes in flight while serving, unless told: DEFAULT_KV_BYTES, or where
    torch sees a GPU half the memory free on it when serving starts, if that is more (the
    batch caches live there)."""
    if torch.cuda.is_available():
        free, _ = torch.cuda.mem_get_info()
        return max(DEFAULT_KV_BYTES, free // 2)
    return DEFAULT_KV_BYTES


@dataclass(eq=False)
class Request:
    """One engine call: its state (the job, where its generator stands, and the Pass it
    waits on), the batch-cache bytes it may hold (`cost`: what a lane's admission budgets),
    its stop rule (`cancel`, the search's Session.cancel: once set, a lane ends it with
    Interrupted), and its outcome (`value` or `error`, once `done`). Inline, its caller
    steps it; serving, a lane does."""

    job: Job[Any]
    cost: int
    cancel: threading.Event | None
    done: threading.Event = field(default_factory=threading.Event)
    pending: Pass | None = None
    value: Any = None
    error: BaseException | None = None

    @property
    def stopped(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def advance(self, sent: Any) -> None:
        """Run the job to its next Pass (or its end): `sent` is its last Pass's output (None
        to start it), or the exception to raise where it waits."""
        try:
            p = self.job.throw(sent) if isinstance(sent, BaseException) else self.job.send(sent)
        except StopIteration as stop:
            return self.end(value=stop.value)
        except BaseException as err:  # noqa: BLE001  # the caller re-raises it
            return self.end(error=err)
        if not isinstance(p, Pass):
            self.job.close()
            return self.end(error=TypeError(f"a job yielded {p!r}, not a Pass"))
        self.pending = p

    def end(self, value: Any = None, error: BaseException | None = None) -> None:
        """Its outcome; the caller that waits on `done` takes it."""
        self.pending, self.value, self.error = None, value, error
        self.done.set()


@dataclass
class SchedStats:
    """Counters of the owner lanes (while serving), summed over them."""

    ticks: int = 0  # rounds of merged forwards (each lane's)
    passes: int = 0  # Passes run
    widest: int = 0  # most Passes in one tick
    jobs: int = 0  # jobs run
    # most jobs in flight at once over every lane (one counts until retired, after its
    # tick), and their declared batch-cache bytes
    peak_jobs: int = 0
    peak_kv_bytes: int = 0
    largest: int = 0  # most batch-cache bytes one job declared
    lanes: int = 0  # most lanes serving at once


class Scheduler:
    """The owner of one engine's models and caches (see module doc)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()  # models and caches: one job step at a time
        self.max_kv_bytes = DEFAULT_KV_BYTES
        self.lanes: int | None = None  # lanes while serving (None: default_lanes())
        self.stats = SchedStats()
        self._serving = 0
        self._guard = threading.RLock()  # _serving, _lanes, and every lane's requests
        self._changed = threading.Condition(self._guard)  # wakes the lanes that wait
        self._lanes: list[_Lane] = []  # while serving, and until their jobs are done
        self._open = 1  # lanes that take jobs in this serving block
        self._threads = (1, 1)  # intra-op threads: (a lane's, Passes that cannot merge)
        self._apart = threading.Lock()  # a model's own forward: one lane at a time

    @contextmanager
    def serving(self, max_kv_bytes: int | None = None, lanes: int | None = None
                ) -> Iterator[Scheduler]:
        """Route every job to the owner lanes for the block (nested blocks share them, with
        the outer block's lanes and cap). lanes: how many (None: `self.lanes`, else
        default_lanes())."""
        if max_kv_bytes is not None and max_kv_bytes < 1:
            raise ValueError(f"max_kv_bytes must be positive, got {max_kv_bytes}")
        if lanes is not None and (type(lanes) is not int or lanes < 1):
            raise ValueError(f"lanes must be a positive int, got {lanes!r}")
        with self._guard:
            if not self._serving:
                if max_kv_bytes is not None:
                    self.max_kv_bytes = max_kv_bytes
                elif self.max_kv_bytes == DEFAULT_KV_BYTES:
                    self.max_kv_bytes = default_kv_bytes()
                self._open = lanes or self.lanes or default_lanes()
                threads = torch.get_num_threads()  # the opener's: what a search alone runs on
                self._threads = (max(1, threads // self._open), threads)
                self.stats.lanes = max(self.stats.lanes, self._open)
                release_pool()  # the lanes' OpenMP teams should be the only ones (omp.py)
                while len(self._lanes) < self._open:
                    self._lanes.append(_Lane(self, len(self._lanes)))
            self._serving += 1
        try:
            yield self
        finally:
            with self._guard:
                self._serving -= 1
                ending = [] if self._serving else [la.thread for la in self._lanes]
                if not self._serving:
                    self.max_kv_bytes = DEFAULT_KV_BYTES
                    self._changed.notify_all()  # once idle, lanes end (OpenMP pools released)
            self._join(ending)

    def _join(self, lanes: list[threading.Thread]) -> None:
        """Wait for these lanes to end (a process whose interpreter exits while a lane is
        still inside torch aborts: "terminate called without an active exception"), unless
        serving starts again meanwhile (they serve on), this is one of them, or LANE_WAIT
        seconds have passed (a forward that long)."""
        deadline = time.monotonic() + LANE_WAIT
        for thread in lanes:
            while thread.is_alive() and thread is not threading.current_thread() and \
                    time.monotonic() < deadline:
                with self._guard:
                    if self._serving:
                        return
                thread.join(timeout=0.05)

    def interrupt(self, cancels: Iterable[threading.Event]) -> None:
        """Set these searches' cancel events (Session.cancel): their jobs raise Interrupted."""
        for cancel in cancels:
            cancel.set()
        with self._guard:
            self._changed.notify_all()  # the lanes see it at once, even if idle

    def run(self, job: Job[T], *, cost: int = 0, cancel: threading.Event | None = None) -> T:
        """The job's return value (or its exception), computed inline or by a lane.
        cancel: the calling search's (Session.cancel); once set, the job raises
        Interrupted."""
        if cancel is not None and cancel.is_set():
            job.close()
            raise Interrupted("the run was interrupted")
        request = Request(job, cost, cancel)
        with self._guard:  # while serving, the open lane with the fewest requests
            lanes = self._lanes[:self._open] if self._serving else []
            own = any(threading.current_thread() is la.thread for la in self._lanes)
            lane = None if own or not lanes else min(
                lanes, key=lambda la: len(la.active) + len(la.waiting))
            if lane is not None:
                lane.waiting.append(request)
                self._changed.notify_all()
        if lane is None:  # inline, each Pass alone (a lane's own call: beside the other lanes')
            with self.lock, torch.inference_mode():
                request.advance(None)
                while request.pending is not None:
                    request.advance(run_passes([request.pending],
                                               apart=self.apart if own else nullcontext)[0])
        request.done.wait()
        # the caller takes them over: the lane may keep the request a tick longer, an error's
        # traceback holds the job's frames (a search tree, whose KV is keyed by its nodes)
        error, value, request.error, request.value = request.error, request.value, None, None
        if error is not None:
            raise error
        return value

    def call(self, fn: Any, *args: Any, cancel: threading.Event | None = None) -> Any:
        """fn(*args), as a job (in a lane while serving); cancel as for `run`."""
        return self.run(call(fn, *args), cancel=cancel)

    @property
    def owners(self) -> list[threading.Thread]:
        """The lanes' threads (while serving, and until they end)."""
        return [lane.thread for lane in self._lanes]

    @contextmanager
    def apart(self) -> Iterator[None]:
        """Where a lane runs a Pass that cannot merge: a model's own forward, one lane at a
        time (modules may keep state between calls within a forward: packed._Fused hands its
        siblings their columns), on the opener's thread count (its bits may depend on it)."""
        with self._apart, threads_here(self._threads[1]):
            yield

    def _held(self) -> tuple[int, int]:
        """(jobs, their declared batch-cache bytes) active in every lane (under _guard)."""
        costs = [r.cost for lane in self._lanes for r in lane.active]
        return len(costs), sum(costs)


class _Lane:
    """One owner thread and its requests (under sched._guard): `waiting` (handed to it, in
    order) and `active` (admitted, until retired). It waits while it has nothing to run (woken
    by sched._changed: a request handed to it, an interrupt, memory freed elsewhere, serving's
    end), and ends once serving has ended and it has nothing left."""

    def __init__(self, sched: Scheduler, index: int) -> None:
        self.sched = sched
        self.active: list[Request] = []
        self.waiting: deque[Request] = deque()
        self.threads = 0  # this thread's intra-op count, once set
        self.thread = threading.Thread(target=self._loop, name=f"tts-engine-{index}",
                                       daemon=True)
        self.thread.start()

    def wait(self) -> None:
        """Nothing to run: wait for a change (under sched._guard, which it releases meanwhile)."""
        self.sched._changed.wait()

    @torch.inference_mode()  # every job step and forward of this thread
    def _loop(self) -> None:
        while True:
            try:
                while self._ready():
                    if self.threads != self.sched._threads[0]:  # (a serving block's count)
                        self.threads = self.sched._threads[0]
                        set_threads_here(self.threads)
                    batch = self.schedule()  # then the forward, without the lock
                    outs = run_passes([r.pending for r in batch],  # type: ignore[misc]
                                      apart=self.sched.apart) if batch else []
                    self.update(batch, outs)
                return
            except BaseException as err:  # noqa: BLE001  # a bug here: fail every job, go on
                with self.sched._guard:
                    for r in [*self.active, *self.waiting]:
                        r.end(error=err)
                    self.waiting.clear()
                self._retire()

    def _ready(self) -> bool:
        """Whether there is work for a tick: a request active, one that may start (_fits) or
        one interrupted while it waits; else the lane waits for a change. False: serving has
        ended and this lane, with nothing left, has left the scheduler (its OpenMP pool
        released: the cores' spin goes elsewhere)."""
        s = self.sched
        with s._guard:
            while not (self.active or self._fits() or any(r.stopped for r in self.waiting)):
                if not s._serving and not self.waiting:
                    s._lanes.remove(self)
                    release_pool()
                    return False
                self.wait()
        return True

    def schedule(self) -> list[Request]:
        """This tick's batch: interrupted requests ended (Interrupted thrown where they wait: a
        waiting one before it starts, and it leaves; an active one where it waits for its
        forward), waiting ones admitted (first come first served, under the memory cap) and
        started, and every running request that waits on a Pass."""
        s = self.sched
        with s._guard:
            ending = [r for r in [*self.waiting, *self.active]
                      if r.stopped and not r.done.is_set()]
            self.waiting = deque(r for r in self.waiting if r not in ending)
        if ending:  # (ended before admission, so that a failure there loses none of them)
            with s.lock:
                for r in ending:
                    r.advance(Interrupted("the run was interrupted"))
        with s._guard:
            admitted = self._admit()
        if admitted:  # (else no lock: the other lanes' jobs run on)
            with s.lock:
                for r in admitted:
                    r.advance(None)
        return [r for r in self.active if r.pending is not None]

    def update(self, batch: list[Request], outs: list[Any]) -> None:
        """Hand each request its Pass's output (it runs to its next Pass or its end), and
        retire the requests that ended."""
        s = self.sched
        with s.lock:
            if batch:
                st = s.stats
                st.ticks += 1
                st.passes += len(batch)
                st.widest = max(st.widest, len(batch))
            for r, out in zip(batch, outs):
                r.advance(out)
        self._retire()

    def _admit(self) -> list[Request]:
        """Waiting requests made active, first come first served, while they fit (_fits);
        under sched._guard."""
        s, admitted = self.sched, []
        while self._fits():
            admitted.append(self.waiting.popleft())
            self.active.append(admitted[-1])
        if admitted:
            jobs, held = s._held()
            st = s.stats
            st.jobs += len(admitted)
            st.largest = max(st.largest, *(r.cost for r in admitted))
            st.peak_jobs = max(st.peak_jobs, jobs)
            st.peak_kv_bytes = max(st.peak_kv_bytes, held)
        return admitted

    def _fits(self) -> bool:
        """Whether the first waiting request may start now: every lane's jobs then hold at most
        max_kv_bytes, or none is active anywhere (then one larger than that runs alone); under
        sched._guard."""
        s = self.sched
        jobs, held = s._held()
        return bool(self.waiting) and (not jobs or held + self.waiting[0].cost <= s.max_kv_bytes)

    def _retire(self) -> None:
        """Ended requests leave; their bytes free, a lane waiting for them is woken."""
        s = self.sched
        with s._guard:
            left = [r for r in self.active if not r.done.is_set()]
            if len(left) < len(self.active):
                self.active = left
                s._changed.notify_all()
