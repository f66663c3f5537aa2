"""The same seed gives the same Result whatever the concurrency and whatever other work
shares the engine: the demo's beam and A* (its knobs and one selection rule) through
solve_many at concurrency 1 and 4, and again with other searches interleaved, so node ids
(which count every node the process made) differ between the layouts. Results are compared
by helpers.dump, which numbers nodes by their place in the tree."""

from __future__ import annotations

import pytest
from devices import exact
from helpers import dump

import search
from reports.demo import knobs as demo_knobs
from search import registry
from search.many import Driver
from search.types import Result

SEARCHES = [("beam", 8), ("particle_filter", 4), ("astar", 4), ("best_of_n", 4)]
# the searches checked (the others run beside them): beam, the differing run, and A*,
# whose frontier keys states by node id (test_concurrency covers every search at any
# concurrency, without the interleaving)
CHECKED = [("beam", 8), ("astar", 4)]


@pytest.fixture(scope="module")
def arith_engine(device):
    return search.get_engine("tiny-arith", device=device, **exact(device))


def _knobs(algo: str, width: int) -> dict:
    return {**demo_knobs("weighted_vote")[algo], **registry.at_width(algo, width, {})}


@pytest.mark.parametrize("algo,width", CHECKED, ids=[a for a, _ in CHECKED])
def test_same_seed_same_result_at_any_concurrency_and_beside_other_work(arith_engine, algo,
                                                                        width):
    from problems import arith

    probs = arith.generate(4, seed=2024, difficulty=5)
    kn = _knobs(algo, width)
    one = search.solve_many(probs, algo, engine=arith_engine, scorer="steps", seeds=(0,),
                            concurrency=1, **kn)
    four = search.solve_many(probs, algo, engine=arith_engine, scorer="steps", seeds=(0,),
                             concurrency=4, **kn)
    assert [dump(r) for r in four] == [dump(r) for r in one]
    # the same runs interleaved with the other searches on other problems, 4 at a time
    others = arith.generate(2, seed=99, difficulty=5)
    items = [(p, a, w) for p in others for a, w in SEARCHES if a != algo]
    items[1:1] = [(p, algo, width) for p in probs[:2]]
    items[len(items) // 2:len(items) // 2] = [(p, algo, width) for p in probs[2:]]
    driver = Driver.load(arith_engine, "steps", concurrency=4)
    got = {i: r for i, r in driver.map(
        lambda it, cancel: driver.solve(it[0], it[1], seed=0, cancel=cancel,
                                        **_knobs(it[1], it[2])), items)}
    assert not any(isinstance(r, BaseException) for r in got.values())
    mixed = {items[i][0].id: r for i, r in got.items()
             if items[i][1] == algo and isinstance(r, Result)}
    assert [dump(mixed[p.id]) for p in probs] == [dump(r) for r in one]
    # the layouts really differ: the same trees, under other node ids
    assert [r.tree.id for r in one] != [mixed[p.id].tree.id for p in probs]
