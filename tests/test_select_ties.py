"""The shared final selection: ties are drawn from the run's seed, never taken in leaf order.

Every rule (search.select) picks the same candidate for the same seed however its
candidates are listed, and a tie is not always won by one side; every search whose answer a
`select` rule chooses picks the same answer and path when its leaves reach Run.finish in
reverse order.
"""

from __future__ import annotations

import inspect
import itertools
from collections import Counter

import pytest

import search
from search import registry
from search.algos import Run
from search.engines.fake import ScriptedEngine, ScriptedScorer
from search.select import SELECTIONS, tie_seed
from search.types import Budget, Candidate, Problem

PROBLEM = Problem(prompt="toy", id="toy", answer="7")


def cand(text: str, answer: str, score: float, node_id: int) -> Candidate:
    return Candidate(text=text, answer=answer, score=score, finished=True, node_id=node_id)


# two answers tied on every rule: equal scores, one path each (and an unfinished leaf)
TIED = [cand("a: The answer is 7.", "7", 1.0, 1), cand("b: The answer is 3.", "3", 1.0, 2),
        Candidate(text="c", answer=None, score=1.0, finished=False, node_id=3)]


def pick(name: str, cands: list[Candidate], seed: int | None) -> Candidate:
    """The rule's choice (ties drawn by the seed's stream; None: canonical order)."""
    chosen = SELECTIONS[name](PROBLEM, cands, rng=None if seed is None else tie_seed(seed))
    assert chosen is not None
    return chosen


@pytest.mark.parametrize("name", sorted(SELECTIONS))
def test_same_seed_same_pick_in_any_order(name):
    for seed in range(20):
        picks = {pick(name, list(order), seed).text for order in itertools.permutations(TIED)}
        assert len(picks) == 1, (name, seed, picks)


@pytest.mark.parametrize("name", sorted(SELECTIONS))
def test_a_tie_is_drawn_not_won_by_one_side(name):
    wins = Counter(pick(name, TIED, seed).answer for seed in range(200))
    assert set(wins) == {"7", "3"} and min(wins.values()) > 60, wins
    # without a draw the canonical order decides (answer, then text), not the list order
    assert {pick(name, list(order), None).answer
            for order in itertools.permutations(TIED)} == {"3"}


def test_ties_are_only_among_the_best():
    cands = [cand("x", "3", 0.5, 1), cand("y", "7", 1.0, 2), cand("z", "7", 0.5, 3)]
    for seed in range(10):
        assert pick("score", cands, seed).text == "y"
        # a vote's tie in weight goes to the larger summed score before any draw
        assert pick("vote", [cands[0], cands[2]], seed).text in ("x", "z")
        assert pick("weighted_vote", cands, seed).text == "y"


def children(path):
    """Every path is two steps; the answer depends on the first step, all scores equal."""
    if not path:
        return [("p ", 0.5), ("q ", 0.3), ("s ", 0.2)]
    if len(path) == 1:
        return [("The answer is 7.", 0.5), ("The answer is 3.", 0.5)]
    return []


def selecting() -> list[str]:
    """The registered searches whose answer a `select` rule chooses."""
    return [a for a in registry.names()
            if "select" in inspect.signature(registry.get(a)).parameters]


def test_the_searches_that_select_are_found():
    assert {"best_of_n", "beam", "astar", "particle_filter", "particle_gibbs"} <= \
        set(selecting())


@pytest.mark.parametrize("select", sorted(SELECTIONS))
@pytest.mark.parametrize("algo", selecting())
def test_no_search_picks_by_leaf_order(algo, select, monkeypatch):
    named = registry.uses_scorer(algo, {"select": select})

    def solve(seed: int) -> search.Result:
        return search.solve(PROBLEM, algo=algo, budget=Budget(tokens=400),
                            engine=ScriptedEngine(children, tokens_per_step=3),
                            scorer=ScriptedScorer(lambda path: 1.0) if named else None,
                            seed=seed, select=select)

    plain = [solve(seed) for seed in range(6)]
    finish = Run.finish
    monkeypatch.setattr(Run, "finish", lambda self, leaves, **kw: finish(
        self, list(reversed(leaves)), **kw))
    flipped = [solve(seed) for seed in range(6)]
    assert [(r.answer, r.text) for r in plain] == [(r.answer, r.text) for r in flipped]
    assert all(r.answer in ("7", "3") for r in plain), plain
