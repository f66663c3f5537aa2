"""One contract for every registered algorithm, on a scripted tree with a known optimum.

The tree: from the root, three first steps; the likeliest ("l") leads to a wrong answer,
the rarer ("r") to the right one, which the scorer rewards at every step. Any search that
uses the scorer should find "7"; every algorithm must return a Result within budget, and
reproduce itself for a seed. The algorithms: every registered one, and one that a package
from outside adds (tests/plugin_package.py), installed for its runs.
"""

from __future__ import annotations

import pytest
from helpers import status_from_tree
from plugin_package import PLUGIN, greedy_branches

import search
from search.engines.fake import ScriptedEngine, ScriptedScorer
from search.registry import names, uses_scorer
from search.types import Budget, Problem

TREE = {
    (): [("l1 ", 0.6), ("r1 ", 0.3), ("m1 ", 0.1)],
    ("l1 ",): [("l2 ", 0.9), ("r2 ", 0.1)],
    ("r1 ",): [("r2 ", 0.8), ("l2 ", 0.2)],
    ("m1 ",): [("l2 ", 1.0)],
}


def children(path):
    if path in TREE:
        return TREE[path]
    if len(path) == 2:  # the answer step: right iff the path went r1 -> r2
        good = path == ("r1 ", "r2 ")
        return [("The answer is 7.", 1.0)] if good else [("The answer is 3.", 1.0)]
    return []


def value(path):
    """Step reward: 1 on the right path's steps, 0.2 elsewhere (so prefixes are informative)."""
    right = ("r1 ", "r2 ", "The answer is 7.")
    return 1.0 if path == right[:len(path)] else 0.2


def make():
    return ScriptedEngine(children, tokens_per_step=3), ScriptedScorer(value)


PROBLEM = Problem(prompt="toy", id="toy", answer="7")


@pytest.fixture(params=[*names(), PLUGIN])
def algo(request, tmp_path, monkeypatch):
    """Each algorithm's name; the plug-in's package is installed while its tests run."""
    if request.param != PLUGIN:
        yield request.param
        return
    with greedy_branches(tmp_path, monkeypatch):
        assert PLUGIN in names()
        yield PLUGIN


def test_contract(algo):
    """Those that declare they choose by length, votes or the model's own probabilities
    (no scorer) run with none named: search.solve refuses one for them."""
    engine, scorer = make()
    budget = Budget(tokens=600)
    named = scorer if uses_scorer(algo, {}) else None
    res = search.solve(PROBLEM, algo=algo, budget=budget, engine=engine, scorer=named, seed=3)
    assert isinstance(res, search.Result) and res.algo == algo
    assert res.usage.generated_tokens > 0
    # overshoot is bounded by one expansion batch; no batch in this tree is wider than 64 rows
    assert res.usage.generated_tokens <= 600 + 64 * engine.tokens_per_step
    again = search.solve(PROBLEM, algo=algo, budget=budget, engine=make()[0],
                         scorer=None if named is None else make()[1], seed=3)
    assert (again.answer, [c.text for c in again.candidates]) == \
        (res.answer, [c.text for c in res.candidates])
    assert res.selected_by and res.selected_by == again.selected_by
    if named is not None:  # a named scorer is used: it finds the rarer right answer
        assert res.answer == "7", res
        assert "ScriptedScorer" in res.selected_by, res.selected_by
    else:
        assert "ScriptedScorer" not in res.selected_by
        with pytest.raises(ValueError, match="never consults a scorer"):
            search.solve(PROBLEM, algo=algo, engine=make()[0], scorer=scorer)


def test_contract_tiny_budget_is_honest(algo):
    """A one-token budget: what the Result says is read back off its tree, independently of
    the code that packed it. Its status follows from the tree and usage; a chosen answer is
    the one "The answer is N." step of a finished node in the tree with the candidate's text;
    and (one tree per search) every generated token is a token of a step in the tree."""
    engine, scorer = make()
    budget = Budget(tokens=1)
    res = search.solve(PROBLEM, algo=algo, budget=budget, engine=engine,
                       scorer=scorer if uses_scorer(algo, {}) else None, seed=0)
    assert res.status == status_from_tree(res, budget)
    nodes = {n.id: n for n in res.tree.walk()}
    if res.answer is not None:
        [node] = [nodes[c.node_id] for c in res.candidates
                  if c.node_id in nodes and c.text == res.text][:1]
        assert node.finished and node.text == res.text
        assert node.step is not None and node.step.text == f"The answer is {res.answer}."
    else:
        assert res.text == ""
    tree_tokens = sum(len(n.step.token_ids) for n in nodes.values() if n.step is not None)
    if algo == "compute_optimal":  # its probe searched a tree of its own
        assert res.usage.generated_tokens >= tree_tokens
    else:
        assert res.usage.generated_tokens == tree_tokens
    assert res.usage.generated_tokens <= 1 + 64 * engine.tokens_per_step
