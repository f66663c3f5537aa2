"""search.runtime.omp: releasing a thread's idle OpenMP pool joins its worker threads, and
serving (search.runtime.sched) leaves one pool at a time: the caller's goes when serving
starts, the owner's when it ends. (What that buys is timed in reports/bench/eval.py.)"""

from __future__ import annotations

import os
import threading
import time

import pytest
import torch

from search.runtime import omp
from search.runtime.sched import SCHED, call

pytestmark = pytest.mark.skipif(
    omp._runtime() is None or torch.get_num_threads() < 2 or not os.path.isdir("/proc/self/task"),
    reason="needs torch's OpenMP runtime found in /proc/self/maps and >= 2 torch threads")


def os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def parallel_op() -> None:
    """One kernel big enough to run as a parallel region (starts the caller's pool)."""
    a = torch.ones(1 << 20)
    torch.mul(a, 2.0).sum()


def pool_threads_after(fn) -> tuple[int, int]:
    """(OS threads while a fresh Python thread's pool is up, after fn ran in that thread)."""
    out: dict[str, int] = {}

    def body() -> None:
        parallel_op()
        out["up"] = os_threads()
        fn()
        out["after"] = os_threads()

    t = threading.Thread(target=body)
    t.start()
    t.join()
    return out["up"], out["after"]


def test_release_joins_the_calling_threads_pool_workers():
    up, after = pool_threads_after(lambda: None)
    assert after == up  # a pool outlives its parallel regions
    up, after = pool_threads_after(lambda: omp.release_pool())
    assert after < up


def test_released_pool_comes_back_on_the_next_parallel_region():
    def again() -> None:
        assert omp.release_pool()
        n = os_threads()
        parallel_op()
        assert os_threads() > n
        a = torch.arange(1 << 20, dtype=torch.float32)
        assert float((a * 2).sum()) == float(a.sum()) * 2  # kernels run as before

    pool_threads_after(again)


def settle(above: int) -> int:
    """OS threads once the owner has released its pool (it does so when it sees serving end),
    waiting up to 10 s for the count to fall to `above` or less."""
    deadline = time.monotonic() + 10
    while os_threads() > above and time.monotonic() < deadline:
        time.sleep(0.01)
    return os_threads()


def test_serving_releases_the_callers_pool_then_the_owners():
    with SCHED.serving():  # the owner thread exists from here on
        SCHED.run(call(lambda: None))
    parallel_op()  # this thread has a pool
    before = os_threads()
    with SCHED.serving():
        during = os_threads()  # this thread's pool released; the owner has none
        SCHED.run(call(parallel_op))  # the owner's parallel region: its pool
        with_owner = os_threads()
    assert during < before
    assert with_owner > during
    assert settle(during) == during  # the owner's pool went when serving ended
