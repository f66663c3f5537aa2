"""reports.bench.serve's realistic requests: the demo's problems, searches and widths."""

from __future__ import annotations

from collections import Counter

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
