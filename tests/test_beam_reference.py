"""Step-level beam search against a brute-force reading of its own tree.

At every depth, the nodes beam expands must be exactly the top n/m unfinished candidates of
that depth by aggregated reward (ties by generation order), and each expanded node gets m
children (the root n). Checked on random scripted trees with distinct rewards.
"""

from __future__ import annotations

import random

import pytest

import search
from search import aggregate
from search.algos.beam import BeamMark
from search.engines.fake import ScriptedEngine, ScriptedScorer
from search.types import Node


def lookahead(node: Node) -> float | None:
    """The score at the end of the node's lookahead rollout (None: it had none)."""
    mark = node.scores.get(BeamMark)
    return None if mark is None else mark.lookahead


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
                       scorer=ScriptedScorer(value), seed=seed, n=n, m=m, agg=agg, max_depth=6,
                       duplicates="keep")
    fn = aggregate.get(agg)
    by_depth: dict[int, list] = {}
    for node in res.tree.walk():
        if node.depth:
            by_depth.setdefault(node.depth, []).append(node)
    assert len(res.tree.children) == n
    for depth, nodes in sorted(by_depth.items()):
        nodes.sort(key=lambda x: x.id)  # generation order
        alive = [x for x in nodes if not x.finished]
        ranked = sorted(alive, key=lambda x: fn(x.rewards()), reverse=True)
        expanded = [x for x in nodes if x.children]
        if depth < max(by_depth):
            assert {x.id for x in expanded} == {x.id for x in ranked[:n // m]}
        assert all(len(x.children) == m for x in expanded)


# -- lookahead ---------------------------------------------------------------------------------
# "a " scores well but its greedy continuation badly; "b " the other way round
TRAP = {(): [("a ", 0.5), ("b ", 0.5)],
        ("a ",): [("a-bad ", 0.7), ("a-ok ", 0.3)], ("b ",): [("b-good ", 1.0)],
        ("a ", "a-bad "): [("The answer is 3.", 1.0)], ("a ", "a-ok "): [("The answer is 5.", 1.0)],
        ("b ", "b-good "): [("The answer is 7.", 1.0)]}
TRAP_VALUE = {"a ": 0.9, "b ": 0.5, "a-bad ": 0.1, "a-ok ": 0.6, "b-good ": 0.95,
              "The answer is 3.": 0.2, "The answer is 5.": 0.5, "The answer is 7.": 0.9}


def trap_run(lookahead: int, seed: int = 1):
    engine = ScriptedEngine(lambda p: TRAP.get(p, []))
    res = search.solve("q", algo="beam", engine=engine,
                       scorer=ScriptedScorer(lambda p: TRAP_VALUE[p[-1]]), seed=seed, n=4, m=4,
                       max_depth=6, lookahead=lookahead, duplicates="keep")
    return res, engine


def test_beam_lookahead_ranks_by_the_end_of_a_greedy_rollout():
    plain, _ = trap_run(0)
    ahead, engine = trap_run(1)
    # both first steps were sampled (the seed is chosen so), in both runs
    for res in (plain, ahead):
        assert {c.text for c in res.tree.children} == {"a ", "b "}
    # without lookahead "a " (0.9) is the beam and "b " is gone; with it "b " wins (0.95 > 0.1)
    assert [c.text for c in plain.tree.children if c.children] == ["a "]
    assert plain.answer in ("3", "5") and ahead.answer == "7"
    first = ahead.tree.children
    # each first step rolled one greedy step on (a -> a-bad, never a-ok) and was scored there
    assert all(lookahead(c) == (0.1 if c.text == "a " else 0.95) for c in first)
    assert all(c.children[0].text == c.text + ("a-bad " if c.text == "a " else "b-good ")
               for c in first)
    # the kept beam is a candidate ("b ", the first one generated), not its rollout node:
    # it alone has m = 4 sampled children besides its rollout; rollout nodes never expand
    kept = [c for c in first if len(c.children) > 1]
    assert [c.text for c in kept] == ["b "] and len(kept[0].children) == 1 + 4
    assert kept[0] is min((c for c in first if c.text == "b "), key=lambda c: c.id)
    assert all(not c.children[0].children for c in first if c is not kept[0])
    # one batched expand per depth and per lookahead step: depth 1 (+1), depth 2 (+1), depth 3
    assert engine.expand_calls == 5
    # rollouts are real generation: charged, and every token paid for is in the tree
    steps = [node for node in ahead.tree.walk() if node.step is not None]
    assert ahead.usage.generated_tokens == len(steps) == 4 + 4 + (4 + 4) + 4
    # scorer: 4 candidates + 4 rollout ends per depth that looked ahead, then 4 answers
    assert ahead.usage.scorer_calls == 20
    assert ahead.knobs["lookahead"] == 1 and plain.knobs["lookahead"] == 0


@pytest.mark.parametrize("seed", range(4))
def test_beam_lookahead_keeps_candidates_as_beams(seed):
    """On random trees with lookahead 2: every node that was expanded by sampling is a
    candidate (it has a lookahead score or was kept without one), never a rollout node, and
    every generated token is a step of the tree."""
    children, value = random_tree(seed)
    res = search.solve("q", algo="beam", engine=ScriptedEngine(children),
                       scorer=ScriptedScorer(value), seed=seed, n=8, m=2, max_depth=6,
                       lookahead=2, duplicates="keep")  # merged, every candidate is kept
    rollout: set[int] = set()  # ids of rollout nodes: a candidate's first child is its rollout
    for node in res.tree.walk():
        if lookahead(node) is not None:
            x = node.children[0]
            while True:
                rollout.add(x.id)
                if not x.children:
                    break
                x = x.children[0]
    assert rollout
    for node in res.tree.walk():
        if node.id in rollout:
            assert len(node.children) <= 1 and lookahead(node) is None
    assert res.usage.generated_tokens == sum(1 for x in res.tree.walk() if x.step is not None)


def test_beam_rejects_a_negative_lookahead():
    with pytest.raises(ValueError, match="lookahead"):
        search.solve("q", algo="beam", engine=ScriptedEngine(lambda p: []),
                     scorer=ScriptedScorer(lambda p: 0.0), lookahead=-1)


# -- duplicates ------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(8))
def test_beam_merge_keeps_the_brute_force_top_distinct_states(seed):
    """duplicates="merge": at every depth each (path text, finished) state sampled is one node
    (the first sampled; the others point to it and are neither scored nor expanded), it
    counts its samples, and the expanded nodes are the top n/m distinct unfinished states."""
    children, value = random_tree(seed)
    n, m = 8, 2
    res = search.solve("q", algo="beam", engine=ScriptedEngine(children),
                       scorer=ScriptedScorer(value), seed=seed, n=n, m=m, max_depth=6,
                       agg="min", duplicates="merge")
    by_depth: dict[int, list] = {}
    for node in res.tree.walk():
        if node.depth:
            by_depth.setdefault(node.depth, []).append(node)
    ids = {node.id: node for node in res.tree.walk()}
    kept_total = 0
    for depth, nodes in sorted(by_depth.items()):
        nodes.sort(key=lambda x: x.id)
        first: dict = {}
        for x in nodes:  # brute force: the first node of each state, and the samples per state
            first.setdefault((x.text, x.finished), []).append(x)
        kept = [group[0] for group in first.values()]
        kept_total += len(kept)
        for group in first.values():
            assert group[0].scores.copies == len(group) and \
                group[0].scores.merged_into is None
            for x in group[1:]:
                assert ids[int(x.scores.merged_into)] is group[0]
                assert x.scores.reward is None and not x.children
        alive = sorted((x for x in kept if not x.finished),
                       key=lambda x: min(x.rewards()), reverse=True)
        expanded = [x for x in nodes if x.children]
        if depth < max(by_depth):
            assert {x.id for x in expanded} == {x.id for x in alive[:n // m]}
    assert res.usage.scorer_calls == kept_total


def test_beam_merged_samples_keep_their_votes():
    """Four samples of the root that all finish: equal answers are one node, scored once, and
    a vote still counts each sample (the tree says how many there were)."""
    tree: dict[tuple[str, ...], list[tuple[str, float]]] = {
        (): [("The answer is 3.", 0.6), ("The answer is 7.", 0.4)]}
    for seed in range(6):
        res = search.solve("q", algo="beam", engine=ScriptedEngine(lambda p: tree.get(p, [])),
                           scorer=ScriptedScorer(lambda p: 0.5), seed=seed, n=4, m=2,
                           select="vote", duplicates="merge")
        samples = [x.text for x in res.tree.children]
        assert len(samples) == 4
        assert sorted(c.text for c in res.candidates) == sorted(samples)
        assert res.usage.scorer_calls == len(set(samples))
        top = max(set(samples), key=lambda t: (samples.count(t), -samples.index(t)))
        if samples.count(top) > 2 or len(set(samples)) == 1:  # a strict majority
            assert res.text == top
