"""An algorithm carries its declarations on its own function (search.traits), wherever it is
defined: adding one is its file (and, inside this project, its README row). A package from
outside (tests/plugin_package.py) adds greedy_branches by an entry point alone; the registry,
the token-budget fit and the eval grid read what it declares, and
tests/test_algos_contract.py runs the whole algorithm contract on it."""

from __future__ import annotations

import pytest
from plugin_package import PLUGIN, greedy_branches
from test_algos_contract import PROBLEM, make

import search
from reports.eval.grid import make_grid
from search import registry
from search.fit import Width
from search.knobs import rules
from search.traits import Traits, traits
from search.types import Budget


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    with greedy_branches(tmp_path, monkeypatch) as where:
        yield where


def test_the_plugin_is_one_file_and_the_registry_reads_its_declarations(plugin):
    assert sorted(p.name for p in plugin.glob("*.py")) == ["branches_tts.py"]
    assert PLUGIN in registry.names() and registry.knob_names(PLUGIN) == ["n", "max_depth"]
    assert registry.width(PLUGIN) == Width(("n",))
    assert registry.uses_scorer(PLUGIN, {}) and not registry.deterministic(PLUGIN)
    with pytest.raises(ValueError, match="n must be >= 1"):
        registry.check_knobs(PLUGIN, {"n": 0})


def test_the_grid_and_the_budget_fit_read_the_plugins_width(plugin):
    cells = make_grid([PROBLEM], [PLUGIN], [2, 6], seeds=(0, 1))
    assert [(c.knobs, c.width, c.seed, c.reuse_from) for c in cells] == [
        ({"n": 2}, 2, 0, None), ({"n": 2}, 2, 1, None),
        ({"n": 6}, 6, 0, None), ({"n": 6}, 6, 1, None)]
    with pytest.raises(ValueError, match="knob 'n' is set by the budgets"):
        make_grid([PROBLEM], [PLUGIN], [2], knobs={PLUGIN: {"n": 3}})
    # 30 tokens a path, 100 - 10 (the reserve) to spend: 3 paths fit of the 8 asked for
    engine, scorer = make()
    engine.path_tokens = 30  # type: ignore[attr-defined]
    res = search.solve(PROBLEM, PLUGIN, Budget(tokens=100), engine=engine, scorer=scorer)
    assert res.stats["narrowed"] == {"n": (8, 3)} and res.knobs["n"] == 3


@rules(scorer=False, deterministic=True)
def first_step(problem, engine, scorer, meter, *, seed=0):
    """Defined in a test module: its declarations travel with it all the same."""
    raise AssertionError("never run here")


def test_declarations_travel_with_the_function(monkeypatch):
    assert traits(first_step) == Traits(scorer=False, deterministic=True)
    monkeypatch.setitem(registry.ALGORITHMS._entries, "first_step", first_step)
    assert registry.deterministic("first_step") and not registry.uses_scorer("first_step", {})
    cells = make_grid([PROBLEM], ["first_step"], [4, 8], seeds=(0, 5))
    # no scale: one run per problem, the budgets ignored; deterministic: seed 5 reuses seed 0
    assert [(c.knobs, c.width, c.seed, c.reuse_from) for c in cells] == [
        ({}, None, 0, None), ({}, None, 5, 0)]
    with pytest.raises(ValueError, match="scale is a search.fit.Width, 'tokens' or None"):
        rules(scale="samples")
    with pytest.raises(ValueError, match=r"pick: its width names m, not among its knobs \(n\)"):
        @rules(width=Width(("n",), companions=("m",)))
        def pick(problem, engine, scorer, meter, *, seed=0, n=4):
            raise AssertionError("never run")
