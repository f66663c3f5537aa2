"""PRMs named by string load once per process, like engines: a second search.solve with the
same prm: spec loads nothing, threads asking at once share one load, and a PRM's load time is
reported apart from the search's (Result.load_seconds, not usage.seconds)."""

from __future__ import annotations

import copy
import threading

import pytest
from prm_checkpoints import math_shepherd

import rewards.prm_load
import search
from rewards.prm_hub import HubPRM
from search import api
from search.engines.fake import ScriptedEngine
from search.engines.hf import HFEngine
from search.types import Problem


@pytest.fixture
def counted(monkeypatch):
    """Every PRM model load (rewards.prm_load.load_head), by folder."""
    loads: list[str] = []
    real = rewards.prm_load.load_head

    def load_head(where, fmt, **kw):
        loads.append(where)
        return real(where, fmt, **kw)

    monkeypatch.setattr(rewards.prm_load, "load_head", load_head)
    return loads


def test_a_second_solve_with_the_same_prm_loads_nothing(tiny_model, tmp_path, counted):
    folder = math_shepherd(tmp_path / "ms")
    model, tok = tiny_model
    eng = HFEngine(copy.deepcopy(model), tok, chat=False, device="cpu")
    spec = f"prm:{folder},format=math-shepherd"
    kw = dict(engine=eng, scorer=spec, n=2, m=1, step_tokens=4, max_depth=2, progress=False)
    first = search.solve(Problem(prompt="1+2="), "beam", **kw)
    second = search.solve(Problem(prompt="3+4="), "beam", **kw)
    assert counted == [str(folder)]
    assert first.usage.scorer_calls > 0 and second.usage.scorer_calls > 0
    assert second.load_seconds < first.load_seconds
    prm = api.get_scorer(spec, eng)
    assert prm is api.get_scorer(f"prm:{folder}, format=math-shepherd", eng)  # same spec
    assert isinstance(prm, HubPRM) and prm.load_seconds > 0 and counted == [str(folder)]


def test_threads_asking_at_once_share_one_load(tmp_path, counted):
    folder = math_shepherd(tmp_path / "ms")
    spec = f"prm:{folder},format=math-shepherd"
    engine = ScriptedEngine(lambda path: [])  # a PRM ignores the generator engine
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(api.get_scorer(spec, engine)))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 4 and all(g is got[0] for g in got)
    assert counted == [str(folder)]
