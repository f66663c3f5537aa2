"""Small budgets: a search whose token budget cannot finish its first width is narrowed or
refused before it starts (search.fit), and at tokens=400 every registered algorithm on
tiny-arith (pgtd: tiny-code, which it needs a code problem for) returns an answer or refuses
up front naming the budget it needs; a budget that cuts a search always names its limit."""

from __future__ import annotations

import math

import pytest
from test_budget_limits import deep

import search
from search import registry
from search.engines.fake import ScriptedEngine
from search.fit import PATH_TOKENS, BudgetTooSmall, Width, fit
from search.types import Budget


# -- the width arithmetic, against hand-computed cases ----------------------------------------
@pytest.mark.parametrize("width,knobs,paths,expected", [
    (Width(("n",)), {"n": 8}, 4, {"n": 4}),
    (Width(("n",)), {"n": 8}, 0, None),                      # not even one path fits
    (Width(("n",), floor=2), {"n": 8}, 1, None),             # particle_gibbs: n >= 2
    (Width(("n",), multiple_of="m"), {"n": 16, "m": 4}, 9, {"n": 8}),    # 9 -> 8, m stays 4
    (Width(("n",), multiple_of="m"), {"n": 16, "m": 4}, 3, {"n": 3, "m": 3}),  # m with it
    (Width(("n",), capped="k"), {"n": 8, "k": 4}, 2, {"n": 2, "k": 2}),
    (Width(("batch", "k")), {"batch": 4, "k": 4}, 4, {"batch": 1}),     # batch first
    (Width(("batch", "k")), {"batch": 4, "k": 4}, 2, {"batch": 1, "k": 2}),
    (Width(("n",)), {"n": 4}, 9, {}),                         # already fits: nothing changes
])
def test_narrowing_lowers_the_knobs_in_order_to_the_widest_that_fits(width, knobs, paths,
                                                                     expected):
    assert width.narrowed(knobs, paths) == expected


def test_fit_narrows_to_the_budgets_stopping_point_and_refuses_with_the_budget_needed():
    budget = Budget(tokens=400)  # stops expanding at 400 - 40 = 360
    assert fit("best_of_n", Width(("n",)), {"n": 8}, budget, 90) == {"n": (8, 4)}
    assert fit("best_of_n", Width(("n",)), {"n": 4}, budget, 90) == {}
    assert fit("best_of_n", Width(("n",)), {"n": 8}, None, 90) == {}  # no budget
    assert fit("best_of_n", Width(("n",)), {"n": 8}, budget, None) == {}  # no estimate
    with pytest.raises(BudgetTooSmall, match=r"Budget\(tokens=1600\)") as err:
        fit("diverse_beam", Width(("n",), narrow=False), {"n": 16}, budget, 90)
    assert err.value.needed == 1600  # 16 x 90 / 0.9
    with pytest.raises(BudgetTooSmall) as err:
        fit("best_of_n", Width(("n",)), {"n": 8}, Budget(tokens=50), 90)
    assert err.value.needed == 100  # one path of 90 tokens within 0.9 of the budget
    # the budget named is one that fits (its stopping point holds the narrowest width)
    assert fit("best_of_n", Width(("n",)), {"n": 8}, Budget(tokens=100), 90) == {"n": (8, 1)}


def test_a_refusal_comes_before_any_model_loads(monkeypatch):
    from search import api

    monkeypatch.setattr(api, "_ENGINES", {})
    monkeypatch.setattr(api, "_load_engine", lambda *a, **k: pytest.fail("loaded a model"))
    with pytest.raises(BudgetTooSmall, match="give at least Budget"):
        search.solve("What is 2 + 3?", "diverse_beam", Budget(tokens=400), engine="tiny-arith")


def test_the_scripted_engine_narrows_by_its_own_path_estimate():
    """An engine's own path_tokens: 6 steps of 3 tokens; best-of-6 within 40 tokens (36 to
    its stopping point) runs 2 paths, both finish, and the Result says it narrowed."""
    engine = ScriptedEngine(deep, tokens_per_step=3)
    engine.path_tokens = 18  # type: ignore[attr-defined]
    result = search.solve("toy", "best_of_n", Budget(tokens=40), engine=engine,
                          progress=False, n=6)
    assert result.stats["narrowed"] == {"n": (6, 2)} and result.knobs["n"] == 2
    assert result.status == "ok" and result.answer is not None
    assert sum(c.finished for c in result.candidates) == 2
    as_given = search.solve("toy", "best_of_n", Budget(tokens=40), engine=engine,
                            progress=False, n=6, fit_budget=False)
    assert as_given.answer is None and as_given.stats["cut_by"] == "tokens"


# -- every algorithm at tokens=400 on the embedded models --------------------------------------
@pytest.fixture(scope="module")
def problems():
    from problems import arith, codegen

    return arith.generate(2, seed=5), codegen.generate(1, seed=5)


@pytest.mark.parametrize("algo", registry.names())
def test_every_algorithm_answers_or_refuses_up_front_at_400_tokens(problems, algo):
    arith, code = problems
    model, cases = ("tiny-code", code) if algo == "pgtd" else ("tiny-arith", arith)
    tokens = 400
    budget = Budget(tokens=tokens)
    for problem in cases:
        try:
            result = search.solve(problem, algo, budget, engine=model, progress=False)
        except BudgetTooSmall as refused:  # up front, naming a budget that is larger
            assert refused.needed > tokens and "Budget(tokens=" in str(refused)
            needed = Budget(tokens=refused.needed)
            # that budget is accepted (fit raises for one still too small)
            fit(algo, registry.width(algo), registry.check_knobs(algo, {}), needed,
                PATH_TOKENS[model])
            continue
        assert result.answer is not None, (algo, result.status, result.stats)
        assert result.usage.generated_tokens <= tokens
        if result.status == "budget_exhausted":
            assert result.stats["cut_by"] == "tokens"
        narrowed = result.stats.get("narrowed", {})
        for knob, (given, used) in narrowed.items():
            assert used < given and result.knobs[knob] == used
        width = registry.width(algo)
        if width is not None:  # what runs at once fits the stopping point, by the estimate
            spent = width.of(result.knobs) * math.ceil(PATH_TOKENS[model] * width.spread)
            assert spent <= tokens - budget.reserve_tokens
