"""Depths drawn in rounds (knob `rounds` of beam, the particle filter and A*;
search.algos._stepwise.draw_rounds): hand-computed draws of the rule itself, then each
search's tree on a scripted problem with one hard step, replayed against the rule by brute
force (at every round boundary the search went on exactly when the rule says it must).
"""

from __future__ import annotations

import pytest

import search
from search.algos._stepwise import draw_rounds
from search.algos.astar import AStarMark
from search.engines.fake import ScriptedEngine, ScriptedScorer
from search.types import Node


def rule(goods: list[bool], n: int, rounds: int, bank: int, enough_at: int
         ) -> tuple[list[bool], int]:
    """draw_rounds over a fixed stream of samples, each good or not: the depth has enough
    with `enough_at` good ones, and collapsed with none."""
    stream = iter(goods)
    return draw_rounds(lambda k: [next(stream) for _ in range(k)], n, rounds=rounds, bank=bank,
                       enough=lambda xs: sum(xs) >= enough_at,
                       collapsed=lambda xs: not any(xs))


def test_draw_rounds_by_hand():
    bad, good = [False] * 40, [True] * 40
    # one round: n drawn, whatever they are, and the bank untouched
    assert rule(bad, 16, 1, 0, 4) == (bad[:16], 0)
    assert rule(bad, 16, 1, 5, 4) == (bad[:21], 0)  # collapsed: the bank pays 5 more
    # enough after the first round of 4: 12 saved
    assert rule(good, 16, 4, 0, 4) == (good[:4], 12)
    # collapsed throughout: n, then the whole bank in rounds of 4 (the last one 2)
    assert rule(bad, 16, 4, 10, 4) == (bad[:26], 0)
    # the first good sample is the 22nd: rounds to 24, 4 of the bank left
    mixed = [False] * 21 + [True] + [False] * 10
    out, bank = rule(mixed, 16, 4, 8, 4)
    assert len(out) == 24 and bank == 0
    out, bank = rule(mixed, 16, 4, 12, 4)
    assert len(out) == 24 and bank == 4
    # not collapsed but short of enough: the depth draws its n and no more
    one = [True] + [False] * 39
    out, bank = rule(one, 16, 4, 12, 4)
    assert len(out) == 16 and bank == 12
    # the budget ends: no further round
    calls = []
    out, bank = draw_rounds(lambda k: calls.append(k) or [False] * k, 16, rounds=4, bank=0,
                            enough=lambda xs: False, collapsed=lambda xs: True,
                            exhausted=lambda: len(calls) >= 2)
    assert calls == [4, 4] and bank == 8


# -- one hard step: "a" and "b" are easy, from "a b" the good step "y" has probability 0.1 --
HARD = {(): [("a ", 1.0)], ("a ",): [("b ", 1.0)], ("a ", "b "): [("x ", 0.9), ("y ", 0.1)],
        ("a ", "b ", "x "): [("The answer is 1.", 1.0)],
        ("a ", "b ", "y "): [("The answer is 2.", 1.0)]}


def oracle(path: tuple[str, ...]) -> float:
    """1 while the path is on the gold line (a b y, answer 2), 0 from its first wrong step."""
    return 0.0 if "x " in path else 1.0


def solve(algo: str, seed: int, **knobs):
    return search.solve("q", algo=algo, engine=ScriptedEngine(lambda p: HARD.get(p, [])),
                        scorer=ScriptedScorer(oracle), seed=seed, **knobs)


def replay(drawn: list[Node], n: int, size: int, bank: int, enough_at: int) -> int:
    """Check the drawn samples of one depth against the rule, by brute force over its round
    boundaries; returns the bank left."""
    good = [oracle(path_of(node)) == 1.0 for node in drawn]
    allowance = n + bank
    cuts = list(range(size, allowance, size)) + [allowance]
    for cut in cuts:
        stop = (cut < n and sum(good[:cut]) >= enough_at) or (cut >= n and any(good[:cut])) \
            or cut == allowance
        if cut < len(drawn):
            assert not stop, (cut, len(drawn))
        else:
            assert cut == len(drawn) and stop
            return allowance - cut
    raise AssertionError("unreachable")


def path_of(node: Node) -> tuple[str, ...]:
    return tuple(n.step.text for n in node.path() if n.step is not None)


def by_depth(res, algo: str = "beam") -> dict[int, list[Node]]:
    """The samples drawn at each depth (A*: by the batch that drew them, from 1), in draw
    order."""
    out: dict[int, list[Node]] = {}
    for node in res.tree.walk():
        if node.parent is None:
            continue
        at = node.depth
        if algo == "astar":
            batch = node.parent.scores.of(AStarMark).batch
            assert batch is not None
            at = batch + 1
        out.setdefault(at, []).append(node)
    return {d: sorted(ns, key=lambda x: x.id) for d, ns in sorted(out.items())}


@pytest.mark.parametrize("algo,knobs", [
    ("beam", dict(n=16, m=4)),
    ("particle_filter", dict(n=16)),
    ("astar", dict(width=4, k=4, max_batches=40)),
])
def test_rounds_follow_the_rule_on_a_hard_step(algo, knobs):
    redrew = 0
    for seed in range(12):
        res = solve(algo, seed, rounds=4, **knobs)
        at = by_depth(res, algo)
        assert len(at[1]) == 16  # the root has no bar: its n are drawn
        assert len(at[2]) == 4  # "b" is easy: one round of 4 is enough, 12 banked
        bank = replay(at[3], 16, 4, 12, 4)  # the hard step
        redrew += len(at[3]) > 16
        assert sum(len(ns) for ns in at.values()) <= 16 * len(at)  # never above n a depth
        ys = [node for node in at[3] if node.step is not None and node.step.text == "y "]
        if ys:  # a good step found: the answer is 2 (the wrong paths weigh 0 in the vote)
            assert res.answer == "2"
            if algo == "particle_filter":  # a 0-scored particle has e^-32 the weight
                assert all(node.parent in ys for node in at[4])
        del bank
    assert redrew  # some seed drew past n at the hard step (A*: its third batch)


def test_astar_rounds_spread_a_batch_over_its_popped_states():
    res = solve("astar", 0, rounds=4, width=4, k=4)
    batch2 = by_depth(res, "astar")[2]  # drawn in the second batch
    popped = {n.parent.id for n in batch2 if n.parent is not None}
    assert len(popped) == 4 and len(batch2) == 4  # one sample of each popped state
    assert all(n.depth == 2 for n in batch2)


@pytest.mark.parametrize("algo,knobs", [
    ("beam", dict(n=16, m=4)),
    ("particle_filter", dict(n=16)),
    ("astar", dict(width=4, k=4)),
])
def test_one_round_is_the_search_without_rounds(algo, knobs):
    plain = solve(algo, 3, **knobs)
    one = solve(algo, 3, rounds=1, **knobs)
    assert [path_of(n) for n in plain.tree.walk()] == [path_of(n) for n in one.tree.walk()]
    assert len(by_depth(plain)[3]) == 16


def test_particle_rounds_refuse_a_reference_or_finished_pool():
    with pytest.raises(ValueError, match="rounds"):
        solve("particle_filter", 0, n=4, rounds=2, resample_finished=True)
