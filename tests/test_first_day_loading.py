"""Loading from several threads at once, and loading kept out of a search's seconds: one load
per model while the other threads wait for it; a fresh process whose threads all solve on
tiny-arith at once answers in every thread without transformers' weight report; the time a
solve spends loading is Result.load_seconds, never usage.seconds."""

from __future__ import annotations

import threading
import time

import pytest
from test_budget_limits import deep

import search
from search import api
from search.engines.fake import ScriptedEngine
from search.types import Budget


@pytest.fixture
def slow_loads(monkeypatch):
    """api's loader replaced by one that takes 1 s and records every name it loads."""
    loads: list[str] = []

    def load(name, **kwargs):
        loads.append(name)
        time.sleep(1.0)
        return ScriptedEngine(deep, tokens_per_step=3)

    monkeypatch.setattr(api, "_ENGINES", {})
    monkeypatch.setattr(api, "_load_engine", load)
    monkeypatch.setattr(api, "check_engine", lambda engine: engine)
    return loads


def test_threads_asking_for_one_model_share_its_one_load(slow_loads):
    gate = threading.Barrier(8)
    got: list[object] = [None] * 8

    def one(i: int) -> None:
        gate.wait()
        got[i] = api.get_engine("model-a" if i % 2 else "model-b")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(slow_loads) == ["model-a", "model-b"]  # one load per name
    assert len({id(e) for e in got[1::2]}) == 1 and len({id(e) for e in got[0::2]}) == 1
    assert got[0] is not got[1]


def test_loading_is_not_charged_to_the_search(slow_loads):
    """A load of 1 s against a budget of 0.9 s: the search still runs to its answer, and
    the load is reported apart."""
    result = search.solve("toy", "greedy", Budget(seconds=0.9), engine="slow-model",
                          progress=False)
    assert (result.status, result.answer) == ("ok", "1")
    assert "cut_by" not in result.stats
    assert result.load_seconds >= 1.0
    warm = search.solve("toy", "greedy", Budget(seconds=0.9), engine="slow-model",
                        progress=False)
    assert warm.answer == "1" and slow_loads == ["slow-model"]  # loaded once, then cached


def test_eight_threads_load_tiny_arith_at_once_in_a_fresh_process():
    """What reports.bench.loading runs 20 times: one fresh process, 8 threads solving on
    tiny-arith behind a barrier; every thread answers, all the same answer, and stderr holds
    no weight report or traceback."""
    from reports.bench.loading import one_run

    run = one_run("tiny-arith", 8)
    assert not run["crashed"], run["why"]
    assert len(run["answers"]) == 1 and len(run["load_seconds"]) == 8
