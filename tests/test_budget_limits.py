"""Budgets are limits (issue 33): through `search.solve`, for every registered algorithm and
small budgets in every metered quantity, on the scripted engine and on the embedded
tiny-arith model, no Result's usage exceeds its Budget in tokens, scorer calls or FLOPs
(seconds: by at most one forward or scorer call, see search/budget.py); a cut search says
so; the core counts a scorer's calls itself; Budget values are checked for type."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest

import search
from search import registry
from search.engines.fake import ScriptedEngine
from search.types import Budget, Node, Problem, Result

ALGOS = registry.names()
# small widths and depths keep each run short; the rest are the algorithms' defaults
KNOBS: dict[str, dict[str, Any]] = {
    "best_of_n": {"n": 6}, "rpc": {"n": 4}, "first_finish": {"n": 4},
    "beam": {"n": 4, "m": 2}, "dvts": {"n": 4, "m": 2}, "diverse_beam": {"n": 4, "m": 2, "groups": 2},
    "particle_filter": {"n": 4}, "particle_gibbs": {"n": 3, "iterations": 2},
    "astar": {"width": 2, "k": 2}, "mcts": {"iterations": 6, "batch": 2},
    "pgtd": {"rollouts": 6, "width": 2, "horizon": 48},
}


class PlainScorer:
    """A user's scorer as the README shows it: `score(problem, nodes)` and nothing else (no
    meter). It prefers short steps; it records how many nodes it was asked to score."""

    def __init__(self) -> None:
        self.seen = 0

    def score(self, problem: Problem, nodes: Sequence[Node]) -> list[float]:
        del problem
        self.seen += len(nodes)
        return [1.0 / (1 + len(n.text)) for n in nodes]


def scorer_for(algo: str) -> PlainScorer | None:
    """A named scorer where the search consults one (solve refuses it elsewhere)."""
    return PlainScorer() if registry.uses_scorer(algo, {}) or algo == "pgtd" else None


def assert_within(result: Result, budget: Budget, *, seconds_slack: float) -> None:
    used = result.usage
    spent = {"tokens": used.generated_tokens, "scorer_calls": used.scorer_calls,
             "flops": used.flops, "seconds": used.seconds}
    for limit, value in budget.limits().items():
        slack = seconds_slack if limit == "seconds" else 0.0
        assert spent[limit] <= value + slack, (result.algo, limit, spent[limit], value)
    kept = sum(len(n.step.token_ids) for n in result.tree.walk() if n.step is not None)
    if result.algo != "compute_optimal":  # (its probe's tree is not the Result's)
        assert kept == used.generated_tokens  # every token paid for is in the tree
    if result.stats.get("cut_by") is not None:
        assert result.status == "budget_exhausted"


# -- the scripted engine ------------------------------------------------------------------------
def deep(path: tuple[str, ...]) -> list[tuple[str, float]]:
    """Every path finishes at depth 6 ("The answer is k."); three choices per step."""
    if len(path) == 5:
        return [(f"The answer is {k}.", 1.0 / k) for k in (1, 2, 3)]
    return [(f"s{len(path)}.{i} ", 1.0 / (i + 1)) for i in range(3)]


SCRIPTED_BUDGETS = [Budget(tokens=1), Budget(tokens=7), Budget(tokens=23, reserve=0.0),
                    Budget(tokens=50), Budget(scorer_calls=1), Budget(scorer_calls=5),
                    Budget(flops=3.0), Budget(flops=29.5), Budget(tokens=40, scorer_calls=3)]


@pytest.mark.parametrize("algo", ALGOS)
def test_scripted_usage_never_exceeds_the_budget(algo):
    """Steps of 3 tokens, 4 prompt tokens, 1 FLOP per token: a limit that falls inside a
    step or a batch is met exactly there."""
    for budget in SCRIPTED_BUDGETS:
        engine = ScriptedEngine(deep, tokens_per_step=3)
        scorer = scorer_for(algo)
        result = search.solve(Problem(prompt="toy", id="toy", answer="1"), algo, budget,
                              engine=engine, scorer=scorer, progress=False,
                              **KNOBS.get(algo, {}))
        assert_within(result, budget, seconds_slack=0.0)
        if scorer is not None:  # the core counted the scorer's calls: one per node scored
            assert result.usage.scorer_calls == scorer.seen


def test_a_batch_in_flight_stops_exactly_at_the_token_limit():
    """best_of_n's first batch is 6 rows of 3 tokens (18): a limit of 7 keeps the first two
    rows whole and one token of the third; the others get empty steps, all cut "budget"."""
    engine = ScriptedEngine(deep, tokens_per_step=3)
    result = search.solve("toy", "best_of_n", Budget(tokens=7, reserve=0.0), engine=engine,
                          progress=False, n=6)
    steps = [k.step for k in result.tree.children if k.step is not None]
    assert [len(s.token_ids) for s in steps] == [3, 3, 1, 0, 0, 0]
    assert [s.stop_reason for s in steps] == ["stop", "stop"] + ["budget"] * 4
    assert result.usage.generated_tokens == 7
    assert (result.status, result.answer, result.stats["cut_by"]) == \
        ("budget_exhausted", None, "tokens")


def test_a_scorer_without_a_meter_is_counted_and_stopped():
    """A custom scorer that knows nothing of meters: its calls show in usage, and
    Budget(scorer_calls=...) stops the search at that many."""
    scorer = PlainScorer()
    result = search.solve("toy", "beam", Budget(scorer_calls=5), engine=ScriptedEngine(deep),
                          scorer=scorer, progress=False, n=4, m=2)
    assert scorer.seen == result.usage.scorer_calls == 5
    assert result.stats["cut_by"] == "scorer_calls" and result.status == "budget_exhausted"
    unscored = [n for n in result.tree.walk() if n.scores.unscored]
    assert unscored and all(n.scores.reward == -math.inf for n in unscored)
    plenty = PlainScorer()
    free = search.solve("toy", "beam", Budget(tokens=10_000), engine=ScriptedEngine(deep),
                        scorer=plenty, progress=False, n=4, m=2)
    assert free.usage.scorer_calls == plenty.seen > 5 and free.status == "ok"


@pytest.mark.parametrize("kwargs,error,match", [
    ({"tokens": 1.5}, TypeError, "tokens must be an int"),
    ({"tokens": 10.0}, TypeError, "tokens must be an int"),
    ({"scorer_calls": 2.5}, TypeError, "scorer_calls must be an int"),
    ({"tokens": "10"}, TypeError, "tokens must be an int"),
    ({"tokens": True}, TypeError, "tokens must be an int"),
    ({"flops": "1e9"}, TypeError, "flops must be a number"),
    ({"tokens": 0}, ValueError, "tokens must be positive"),
    ({"scorer_calls": -3}, ValueError, "scorer_calls must be positive"),
    ({"seconds": 0.0}, ValueError, "seconds must be positive"),
    ({"flops": math.nan}, ValueError, "flops must be positive"),
])
def test_budget_values_are_checked(kwargs, error, match):
    with pytest.raises(error, match=match):
        Budget(**kwargs)


def test_budget_takes_whole_numbers_of_any_int_type():
    np = pytest.importorskip("numpy")
    budget = Budget(tokens=np.int64(12), scorer_calls=np.int32(3), flops=2.5)
    assert (budget.tokens, budget.scorer_calls) == (12, 3)
    assert type(budget.tokens) is int and type(budget.scorer_calls) is int


# -- the embedded tiny-arith model --------------------------------------------------------------
@pytest.fixture(scope="module")
def arith():
    from problems import arith as gen

    engine = search.get_engine("tiny-arith")
    [problem] = gen.generate(1, seed=3, difficulty=4)
    return engine, problem


def arith_budgets(engine: Any, problem: Problem) -> list[Budget]:
    """Token, scorer-call, FLOP and seconds limits small enough to bind: FLOPs in units of
    one token's forward (2 x parameters), from the prompt alone to a few steps past it."""
    per_token = 2.0 * engine.n_params
    prompt = len(engine.prompt_ids(problem))
    return [Budget(tokens=1), Budget(tokens=9), Budget(tokens=37, reserve=0.0),
            Budget(tokens=120), Budget(scorer_calls=1), Budget(scorer_calls=4),
            Budget(flops=per_token * (prompt - 1)), Budget(flops=per_token * (prompt + 13.5)),
            Budget(flops=per_token * (prompt + 90)), Budget(tokens=300, seconds=0.05)]


