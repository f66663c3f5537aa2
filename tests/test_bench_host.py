"""reports/bench/host.py's owner-thread profile: exclusive times per category (hand-computed on
fake clocks), probes installed and put back everywhere a function is held, and a real tiny
grid whose categories add up to its wall."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import types
from typing import Any

import pytest
from kernel_mark import needs_kernel

from reports.bench import host
from reports.bench.host import (
    CATEGORIES,
    IDLE,
    PIECES,
    REST,
    Probes,
    Tally,
    breakdown,
    probed,
    render,
)


class Ticks:
    """A hand-driven clock: reads what was last added."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_probes_count_exclusive_time_by_hand() -> None:
    wall, cpu = Ticks(), Ticks()
    probes = Probes(clock=wall, cpu=cpu)

    def inner() -> None:
        wall.now += 3.0
        cpu.now += 1.0

    p_inner = probes.wrap(inner, "inner")

    def outer() -> int:
        wall.now += 1.0
        p_inner()
        wall.now += 2.0
        cpu.now += 0.5
        p_inner()
        return 7

    assert probes.wrap(outer, "outer")() == 7
    # outer: 1 + 3 + 2 + 3 = 9 s, of which 6 in inner; CPU 0.5 + 2 x 1
    assert probes.tally.wall == {"outer": 3.0, "inner": 6.0}
    assert probes.tally.cpu == {"outer": 0.5, "inner": 2.0}
    assert probes.tally.calls == {"outer": 1, "inner": 2}


def test_a_raising_probe_still_counts_and_unwinds() -> None:
    wall = Ticks()
    probes = Probes(clock=wall, cpu=Ticks())

    def boom() -> None:
        wall.now += 2.0
        raise ValueError("boom")

    p_boom = probes.wrap(boom, "boom")

    def outer() -> None:
        wall.now += 1.0
        with contextlib.suppress(ValueError):
            p_boom()

    probes.wrap(outer, "outer")()
    assert probes.tally.wall == {"outer": 1.0, "boom": 2.0}


def test_breakdown_adds_up_to_the_wall() -> None:
    tally = Tally()
    for cat, w, c in (("GEMMs", 4.0, 3.0), ("attention", 2.0, 2.0), ("sampling", 1.0, 0.5),
                      (IDLE, 0.5, 0.0), (PIECES, 1.5, 1.5)):
        tally.wall[cat], tally.cpu[cat], tally.calls[cat] = w, c, 3
    rows = breakdown(10.0, tally)
    assert [r.category for r in rows] == list(CATEGORIES)
    by = {r.category: r for r in rows}
    assert by[REST].wall == pytest.approx(1.0) and by[REST].cpu is None  # 10 - 9
    assert by["GEMMs"].share == pytest.approx(0.4) and by["GEMMs"].cpu == 3.0
    assert sum(r.wall for r in rows) == pytest.approx(10.0)
    assert sum(r.share for r in rows) == pytest.approx(1.0)
    text = render(rows, "fake")
    assert "| GEMMs | 4.00 | 40.0% | 3.00 | 3 |" in text
    assert ("kernels seen from Python 60.0% of the wall, TorchScript layer pieces 15.0%, "
            "everything else 25.0%") in text  # GEMMs + attention; the pieces; the rest


def test_probed_installs_everywhere_and_restores(monkeypatch: pytest.MonkeyPatch) -> None:
    # a fake project module and one importing its function by name, a class with a
    # staticmethod and a method
    src = types.ModuleType("search._fake_src")
    user = types.ModuleType("search._fake_user")

    def f(x: int) -> int:
        return x + 1

    class C:
        @staticmethod
        def make(x: int) -> int:
            return 2 * x

        def go(self, x: int) -> int:
            return self.make(x) + user.f(x)  # type: ignore[attr-defined]

    src.f, src.C = f, C  # type: ignore[attr-defined]
    user.f = f  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, src.__name__, src)
    monkeypatch.setitem(sys.modules, user.__name__, user)
    table = (("a", "search._fake_src", "f"), ("b", "search._fake_src:C", "make"),
             ("c", "search._fake_src:C", "go"), ("d", "search._fake_src", "absent"))
    static, go = C.__dict__["make"], C.__dict__["go"]
    probes = Probes()
    with pytest.raises(RuntimeError), probed(probes, table):
        assert src.f is not f and user.f is src.f  # type: ignore[attr-defined]
        assert C().go(3) == 6 + 4 and user.f(1) == 2  # type: ignore[attr-defined]
        raise RuntimeError("the block fails")
    assert src.f is f and user.f is f  # type: ignore[attr-defined]
    assert C.__dict__["make"] is static and C.__dict__["go"] is go
    assert dict(probes.tally.calls) == {"a": 2, "b": 1, "c": 1}


