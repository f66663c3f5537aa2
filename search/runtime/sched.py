"""One owner thread for the models and KV caches: many searches, one batched forward per step.

Engine calls are written as *jobs*: generators that yield a `Pass` (one forward over their
own rows and their own batch cache) and get its output back, so a decode loop reads as a
plain loop. `run(job)` drives a job to its return value:

  inline   (the default) in the calling thread, each Pass alone, under one lock: any number
           of threads may share an engine, one call at a time;
  serving  (`with SCHED.serving():`, what search.solve_many opens) in the owner thread, which
           keeps every admitted job in flight and, each tick, runs the Passes they all wait
           on as one forward per model (`forward_many`: one GEMM per linear over every job's
           rows) before handing each job its own output. A job joins at the next tick and
           leaves as soon as its own rows are done (continuous batching): a search waits for
           nobody's rows but its own, plus at most the one tick already under way.

Results do not depend on the batch: a Pass keeps its own cache, mask, padding and attention
(lean.LeanLlama.forward_many runs attention per Pass, on the same tensors it would see alone),
and every op the Passes share computes each row the same way whatever rows are beside it
(packed linears, norms, element-wise ops; tests/test_concurrency.py checks it bit for bit).
A job carries its search's state itself (the engine passes its search.session.Session
into the job it builds), so it charges that search's Meter and frees that search's trees
only, whichever thread runs it; `run` takes the search's cancel event (Session.cancel),
which ends the job early once set.

Memory: jobs declare the bytes of batch cache they will hold (`cost`); the owner admits new
jobs, first come first served, while the jobs in flight hold at most `max_kv_bytes` (a job
larger than that runs alone). Errors stay with their job: a merged forward that raises is
rewound and its Passes re-run one by one, and only the job whose Pass fails gets the error.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Generator, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch

from search.runtime.omp import release_pool
from search.runtime.sampling import Draw, sample_many

T = TypeVar("T")


class Interrupted(RuntimeError):
    """The run that started this job was interrupted (Ctrl-C, SIGTERM): its model work ends
    at the next forward, and its later engine calls fail at once (Scheduler.interrupt)."""
DEFAULT_KV_BYTES = 2 << 30  # batch caches in flight while serving
PASS_TOKENS = 4096  # most tokens one merged forward takes (bounds its activations)


@dataclass(eq=False)
class Pass:
    """One forward a job asks for: input_ids/position_ids [B, q] after its own batch cache,
    under its own attention mask; `keep` is logits_to_keep (None: the forward takes none).
    draw: also draw each row's next token from its last logits (the job then gets a
    `Sampled`); the draws of every Pass in a tick are made together (sampling.sample_many)."""

    forward: Any
    input_ids: Any
    position_ids: Any
    cache: Any
    mask: Any
    keep: int | None = 1
    hidden: bool = False
    draw: Draw | None = None

    @property
    def tokens(self) -> int:
        return int(self.input_ids.numel())

    def alone(self) -> Any:
        extra = {} if self.keep is None else {"logits_to_keep": self.keep}
        return self.forward(input_ids=self.input_ids, attention_mask=self.mask,
                            position_ids=self.position_ids, past_key_values=self.cache,
                            use_cache=True, output_hidden_states=self.hidden, **extra)


@dataclass
class Sampled:
    """What a Pass with a `draw` returns: the forward's output and the drawn tokens [B] with
    their model logprobs [B]."""

    out: Any
    tokens: Any
    logprobs: Any


Job = Generator[Pass, Any, T]


def run_passes(passes: Sequence[Pass], *, limit: int = PASS_TOKENS) -> list[Any]:
    """Each Pass's output (or the exception it raised), merged into one forward per model
    where the model can (a row-invariant forward_many: lean.LeanLlama on packed linears), in
    chunks of at most `limit` tokens; then the draws of the Passes that ask for them, all at
    once."""
    out = _forwards(passes, limit)
    todo = [i for i, p in enumerate(passes)
            if p.draw is not None and not isinstance(out[i], BaseException)]
    if todo:
        try:
            drawn = sample_many([out[i].logits[:, -1] for i in todo],
                                [passes[i].draw for i in todo])  # type: ignore[misc]
        except Exception:  # find whose: draw one by one
            drawn = [_draw_alone(out[i], passes[i]) for i in todo]
        for i, d in zip(todo, drawn):
            out[i] = d if isinstance(d, BaseException) else Sampled(out[i], *d)
    return out


def _draw_alone(out: Any, p: Pass) -> Any:
    try:
        return sample_many([out.logits[:, -1]], [p.draw])[0]  # type: ignore[list-item]
    except Exception as err:
        return err


def _forwards(passes: Sequence[Pass], limit: int) -> list[Any]:
    out: list[Any] = [None] * len(passes)
    groups: dict[int, list[int]] = {}
    for i, p in enumerate(passes):
        if _mergeable(p):
            groups.setdefault(id(p.forward), []).append(i)
        else:
            out[i] = _alone(p)
    for idx in groups.values():
        chunk: list[int] = []
        size = 0
        for i in idx:
            if chunk and size + passes[i].tokens > limit:
                _merged([passes[j] for j in chunk], chunk, out)
                chunk, size = [], 0
            chunk.append(i)
            size += passes[i].tokens
        _merged([passes[j] for j in chunk], chunk, out)
    return out


def _mergeable(p: Pass) -> bool:
    """Whether the Pass can share a forward_many (a malformed one runs alone, and fails alone)."""
    try:
        return bool(getattr(p.forward, "row_invariant", False) and
                    p.forward.handles(p.cache, p.mask))
    except Exception:  # noqa: BLE001  # its own forward will say what is wrong
        return False


def _alone(p: Pass) -> Any:
    try:
        return p.alone()
    except Exception as err:  # the job that asked gets it
        return err


def _merged(passes: list[Pass], idx: list[int], out: list[Any]) -> None:
    if len(passes) == 1:
        out[idx[0]] = _alone(passes[0])
        return
    lengths = [p.cache.length for p in passes]
    try:
        results = passes[0].forward.forward_many(passes)
        if len(results) != len(passes):
            raise RuntimeError(f"forward_many gave {len(results)} outputs for {len(passes)} "
                               "Passes")
    except Exception:  # find whose Pass it was: rewind every cache, run each alone
        results = [_rewound(p, n) for p, n in zip(passes, lengths)]
    for i, r in zip(idx, results):
        out[i] = r


def _rewound(p: Pass, length: int) -> Any:
    """The Pass run alone after its cache is rewound to `length` (what a failed merged
    forward may have written is forgotten); the error, where it cannot be."""
    try:
        p.cache.rewind(length)
    except Exception as err:  # noqa: BLE001  # this Pass's job gets it
        return err
    return _alone(p)


def drive(job: Job[T]) -> T:
    """Run a job to its end in this thread, each Pass alone (a Pass that raises raises in
    the job, as under the owner thread)."""
    try:
        with torch.inference_mode():
            p = next(job)
            while True:
                out = run_passes([p])[0]
                p = job.throw(out) if isinstance(out, BaseException) else job.send(out)
    except StopIteration as stop:
        return stop.value


def call(fn: Any, *args: Any) -> Job[Any]:
    """A job that runs fn(*args) and asks for no forward."""
    return fn(*args)
    yield  # unreachable: makes this a generator  # noqa: B901


@dataclass(eq=False)
class _Task:
    job: Job[Any]
    cost: int
    cancel: threading.Event | None  # the search's (Session.cancel): set, the job ends
    done: threading.Event = field(default_factory=threading.Event)
    pending: Pass | None = None
    value: Any = None
    error: BaseException | None = None

    @property
    def stopped(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def advance(self, sent: Any, first: bool = False) -> None:
        """Run the job to its next Pass (or its end)."""
        try:
            if isinstance(sent, BaseException):
                p = self.job.throw(sent)
            else:
                p = next(self.job) if first else self.job.send(sent)
        except StopIteration as stop:
            self.pending, self.value = None, stop.value
            self.done.set()
            return
        except BaseException as err:  # noqa: BLE001  # the caller re-raises it
            self.pending, self.error = None, err
            self.done.set()
            return
        if not isinstance(p, Pass):
            self.job.close()
            self.pending, self.error = None, TypeError(f"a job yielded {p!r}, not a Pass")
            self.done.set()
            return
        self.pending = p


@dataclass
class SchedStats:
    """Counters of the owner thread (while serving)."""

    ticks: int = 0  # rounds of merged forwards
    passes: int = 0  # Passes run
    rows: int = 0  # rows over those Passes
    widest: int = 0  # most Passes in one tick
    jobs: int = 0  # jobs run
    peak_jobs: int = 0  # most jobs in flight at once
    peak_kv_bytes: int = 0  # most declared batch-cache bytes in flight at once
    largest: int = 0  # most batch-cache bytes one job declared


class Scheduler:
    """The process's one owner of models and caches (see module doc)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()  # models and caches: one job step at a time
        self.max_kv_bytes = DEFAULT_KV_BYTES
        self.stats = SchedStats()
        # a task; None: serving ended; _WAKE: look at the interrupted callers
        self._inbox: queue.SimpleQueue[_Task | object | None] = queue.SimpleQueue()
        self._serving = 0
        self._guard = threading.Lock()  # _serving and _thread
        self._thread: threading.Thread | None = None

    @contextmanager
    def serving(self, max_kv_bytes: int | None = None) -> Iterator[Scheduler]:
        """Route every job to the owner thread for the block (nested blocks share it)."""
        if max_kv_bytes is not None and max_kv_bytes < 1:
            raise ValueError(f"max_kv_bytes must be positive, got {max_kv_bytes}")
        with self._guard:
            if max_kv_bytes is not None:
                self.max_kv_bytes = max_kv_bytes
            self._serving += 1
            if self._serving == 1:  # the owner's OpenMP team should be the only one (omp.py)
                release_pool()
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="tts-engine",
                                                daemon=True)
                self._thread.start()
        try:
            yield self
        finally:
            with self._guard:
                self._serving -= 1
                if not self._serving:
                    self.max_kv_bytes = DEFAULT_KV_BYTES
                    self._inbox.put(None)  # the owner, once idle, releases its OpenMP pool

    def interrupt(self, cancels: Iterable[threading.Event]) -> None:
        """End the model work of the searches with these cancel events (Session.cancel: an
        interrupted search.many.concurrently's): each job in flight raises Interrupted at its
        next forward, and their later calls raise it at once."""
        for cancel in cancels:
            cancel.set()
        self._inbox.put(_WAKE)  # the owner sees it at once, even if idle

    def run(self, job: Job[T], *, cost: int = 0, cancel: threading.Event | None = None) -> T:
        """The job's return value (or its exception), computed inline or by the owner.
        cancel: the calling search's (Session.cancel); once set, the job raises
        Interrupted."""
        if cancel is not None and cancel.is_set():
            job.close()
            raise Interrupted("the run was interrupted")
        if not self._serving or threading.current_thread() is self._thread:
            with self.lock:
                return drive(job)
        task = _Task(job, cost, cancel)
        self._inbox.put(task)
        task.done.wait()
        if task.error is not None:
            raise task.error
        return task.value

    def call(self, fn: Any, *args: Any, cancel: threading.Event | None = None) -> Any:
        """fn(*args), as a job (in the owner thread while serving); cancel as for `run`."""
        return self.run(call(fn, *args), cancel=cancel)

    # -- the owner thread ----------------------------------------------------------------
    def _loop(self) -> None:
        active: list[_Task] = []
        waiting: deque[_Task] = deque()
        while True:
            try:
                self._serve(active, waiting)
            except BaseException as err:  # noqa: BLE001  # a bug here: fail every job, go on
                for task in [*active, *waiting]:
                    task.pending, task.error = None, err
                    task.done.set()
                active.clear()
                waiting.clear()

    def _serve(self, active: list[_Task], waiting: deque[_Task]) -> None:
        held = sum(t.cost for t in active)  # declared bytes of the active jobs
        while True:
            block = not active and not waiting
            while True:
                try:
                    task = self._inbox.get(block=block)
                except queue.Empty:
                    break
                if isinstance(task, _Task):
                    waiting.append(task)
                elif task is None and not self._serving and not active and not waiting:
                    release_pool()  # the threads that run torch now get the cores' spin
                    continue
                block = False
            self._end_interrupted(active, waiting)
            admitted = []
            while waiting and (not active or held + waiting[0].cost <= self.max_kv_bytes):
                task = waiting.popleft()
                held += task.cost
                self.stats.largest = max(self.stats.largest, task.cost)
                active.append(task)
                admitted.append(task)
            st = self.stats
            st.jobs += len(admitted)
            st.peak_jobs = max(st.peak_jobs, len(active))
            st.peak_kv_bytes = max(st.peak_kv_bytes, held)
            with self.lock, torch.inference_mode():
                for task in admitted:
                    task.advance(None, first=True)
                ready = [t for t in active if t.pending is not None]
                if ready:
                    outs = run_passes([t.pending for t in ready])  # type: ignore[misc]
                    st.ticks += 1
                    st.passes += len(ready)
                    st.rows += sum(_rows(t.pending) for t in ready)
                    st.widest = max(st.widest, len(ready))
                    for task, out in zip(ready, outs):
                        task.advance(out)
            for task in [t for t in active if t.done.is_set()]:
                active.remove(task)
                held -= task.cost

    def _end_interrupted(self, active: list[_Task], waiting: deque[_Task]) -> None:
        """The jobs of interrupted searches end with Interrupted: a waiting one before it
        starts, an active one thrown it where it waits for its forward."""
        for task in [t for t in waiting if t.stopped]:
            waiting.remove(task)
            task.job.close()
            task.pending, task.error = None, Interrupted("the run was interrupted")
            task.done.set()
        ending = [t for t in active if t.stopped and not t.done.is_set()]
        if ending:
            with self.lock, torch.inference_mode():
                for task in ending:
                    task.advance(Interrupted("the run was interrupted"))


def _rows(p: Pass | None) -> int:
    """A Pass's rows, for the counters (0 where its input is malformed: its job fails)."""
    shape = getattr(getattr(p, "input_ids", None), "shape", None)
    return int(shape[0]) if shape else 0


_WAKE = object()
SCHED = Scheduler()