@pytest.mark.parametrize("algo", ALGOS)
def test_tiny_arith_usage_never_exceeds_the_budget(arith, algo):
    engine, problem = arith
    for budget in arith_budgets(engine, problem):
        result = search.solve(problem, algo, budget, engine=engine, scorer=scorer_for(algo),
                              progress=False, fit_budget=False, **KNOBS.get(algo, {}))
        # seconds are checked before each forward and scorer call: one may run past them
        # (a tiny-arith forward takes milliseconds; a busy machine can stretch it)
        assert_within(result, budget, seconds_slack=2.0)


def test_tiny_arith_decoding_stops_mid_batch_at_the_limit(arith):
    """The rows of a batch decode one token per pass together; the limit falls inside a
    pass: exactly the limit is generated, every token of it is a step of the tree, and the
    steps the limit ended say "budget"."""
    engine, problem = arith
    result = search.solve(problem, "best_of_n", Budget(tokens=13, reserve=0.0), engine=engine,
                          progress=False, n=4, fit_budget=False)
    assert result.usage.generated_tokens == 13
    assert sum(len(n.step.token_ids) for n in result.tree.walk() if n.step) == 13
    cut = [n for n in result.tree.walk() if n.step and n.step.stop_reason == "budget"]
    assert cut and not any(n.finished for n in cut)
    assert result.stats["cut_by"] == "tokens" and result.status == "budget_exhausted"
