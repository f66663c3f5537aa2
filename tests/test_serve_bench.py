"""reports.bench.serve's realistic requests (the demo's problems, searches and widths), and
reports.bench.steady's closed loop over them."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from problems import arith
from reports import demo
from reports.bench import serve as bench


def test_the_bench_asks_the_demos_searches_on_the_demos_problems():
    demo_knobs = demo.knobs(demo.SELECT)
    assert {a: demo_knobs.get(a, {}) for a in demo.ALGOS} == bench.SEARCHES
    assert bench.DATA_SEED in demo.DATA_SEEDS
    reqs = bench.requests(16)
    want = arith.generate(16, seed=bench.DATA_SEED, difficulty=arith.DEFAULT_DIFFICULTY)
    assert [r.problem for r in reqs] == want and [r.seed for r in reqs] == list(range(16))
    assert set(Counter(r.algo for r in reqs)) == set(demo.ALGOS)
    for r in reqs:  # the demo's knobs, a width among its budgets, the step checker's scores
        assert demo_knobs.get(r.algo, {}).items() <= r.knobs.items()
        assert r.scorer == ("steps" if r.algo != "greedy" else None)
    widths = {r.knobs.get("n") for r in reqs if r.algo == "best_of_n"}
    assert widths == set(bench.WIDTHS)


def test_steady_runs_each_request_once_a_way_a_round_with_its_clients_in_flight(
        monkeypatch, capsys):
    from reports.bench import steady

    lock, calls, flight, peak = threading.Lock(), Counter(), [0], [0]

    def ask(c, model, r):
        with lock:
            calls[r] += 1
            flight[0] += 1
            peak[0] = max(peak[0], flight[0])
            n = calls[r]
        time.sleep(0.05)
        with lock:
            flight[0] -= 1
        return 0.0, ("changed" if n == 4 else r)  # the second round's closed loop differs

    monkeypatch.setattr(steady, "ask_request", ask)
    monkeypatch.setattr(steady, "requests", lambda n: list(range(n)))
    monkeypatch.setattr(steady, "client", lambda url: None)
    steady.steady("http://127.0.0.1:1", "m", count=12, clients=4, rounds=2)
    out = capsys.readouterr().out
    assert calls == Counter({r: 4 for r in range(12)})  # 2 rounds x (one by one, the loop)
    assert peak[0] == 4  # the loop holds its 4 clients' requests at once, never more
    assert "12 requests" in out and "4 clients" in out and "2 rounds" in out
    assert "differ from the first one-by-one round: 12 of 48" in out


@pytest.mark.parametrize("argv, said", [(["--clients", "1"], "--clients must be at least 2"),
                                        (["--count", "0"], "--count must be at least 1"),
                                        (["--rounds", "-1"], "--rounds must be at least 1")])
def test_steady_refuses_what_measures_nothing(argv, said, capsys):
    from reports.bench import steady

    with pytest.raises(SystemExit) as exit_:
        steady.main(argv)
    assert exit_.value.code == 2 and said in capsys.readouterr().err
    with pytest.raises(ValueError, match="--clients must be at least 2"):
        steady.steady("http://127.0.0.1:1", "m", clients=1)  # before any request is sent
