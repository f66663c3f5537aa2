"""Step-level beam search against a brute-force reading of its own tree.

At every depth, the nodes beam expands must be exactly the top n/m unfinished candidates of
that depth by aggregated reward (ties by generation order), and each expanded node gets m
children (the root n). Checked on random scripted trees with distinct rewards.
"""

from __future__ import annotations

import random

import pytest

import search
from rewards import aggregate
from search.engines.fake import ScriptedEngine, ScriptedScorer


def random_tree(seed: int):
    rng = random.Random(seed)
    cache: dict[tuple[str, ...], list[tuple[str, float]]] = {}

    def children(path):
        if path not in cache:
            if len(path) >= 4:
                cache[path] = []
            else:
                k = rng.randint(2, 4)
                cache[path] = [(f"s{len(path)}{i}{'.' if rng.random() < 0.15 else ' '}",
                                rng.random() + 0.1) for i in range(k)]
        return cache[path]

    values: dict[tuple[str, ...], float] = {}

    def value(path):
        return values.setdefault(path, rng.random())

    return children, value


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("agg", ["last", "min", "mean"])
def test_beam_keeps_the_brute_force_top_per_depth(seed, agg):
    children, value = random_tree(seed)
    n, m = 8, 2
    res = search.solve("q", algo="beam", engine=ScriptedEngine(children),
                       scorer=ScriptedScorer(value), seed=seed, n=n, m=m, agg=agg, max_depth=6)
    fn = aggregate.get(agg)
    by_depth: dict[int, list] = {}
    for node in res.tree.walk():
        if node.depth:
            by_depth.setdefault(node.depth, []).append(node)
    assert len(res.tree.children) == n
    for depth, nodes in sorted(by_depth.items()):
        nodes.sort(key=lambda x: x.id)  # generation order
        alive = [x for x in nodes if not x.finished]
        ranked = sorted(alive, key=lambda x: fn(x.step_scores("reward")), reverse=True)
        expanded = [x for x in nodes if x.children]
        if depth < max(by_depth):
            assert {x.id for x in expanded} == {x.id for x in ranked[:n // m]}
        assert all(len(x.children) == m for x in expanded)
