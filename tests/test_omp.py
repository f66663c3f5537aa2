"""search.runtime.omp: releasing a thread's idle OpenMP pool joins its worker threads, and
serving (search.runtime.sched) leaves one pool at a time: the caller's goes when serving
starts, the owner's (and the owner) when it ends. (What that buys is timed in reports/bench/eval.py.)"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import pytest
import torch

from search.runtime import omp
from search.runtime.passes import call
from search.runtime.sched import Scheduler

pytestmark = pytest.mark.skipif(
    omp._runtime() is None or torch.get_num_threads() < 2 or not os.path.isdir("/proc/self/task"),
    reason="needs torch's OpenMP runtime found in /proc/self/maps and >= 2 torch threads")


_libc = ctypes.CDLL(None, use_errno=True)
_PR_SET_NAME = 15


T = TypeVar("T")


def in_named_thread(fn: Callable[[], T], name: str) -> T:
    """fn() run in a fresh thread whose OS name is `name` (<= 15 bytes): the threads it starts
    (its OpenMP pool's workers, a scheduler's owner) inherit the name, so counting threads of
    that name is not disturbed by other threads of the process starting or ending. fn's
    exception is raised here."""
    out: dict[str, object] = {}

    def body() -> None:
        _libc.prctl(_PR_SET_NAME, name.encode(), 0, 0, 0)
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            out["error"] = e

    t = threading.Thread(target=body)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]  # type: ignore[misc]
    return out["value"]  # type: ignore[return-value]


def named(name: str) -> int:
    """Threads of this process whose OS name is `name`."""
    n = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                n += f.read().strip() == name
        except OSError:  # the thread ended while listed
            pass
    return n


def parallel_op() -> None:
    """One kernel big enough to run as a parallel region (starts the caller's pool)."""
    a = torch.ones(1 << 20)
    torch.mul(a, 2.0).sum()


def pool_threads_after(fn, name: str) -> tuple[int, int]:
    """(threads named `name` while a fresh thread's pool is up, after fn ran in that thread)."""
    def body() -> tuple[int, int]:
        parallel_op()
        up = named(name)
        fn()
        return up, named(name)

    return in_named_thread(body, name)


def test_release_joins_the_calling_threads_pool_workers():
    up, after = pool_threads_after(lambda: None, "omp-keep")
    assert up > 1 and after == up  # a pool outlives its parallel regions
    # (a joined worker's /proc entry can outlast the join a moment: settle)
    up, after = pool_threads_after(lambda: (omp.release_pool(), settle("omp-release", 1)),
                                   "omp-release")
    assert up > 1 and after == 1  # the thread alone


def test_released_pool_comes_back_on_the_next_parallel_region():
    def again() -> None:
        assert omp.release_pool()
        assert settle("omp-again", 1) == 1  # (its workers leave as they wake)
        parallel_op()
        assert named("omp-again") > 1
        a = torch.arange(1 << 20, dtype=torch.float32)
        assert float((a * 2).sum()) == float(a.sum()) * 2  # kernels run as before

    pool_threads_after(again, "omp-again")


def settle(name: str, above: int) -> int:
    """Threads named `name` once the owner has released its pool (it does so when it sees
    serving end), waiting up to 10 s for the count to fall to `above` or less."""
    deadline = time.monotonic() + 10
    while named(name) > above and time.monotonic() < deadline:
        time.sleep(0.01)
    return named(name)


def test_serving_releases_the_callers_pool_then_the_owners():
    """One lane (on the process's threads: two lanes run on one each, and have no pools)."""
    name = "omp-serving"

    def body() -> tuple[int, int, int, int]:
        sched = Scheduler()
        parallel_op()  # this thread has a pool
        before = named(name)
        with sched.serving(lanes=1):
            during = named(name)  # this thread's pool released; the owner started, with none
            sched.run(call(parallel_op))  # the owner's parallel region: its pool
            with_owner = named(name)
        return before, during, with_owner, settle(name, 1)

    before, during, with_owner, after = in_named_thread(body, name)
    assert before > 1
    assert during == 2  # this thread and the owner
    assert with_owner > during
    assert after == 1  # the owner and its pool went when serving ended


def counts_in_a_new_thread() -> int:
    return in_named_thread(torch.get_num_threads, "omp-count")


def test_a_threads_count_is_its_own():
    """set_threads_here sets the calling thread's count, not the default that threads started
    later take (torch.set_num_threads sets both); threads_here puts it back after its block."""
    default = torch.get_num_threads()
    seen: dict[str, int] = {}

    def lane() -> None:
        omp.set_threads_here(1)
        seen["lane"] = torch.get_num_threads()
        seen["new"] = counts_in_a_new_thread()  # started after the lane set its own
        with omp.threads_here(default):
            seen["inside"] = torch.get_num_threads()
        seen["after"] = torch.get_num_threads()

    t = threading.Thread(target=lane)
    t.start()
    t.join()
    assert seen == {"lane": 1, "new": default, "inside": default, "after": 1}
    assert torch.get_num_threads() == default == counts_in_a_new_thread()


def test_two_lanes_split_the_threads_and_a_pass_that_cannot_merge_gets_them_all():
    """Two lanes: each job runs on threads // 2; a Pass whose model cannot merge (its own
    forward, whose bits may depend on the thread count) runs on the opener's count."""
    from search.runtime.passes import Pass, run_passes

    default = torch.get_num_threads()
    seen: list[int] = []

    class Alone:  # a model that cannot merge: no row_invariant
        def __call__(self, **kwargs):
            seen.append(torch.get_num_threads())
            return "out"

    def job():
        seen.append(torch.get_num_threads())
        out = yield Pass(Alone(), torch.zeros(1, 1), torch.zeros(1, 1), None, None, keep=None)
        return out

    sched = Scheduler()
    with sched.serving(lanes=2):
        assert sched.run(job()) == "out"
    assert seen == [default // 2, default]
    assert run_passes([Pass(Alone(), torch.zeros(1, 1), torch.zeros(1, 1), None, None,
                            keep=None)]) == ["out"]  # here: this thread's count
    assert seen[-1] == default == counts_in_a_new_thread()


def test_a_small_model_runs_its_lean_forwards_on_one_thread_where_workers_sleep(monkeypatch):
    """omp.one_thread: one intra-op thread a forward under the passive policy for weights that
    fit CACHED_BYTES; the caller's count (0) for larger weights or another policy. The forward
    runs on it and gives the caller its count back."""
    from search.runtime import lean
    from tests.test_lean import prepared, slab

    model, _ = prepared()
    weights = omp.weight_bytes(model)
    monkeypatch.setattr(omp, "WAIT_POLICY", "PASSIVE")
    assert omp.one_thread(weights) and lean.LeanLlama(model).threads == 1
    monkeypatch.setattr(omp, "CACHED_BYTES", weights - 1)
    assert not omp.one_thread(weights) and lean.LeanLlama(model).threads == 0
    monkeypatch.setattr(omp, "CACHED_BYTES", weights)
    monkeypatch.setattr(omp, "WAIT_POLICY", "")
    assert not omp.one_thread(weights) and lean.LeanLlama(model).threads == 0
    monkeypatch.setattr(omp, "WAIT_POLICY", "PASSIVE")
    fast, seen = lean.LeanLlama(model), []
    layers = fast._layers
    monkeypatch.setattr(fast, "_layers", lambda parts: seen.append(torch.get_num_threads())
                        or layers(parts))
    before = torch.get_num_threads()
    cache = slab(model, 2, [3, 3], 0, room=1)
    fast.forward_slab(torch.zeros(2, 1, dtype=torch.long), torch.full((2, 1), 3), cache,
                      cache.attention_mask(1), 1, False)
    assert seen == [1] and torch.get_num_threads() == before
