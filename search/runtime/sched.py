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
block and end once the last closes and they are idle.

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

import queue
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch

from search.runtime.omp import release_pool, set_threads_here, threads_here
from search.runtime.passes import Job, Pass, call, drive, run_passes

T = TypeVar("T")
DEFAULT_KV_BYTES = 2 << 30  # batch caches in flight while serving
MAX_LANES = 2  # owner threads by default (default_lanes)


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
    """One engine call in a lane: its state (the job, where its generator stands, and the
    Pass it waits on), the batch-cache bytes it may hold (`cost`: what admission budgets),
    its stop rule (`cancel`, the search's Session.cancel: once set, it ends with
    Interrupted), and its outcome (`value` or `error`, once `done`)."""

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
        self._guard = threading.RLock()  # _serving, the lanes' loads, _held, _jobs
        self._lanes: list[_Lane] = []  # while serving, and until their jobs are done
        self._open = 1  # lanes that take jobs in this serving block
        self._threads = (1, 1)  # intra-op threads: (a lane's, Passes that cannot merge)
        self._held = 0  # declared bytes of every lane's active jobs
        self._jobs = 0  # active jobs in every lane
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
                if not self._serving:
                    self.max_kv_bytes = DEFAULT_KV_BYTES
                    for lane in self._lanes:
                        lane.inbox.put(None)  # once idle, it ends (its OpenMP pool released)

    def interrupt(self, cancels: Iterable[threading.Event]) -> None:
        """Set these searches' cancel events (Session.cancel): their jobs raise Interrupted."""
        for cancel in cancels:
            cancel.set()
        with self._guard:
            lanes = list(self._lanes)
        for lane in lanes:
            lane.inbox.put(_WAKE)  # it sees it at once, even if idle

    def run(self, job: Job[T], *, cost: int = 0, cancel: threading.Event | None = None) -> T:
        """The job's return value (or its exception), computed inline or by a lane.
        cancel: the calling search's (Session.cancel); once set, the job raises
        Interrupted."""
        if cancel is not None and cancel.is_set():
            job.close()
            raise Interrupted("the run was interrupted")
        with self._guard:  # while serving, the open lane with the fewest jobs
            lanes = self._lanes[:self._open] if self._serving else []
            own = any(threading.current_thread() is la.thread for la in self._lanes)
            lane = None if own or not lanes else min(lanes, key=lambda la: la.load)
            if lane is not None:
                lane.load += 1
        if lane is None:
            with self.lock:  # inline (a lane's own call: its forward beside the other lanes')
                return drive(job, apart=self.apart) if own else drive(job)
        request = Request(job, cost, cancel)
        lane.inbox.put(request)
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


class _Lane:
    """One owner thread: its inbox (a Request; None: serving ended; _WAKE: look at the
    interrupted callers, or at memory freed elsewhere), its jobs in flight and waiting. It
    ends once serving has ended and it has nothing left to run."""

    def __init__(self, sched: Scheduler, index: int) -> None:
        self.sched = sched
        self.inbox: queue.SimpleQueue[Request | object | None] = queue.SimpleQueue()
        self.active: list[Request] = []
        self.waiting: deque[Request] = deque()
        self.load = 0  # requests handed to this lane, not yet done (under sched._guard)
        self.threads = 0  # this thread's intra-op count, once set
        self.thread = threading.Thread(target=self._loop, name=f"tts-engine-{index}",
                                       daemon=True)
        self.thread.start()

    def wait(self) -> Any:
        """The inbox's next item, waited for (nothing to run meanwhile)."""
        return self.inbox.get()

    @torch.inference_mode()  # every job step and forward of this thread
    def _loop(self) -> None:
        while True:
            try:
                while self._take(block=not self.active and not self._fits()):  # idle
                    if self.threads != self.sched._threads[0]:  # (a serving block's count)
                        self.threads = self.sched._threads[0]
                        set_threads_here(self.threads)
                    batch = self.schedule()  # then the forward, without the lock
                    outs = run_passes([r.pending for r in batch],  # type: ignore[misc]
                                      apart=self.sched.apart) if batch else []
                    self.update(batch, outs)
                return
            except BaseException as err:  # noqa: BLE001  # a bug here: fail every job, go on
                for r in [*self.active, *self.waiting]:
                    r.end(error=err)
                with self.sched._guard:
                    self.load -= len(self.waiting)
                self.waiting.clear()
                self._retire()

    def schedule(self) -> list[Request]:
        """This tick's batch: interrupted requests ended, waiting ones admitted (first come
        first served, under the memory cap) and started, and every running request that
        waits on a Pass."""
        self._end_interrupted()
        admitted = self._admit()
        if admitted:  # (else no lock: the other lanes' jobs run on)
            with self.sched.lock:
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

    def _take(self, block: bool) -> bool:
        """Move the inbox's requests to `waiting`, blocking where asked until an item comes (a
        request, an interrupt, a wake). False: serving has ended and this lane, with nothing
        left, has left the scheduler (its OpenMP pool released: the cores' spin goes elsewhere)."""
        while True:
            if block and not self.waiting:
                with self.sched._guard:
                    if not self.sched._serving and self.inbox.empty():
                        self.sched._lanes.remove(self)
                        release_pool()
                        return False
            try:
                item = self.wait() if block else self.inbox.get(block=False)
            except queue.Empty:
                return True
            if isinstance(item, Request):
                self.waiting.append(item)
            elif item is None and block:  # serving ended: look again
                continue
            block = False

    def _admit(self) -> list[Request]:
        """Waiting requests made active, first come first served, while they fit (_fits)."""
        s, admitted = self.sched, []
        with s._guard:
            while self._fits():
                r = self.waiting.popleft()
                s._held += r.cost
                s._jobs += 1
                self.active.append(r)
                admitted.append(r)
                s.stats.largest = max(s.stats.largest, r.cost)
            st = s.stats
            st.jobs += len(admitted)
            st.peak_jobs = max(st.peak_jobs, s._jobs)
            st.peak_kv_bytes = max(st.peak_kv_bytes, s._held)
        return admitted

    def _fits(self) -> bool:
        """Whether the first waiting request may start now: every lane's jobs then hold at most
        max_kv_bytes, or none is active anywhere (then one larger than that runs alone)."""
        with (s := self.sched)._guard:  # also from _admit, under it (an RLock)
            return bool(self.waiting) and (not s._jobs or
                                           s._held + self.waiting[0].cost <= s.max_kv_bytes)

    def _retire(self) -> None:
        """Ended requests leave; their bytes free, a lane waiting for them is woken."""
        s = self.sched
        done = [t for t in self.active if t.done.is_set()]
        if not done:
            return
        with s._guard:
            for r in done:
                self.active.remove(r)
                s._held -= r.cost
                s._jobs -= 1
                self.load -= 1
            waking = [la for la in s._lanes if la is not self and la.waiting]
        for la in waking:
            la.inbox.put(_WAKE)

    def _end_interrupted(self) -> None:
        """The jobs of interrupted searches end with Interrupted: a waiting one before it
        starts, an active one thrown it where it waits for its forward."""
        for r in [r for r in self.waiting if r.stopped]:
            self.waiting.remove(r)
            r.job.close()
            r.end(error=Interrupted("the run was interrupted"))
            with self.sched._guard:
                self.load -= 1
        ending = [t for t in self.active if t.stopped and not t.done.is_set()]
        if ending:
            with self.sched.lock:
                for r in ending:
                    r.advance(Interrupted("the run was interrupted"))


_WAKE = object()