def test_a_lanes_waits_for_a_job_count_as_idle() -> None:
    """The lane's blocking wait (sched._Lane.wait: nothing in flight) is the idle probe."""
    from search.runtime.passes import call
    from search.runtime.sched import Scheduler

    sched = Scheduler()
    probes = Probes(owns=lambda: threading.current_thread().name.startswith("tts-engine"))
    with probed(probes, ((IDLE, "search.runtime.sched:_Lane", "wait"),)), \
            sched.serving(lanes=1):
        sched.run(call(lambda: None))
        time.sleep(0.05)  # the lane waits for the next job
        sched.run(call(lambda: None))
    assert probes.tally.calls[IDLE] >= 1 and probes.tally.wall[IDLE] > 0


def test_only_the_owner_thread_is_counted() -> None:
    wall = Ticks()
    probes = Probes(owns=lambda: threading.current_thread().name == "owner", clock=wall,
                    cpu=Ticks())

    def work() -> None:
        wall.now += 1.0

    probed_work = probes.wrap(work, "work")
    for name in ("owner", "other", "owner"):
        t = threading.Thread(target=probed_work, name=name)
        t.start()
        t.join()
    probed_work()  # this thread is not the owner either
    assert probes.tally.calls == {"work": 2} and probes.tally.wall == {"work": 2.0}


def test_a_tiny_grid_adds_up_and_puts_everything_back(tmp_path) -> None:
    from problems import arith
    from reports.eval.grid import Grid
    from search.api import get_engine
    from search.runtime import kv, passes, sampling, sched

    engine: Any = get_engine("tiny-arith")
    before = (kv.SlabCache.__dict__["from_paths"], passes.sample_many, sampling.sample_many,
              sched.Request.advance, sched._Lane.wait, engine.scheduler.lanes)
    grid = Grid(arith.generate(2, seed=7, difficulty=4), ["best_of_n"], [4], [0],
                dataset="arith")
    wall, rows, others = host.profile_grid(grid, tmp_path / "g.jsonl", 2,
                                           engine="tiny-arith", scorer="steps",
                                           model="tiny-arith")
    assert (kv.SlabCache.__dict__["from_paths"], passes.sample_many, sampling.sample_many,
            sched.Request.advance, sched._Lane.wait, engine.scheduler.lanes) == before
    by = {r.category: r for r in rows}
    assert sum(r.wall for r in rows) == pytest.approx(wall)
    # the owner ran the forwards, drew the tokens, built the caches and ran the jobs
    # (every layer in TorchScript; Python calls the LM head's GEMM and the final norm)
    for cat in ("GEMMs", PIECES, "sampling", "batch caches built",
                "jobs' Python (decode, feed loops)", "lean forward's small ops"):
        assert by[cat].calls > 0 and by[cat].wall > 0, cat
    assert all(r.wall >= 0 for r in rows if r.category != REST)
    assert others >= 0


@needs_kernel
def test_forward_alone_reports_kernels_within_its_wall() -> None:
    """--parts forward: a merged forward of several Passes timed alone; the kernels' time is
    a part of the forward's (0-100%), each kind reported, and every Pass's cache is back at
    its length after the rounds (each forward rewound)."""
    import re

    from reports.bench.forward import forward_alone
    from search.api import get_engine

    out = forward_alone(get_engine("tiny-arith"), passes=3, forwards=2)
    m = re.fullmatch(r"one merged forward of 3 one-token Passes, alone: ([\d.]+) ms \((.*) ms\); "
                     r"kernels ([\d.]+)% of it\n  under torch's profiler \(which sees inside "
                     r"TorchScript\): ([\d.]+) ms, of it (.*) ms: kernels ([\d.]+)%", out)
    assert m, out
    wall, share = float(m.group(1)), float(m.group(3))
    kinds = dict(re.findall(r"(GEMMs|attention|norms, rotary, SiLU) ([\d.]+)", m.group(2)))
    assert set(kinds) == {"GEMMs", "attention", "norms, rotary, SiLU"}
    assert wall > 0 and 0 < share <= 100
    assert sum(float(v) for v in kinds.values()) <= wall * 1.001
    # the profiler sees every kind inside the pieces, and they fit in its forward's time
    profiled, ops, share = float(m.group(4)), m.group(5), float(m.group(6))
    inside = dict(re.findall(r"(GEMMs|attention|norms, rotary, SiLU) ([\d.]+)", ops))
    assert set(inside) == set(kinds) and all(float(v) > 0 for v in inside.values())
    assert 0 < share <= 100 and sum(float(v) for v in inside.values()) <= profiled * 1.001
