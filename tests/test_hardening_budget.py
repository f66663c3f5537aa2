"""The budget contract, for every registered algorithm,
compute_optimal included, on the scripted engine over random trees and on a tiny random
Llama, under token, scorer-call, FLOP and seconds limits (seconds from a scripted clock that
every engine and scorer call advances, so they are exact), with and without a reserve.

Properties, checked on an event log of every engine call, scorer call and budget check:
- the contract of search/budget.py: every generating engine call (expand, or extend of chosen
  tokens) is preceded, since the previous generating call, by a `meter.exhausted()` check
  that returned False on the meter the engine charges; so once a stopping point is reached,
  only the batch already under way completes;
- hard limits: usage never exceeds a limit in tokens, scorer calls or FLOPs (the
  engine cuts the batch in flight at the limit, the scorer loop scores only what calls are
  left); seconds, checked before each engine and scorer call, overshoot by at most one call;
- honesty: an answer comes from a finished path of the returned tree; "budget_exhausted"
  means a stopping point was really reached (with the best answer so far when a limit cut
  the search short, else none and no finished candidate). A budget too small for one step
  ends as "budget_exhausted", no exception;
- the reserve: a search the budget stops before any path finishes finishes its best partial
  path from the reserve (the known failure: Budget(tokens=600) ended diverse_beam and
  compute_optimal with answer None, 4 candidates one step from finishing);
- a default cap for the search with no natural stop (A*), reported in the Result.
"""

from __future__ import annotations

import copy
import functools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from search.answers import extract
from search.budget import Meter
from search.engines.fake import ScriptedEngine, ScriptedScorer
from search.registry import declared, get, names, uses_scorer
from search.session import Session, bind
from search.types import Budget, Problem, Result

ALGOS = names()
# algorithms that never call the scorer: a scorer-call limit never stops them
SCORER_FREE = {a for a in ALGOS if not uses_scorer(a, {})}  # as each declares
# those that declare they score partial paths as they go (not only finished ones), so one
# scorer call stops them after one batch
SCORE_AS_THEY_GO = {a for a in ALGOS if declared(a).scores_as_it_goes} - SCORER_FREE
# small widths keep the built-ins' examples fast (optional: any other algorithm, a plug-in
# included, runs at its own defaults)
KNOBS: dict[str, dict[str, Any]] = {
    "best_of_n": {"n": 4}, "rpc": {"n": 4}, "first_finish": {"n": 4, "chunk_tokens": 2},
    "beam": {"n": 4, "m": 2}, "dvts": {"n": 4, "m": 2}, "diverse_beam": {"n": 4, "m": 2,
                                                                          "groups": 2},
    "particle_filter": {"n": 4}, "particle_gibbs": {"n": 3, "iterations": 3},
    "astar": {"width": 2, "k": 2}, "mcts": {"iterations": 12, "batch": 2, "k": 2},
    "pgtd": {"rollouts": 12, "width": 2, "horizon": 64},
}
PROBLEM = Problem(prompt="toy", id="toy", answer="7")
ENGINE_SECONDS, SCORER_SECONDS = 1.0, 0.5  # scripted time each engine / scorer call takes


# -- random scripted trees ---------------------------------------------------------------------
@dataclass(frozen=True)
class Tree:
    """A random tree: at each path, 1..branch children; a child finishes (with "The answer is
    k.") at a depth drawn per path from [min_depth, max_depth]. Reproducible from `seed`."""

    seed: int
    branch: int
    min_depth: int
    max_depth: int

    def children(self, path: tuple[str, ...]) -> list[tuple[str, float]]:
        rng = random.Random(f"{self.seed}/{'|'.join(path)}")  # str seeds: same in every process
        if len(path) >= self.max_depth:
            return []
        kids = []
        for i in range(rng.randint(1, self.branch)):
            end = len(path) + 1 >= rng.randint(self.min_depth, self.max_depth)
            text = f"The answer is {rng.randint(1, 9)}." if end else f"s{len(path)}.{i} "
            kids.append((text, rng.uniform(0.05, 1.0)))
        return kids

    def value(self, path: tuple[str, ...]) -> float:
        return random.Random(f"v{self.seed}/{'|'.join(path)}").random()


trees = st.builds(Tree, seed=st.integers(0, 10**6), branch=st.integers(1, 3),
                  min_depth=st.integers(1, 3), max_depth=st.integers(3, 5))


# -- the event log -----------------------------------------------------------------------------
DIMS = ("generated_tokens", "scorer_calls", "flops", "seconds")
SPENT: dict[str, str] = dict(zip(("tokens", "scorer_calls", "flops", "seconds"), DIMS))


class Clock:
    """Scripted time: it moves only when an engine or scorer call advances it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Log:
    """Events in order: ("check", meter, result) or ("call", kind, meter, deltas, generating)."""

    events: list[tuple[Any, ...]] = field(default_factory=list)

    def violations(self) -> list[str]:
        """Generating calls with no False check on their meter since the last generating call."""
        out, cleared = [], set()  # ids of meters checked (False) since the last generation
        for i, event in enumerate(self.events):
            if event[0] == "check":
                if not event[2]:
                    cleared.add(id(event[1]))
            elif event[4]:  # a generating call
                if id(event[2]) not in cleared:
                    out.append(f"{event[1]} with no budget check before it (event {i})")
                cleared = set()
        return out

    def largest_batch(self) -> dict[str, float]:
        """Per dimension, the most one batch charged. A batch starts at the check that let a
        generating call go ahead (the last False check on its meter before it) and runs to
        the next such check: the expansion, the scoring of what it made, and whatever ran
        after the search stopped (scoring the final candidates) with the batch under way."""
        starts, pending = {0}, None  # event indices where batches start
        for i, event in enumerate(self.events):
            if event[0] == "check":
                if not event[2]:
                    pending = i
            elif event[4] and pending is not None:
                starts.add(pending)
                pending = None
        batches: list[dict[str, float]] = []
        for i, event in enumerate(self.events):
            if i in starts:
                batches.append(dict.fromkeys(DIMS, 0.0))
            if event[0] == "call":
                batches[-1] = {k: batches[-1][k] + event[3][k] for k in DIMS}
        return {k: max((b[k] for b in batches), default=0.0) for k in DIMS}


def _state(meter: Meter) -> dict[str, float]:
    return {"generated_tokens": meter.generated_tokens, "scorer_calls": meter.scorer_calls,
            "flops": meter.flops, "seconds": meter.seconds}


def instrument(engine: Any, scorer: Any, log: Log, clock: Clock, patch: pytest.MonkeyPatch
               ) -> None:
    """Log every model and scorer call (on the meter it charges: the view's, which for the
    reserve's completion is the sub-meter), each advancing the clock (but those that start
    with the time up: the engines refuse them before any work). Patched on the classes (a
    fresh subclass each), so every view of the engine and scorer is logged."""

    def logged(cls: type, name: str, generating: Callable[[dict[str, Any]], bool],
               seconds: float) -> None:
        real = getattr(cls, name)

        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            meter, before = self.meter, _state(self.meter)
            limit = meter.budget.seconds
            out = real(self, *args, **kwargs)
            if limit is None or before["seconds"] < limit:  # past it, the call does no work
                clock.now += seconds
            after = _state(meter)
            log.events.append(("call", name, meter, {k: after[k] - before[k] for k in DIMS},
                               generating(kwargs)))
            return out

        patch.setattr(cls, name, call)

    eng_cls = type("Logged" + type(engine).__name__, (type(engine),), {})
    sc_cls = type("Logged" + type(scorer).__name__, (type(scorer),), {})
    patch.setattr(engine, "__class__", eng_cls)
    patch.setattr(scorer, "__class__", sc_cls)
    logged(eng_cls, "expand", lambda kw: True, ENGINE_SECONDS)
    logged(eng_cls, "extend", lambda kw: bool(kw.get("generated", False)), ENGINE_SECONDS)
    logged(eng_cls, "topk_next", lambda kw: False, ENGINE_SECONDS)
    logged(sc_cls, "score", lambda kw: False, SCORER_SECONDS)


def run(algo: str | Callable[..., Any], engine: Any, scorer: Any, budget: Budget, *,
        seed: int = 0, knobs: dict[str, Any] | None = None) -> tuple[Result, Log]:
    """The algorithm (a registry name or a function) as search.solve runs it, on a meter with
    the scripted clock, with checks and calls logged."""
    log, clock = Log(), Clock()
    real = Meter.exhausted

    def exhausted(meter: Meter) -> bool:
        result = real(meter)
        log.events.append(("check", meter, result))
        return result

    fn = get(algo) if isinstance(algo, str) else algo
    meter = Meter(budget, clock=clock)
    session = Session(meter)
    with pytest.MonkeyPatch.context() as patch:
        instrument(engine, scorer, log, clock, patch)
        patch.setattr(Meter, "exhausted", exhausted)
        result = fn(PROBLEM, engine.bind(session), bind(scorer, session), session, seed=seed,
                    **(knobs or {}))
    return result, log


def run_tree(algo: str | Callable[..., Any], tree: Tree, budget: Budget, *,
             tokens_per_step: int = 2, flops_per_token: float = 1.0, seed: int = 0
             ) -> tuple[Result, Log]:
    engine = ScriptedEngine(tree.children, tokens_per_step=tokens_per_step,
                      flops_per_token=flops_per_token)
    knobs = KNOBS.get(algo, {}) if isinstance(algo, str) else {}
    return run(algo, engine, ScriptedScorer(tree.value), budget, seed=seed, knobs=knobs)


def stop_point(budget: Budget, limit: str) -> float:
    """Where a search stops for one limit (Budget.reserve)."""
    value = getattr(budget, limit)
    return value - budget.reserve_tokens if limit == "tokens" else value * (1 - budget.reserve)


def stopped(result: Result, budget: Budget) -> bool:
    """Whether a stopping point of the budget was reached."""
    return any(getattr(result.usage, SPENT[k]) >= stop_point(budget, k)
               for k in budget.limits())


def cut_of(result: Result) -> str | None:
    """The limit that cut the search's work in flight short (compute_optimal: its chosen
    sub-search's); None where it stopped between batches (cut_by then names the limit whose
    stopping point it reached)."""
    for stats in (result.stats, result.stats.get("chosen_stats", {})):
        if stats.get("cut_in_flight"):
            return stats["cut_by"]
    return None


def assert_honest(result: Result, budget: Budget) -> None:
    """No fake answer, and a status that says what happened."""
    assert result.status in ("ok", "budget_exhausted", "no_answer", "unfinished"), result.status
    finished = {n.id: n for n in result.tree.walk() if n.finished}
    for c in result.candidates:  # candidates are real paths of the tree
        assert c.finished == (c.node_id in finished)
        assert c.answer == (extract(PROBLEM, c.text) if c.finished else None)
    if result.answer is not None:
        assert result.status in ("ok", "budget_exhausted") and result.selected_by
        assert any(n.text == result.text and extract(PROBLEM, n.text) == result.answer
                   for n in finished.values()), result
    else:
        assert result.status != "ok" and result.text == ""
    if result.status == "budget_exhausted":  # a stopping point reached, or a limit cut work
        cut = cut_of(result)
        assert stopped(result, budget) or cut in budget.limits(), result
        if cut is None:  # stopped between batches: no answer, nothing finished
            assert result.answer is None and not any(c.finished for c in result.candidates)
            assert result.stats["cut_by"] in budget.limits()  # the limit is named all the same
    if result.algo != "compute_optimal":  # (its probe's tree is not the Result's)
        # nothing generated is lost: every token paid for is a step of the returned tree
        kept = sum(len(n.step.token_ids) for n in result.tree.walk() if n.step is not None)
        assert kept == result.usage.generated_tokens


def assert_bounded(result: Result, log: Log, budget: Budget) -> None:
    """Within every limit; seconds (checked before each call) by less than one call."""
    assert log.violations() == []
    for limit, value in budget.limits().items():
        spent = getattr(result.usage, SPENT[limit])
        slack = max(ENGINE_SECONDS, SCORER_SECONDS) if limit == "seconds" else 0.0
        assert spent <= value + slack, (limit, spent, value)


budgets = st.builds(
    Budget, tokens=st.none() | st.integers(1, 60), scorer_calls=st.none() | st.integers(1, 20),
    flops=st.none() | st.floats(1.0, 200.0), seconds=st.none() | st.floats(0.5, 30.0),
    reserve=st.sampled_from([0.0, 0.1, 0.3])).filter(lambda b: not b.unlimited)


def bounded_and_honest(algo: str | Callable[..., Any], examples: int) -> None:
    @settings(max_examples=examples, deadline=None, derandomize=True)
    @given(tree=trees, budget=budgets, tokens_per_step=st.integers(1, 4),
           seed=st.integers(0, 99))
    def check(tree, budget, tokens_per_step, seed):
        result, log = run_tree(algo, tree, budget, tokens_per_step=tokens_per_step, seed=seed)
        assert_bounded(result, log, budget)
        assert_honest(result, budget)

    check()


# -- the contract on a tiny random Llama ---------------------------------------------------------
LLAMA_KNOBS = {"n": 4, "m": 2, "groups": 2, "width": 2, "k": 2, "iterations": 4, "batch": 2,
               "rollouts": 4, "step_tokens": 4, "max_depth": 6, "horizon": 12,
               "chunk_tokens": 4, "max_tokens": 24,
               "table": {"probe": {"n": 2, "step_tokens": 4, "max_depth": 6},
                         "edges": [0.5], "bins": [{"algo": "best_of_n",
                                                   "knobs": {"n": 2, "step_tokens": 4}},
                                                  {"algo": "beam", "knobs": {"n": 4, "m": 2,
                                                                             "step_tokens": 4,
                                                                             "max_depth": 6}}]}}
# each with a token cap too, so a random model that never stops stays quick
LLAMA_BUDGETS = [Budget(tokens=30), Budget(tokens=200, scorer_calls=5),
                 Budget(tokens=200, seconds=3.5), Budget(tokens=30, reserve=0.0)]


def llama_knobs(algo: str) -> dict[str, Any]:
    import inspect

    params = inspect.signature(get(algo)).parameters
    return {k: v for k, v in LLAMA_KNOBS.items() if k in params}


def text_value(path: tuple[str, ...]) -> float:
    return random.Random("|".join(path)).random()


@pytest.mark.parametrize("engine_kind", ["scripted", "tiny_llama"])
@pytest.mark.parametrize("algo", ALGOS)
def test_usage_stays_within_the_budget(algo, engine_kind, tiny_model):
    """The contract: tokens, scorer calls and FLOPs stay within their limits, seconds within
    one call of theirs, every batch is checked for, and the result is honest about what
    happened."""
    if engine_kind == "scripted":
        bounded_and_honest(algo, 25)
        return
    from search.engines.hf import HFEngine

    model, tok = tiny_model
    for budget in LLAMA_BUDGETS:
        engine = HFEngine(copy.deepcopy(model), tok, chat=False, device="cpu")
        result, log = run(algo, engine, ScriptedScorer(text_value), budget,
                          knobs=llama_knobs(algo))
        assert_bounded(result, log, budget)
        assert_honest(result, budget)
        assert result.usage.generated_tokens > 0


@pytest.mark.slow
@pytest.mark.parametrize("algo", ALGOS)
def test_usage_stays_within_the_budget_many_trees(algo):
    bounded_and_honest(algo, 400)


@pytest.mark.parametrize("lookahead", [1, 2])
def test_beam_lookahead_stays_within_the_budget(lookahead):
    """The same bounds with beam's lookahead on: each rollout step is its own checked batch."""
    bounded_and_honest(functools.partial(get("beam"), **KNOBS["beam"], lookahead=lookahead), 25)


@pytest.mark.parametrize("dimension", ["tokens", "flops", "scorer_calls", "seconds"])
@pytest.mark.parametrize("algo", ALGOS)
@settings(max_examples=8, deadline=None, derandomize=True)
@given(tree=trees.filter(lambda t: t.min_depth >= 2), seed=st.integers(0, 99))
def test_a_budget_too_small_for_one_step_says_so(algo, dimension, tree, seed):
    """One token, one FLOP, one scorer call or a second: solutions need >= 2 steps of 2
    tokens. Only a scorer-call limit leaves something to finish a path with (generation does
    not spend scorer calls): then the reserve may answer, from a path finished greedily."""
    budget = Budget(**{dimension: 1})
    result, log = run_tree(algo, tree, budget, seed=seed)
    assert_bounded(result, log, budget)
    assert_honest(result, budget)
    if dimension != "scorer_calls":
        assert (result.status, result.answer, result.text) == ("budget_exhausted", None, "")
    elif result.answer is not None and algo in SCORE_AS_THEY_GO:
        assert result.stats["reserve"]["finished"] and "from the reserve" in result.selected_by


def test_the_event_log_catches_an_algorithm_that_ignores_its_budget():
    """The checker itself: a loop that never asks the meter is flagged, one that does is not."""
    tree = Tree(seed=1, branch=2, min_depth=5, max_depth=5)  # no path finishes early

    def reckless(problem, engine, scorer, session, *, seed=0):
        frontier = [engine.root(problem)]
        for _ in range(3):
            frontier = [c for cs in engine.expand(frontier, 1, seed=seed) for c in cs]

    def careful(problem, engine, scorer, session, *, seed=0):
        frontier = [engine.root(problem)]
        while not session.meter.exhausted():
            frontier = [c for cs in engine.expand(frontier, 1, seed=seed) for c in cs]

    budget = Budget(tokens=3, reserve=0.0)  # 2 tokens per step: the second step crosses it
    _, bad = run_tree(reckless, tree, budget)
    _, good = run_tree(careful, tree, budget)
    assert len(bad.violations()) == 3 and good.violations() == []
    # reckless: 3 steps in one batch, the engine cutting the second at the limit (2 + 1 + 0
    # tokens); careful: the same tokens, one step per batch
    assert bad.largest_batch()["generated_tokens"] == 3
    assert good.largest_batch()["generated_tokens"] == 2
    assert bad.largest_batch()["seconds"] == 3 * ENGINE_SECONDS
    assert sum(e[3]["generated_tokens"] for e in good.events if e[0] == "call") == 3


# -- the reserve -------------------------------------------------------------------------------
DEPTH, TPS = 5, 2  # every path of UNIFORM finishes at depth DEPTH; steps of TPS tokens
UNIFORM = Tree(seed=11, branch=3, min_depth=DEPTH, max_depth=DEPTH)


@pytest.mark.parametrize("algo", ALGOS)
def test_a_search_stopped_short_answers_from_the_reserve(algo):
    """The largest token limit (no reserve) at which the search ends with partial paths and
    no answer, stopped between batches (no batch cut at the limit); then the same stopping point with a reserve big enough for a whole path: the
    search stops there, then finishes its best partial path greedily from the reserve, within
    the limit, and says so."""
    bare = None
    for tokens in range(1, 300):
        res, _ = run_tree(algo, UNIFORM, Budget(tokens=tokens, reserve=0.0), tokens_per_step=TPS)
        if res.status == "budget_exhausted" and res.candidates and cut_of(res) is None:
            bare = (tokens, res)  # stopped between batches, at the limit itself
    assert bare is not None, f"{algo} never stopped short of an answer"
    tokens, res = bare
    assert res.answer is None and not any(c.finished for c in res.candidates)
    reserve = DEPTH * TPS  # enough to finish any path from any depth
    limit = tokens + reserve
    budget = Budget(tokens=limit, reserve=(reserve + 0.5) / limit)
    assert budget.reserve_tokens == reserve and stop_point(budget, "tokens") == tokens
    saved, log = run_tree(algo, UNIFORM, budget, tokens_per_step=TPS)
    assert_bounded(saved, log, budget)
    assert_honest(saved, budget)
    assert saved.answer is not None and saved.status in ("ok", "budget_exhausted"), saved
    if algo == "compute_optimal":  # its probe takes a share of the limit, not of the stop
        return  # point, so the two runs differ; test_known_failure_budget_600_answers has it
    assert "from the reserve" in saved.selected_by and saved.stats["reserve"]["finished"]
    nodes = {n.id: n for n in saved.tree.walk()}
    chosen = next(c for c in saved.candidates if c.text == saved.text)
    # the same search up to its stopping point, then greedy steps from the best partial path
    assert saved.stats["reserve"]["node"] == chosen.node_id
    start = nodes[saved.stats["reserve"]["from_node"]]
    assert nodes[chosen.node_id].path()[:start.depth + 1] == start.path()
    assert saved.usage.generated_tokens == res.usage.generated_tokens + \
        saved.stats["reserve"]["tokens"] <= limit


def _flat_tree(path: tuple[str, ...]) -> list[tuple[str, float]]:
    """Endless steps; every one may also end the solution, which the scorer scores 0."""
    return [(f"s{len(path)}.{i} ", 0.3) for i in range(3)] + [("The answer is 7.", 0.1)]


def test_astar_has_a_default_cap_that_the_result_reports():
    """A* stops at a finished state popped from its queue: with a scorer that prices every
    finished state far above any partial one it would expand to its depth limit along every
    branch (width 2, k 2: ~4 steps per batch, 40 levels, 3-way branching). The default cap
    stops it after max_batches=40 batches and says so."""
    scorer = ScriptedScorer(lambda path: 0.0 if path[-1].startswith("The") else 1.0)
    engine = ScriptedEngine(_flat_tree, tokens_per_step=1)
    res, _ = run("astar", engine, scorer, Budget(), knobs=KNOBS["astar"])
    assert res.knobs["max_batches"] == 40
    assert res.stats["capped"] and res.stats["batches"] == 40
    assert res.usage.generated_tokens <= 40 * 2 * 2 + 2 * 2  # 40 batches of width x k steps
    capped, _ = run("astar", ScriptedEngine(_flat_tree, tokens_per_step=1), scorer, Budget(),
                    knobs={**KNOBS["astar"], "max_batches": 5})
    assert capped.stats == {**capped.stats, "capped": True, "batches": 5}
    assert capped.usage.generated_tokens < res.usage.generated_tokens
    free, _ = run("astar", ScriptedEngine(_flat_tree, tokens_per_step=1), ScriptedScorer(
        lambda path: 1.0), Budget(), knobs=KNOBS["astar"])  # a goal is popped early
    assert not free.stats["capped"] and free.answer == "7"


@pytest.mark.parametrize("algo", ["diverse_beam", "compute_optimal"])
def test_known_failure_budget_600_answers(algo):
    """The issue's case: Budget(tokens=600) with candidates one step from finishing ended
    with answer None. Paths here need 14 steps of 3 tokens; 16 rows per batch: without a
    reserve the 13th batch ends at 624 tokens, one step short of any answer."""

    def deep(path: tuple[str, ...]) -> list[tuple[str, float]]:
        if len(path) == 13:
            return [("The answer is 7.", 0.7), ("The answer is 3.", 0.3)]
        return [(f"s{len(path)}.{i} ", 1.0 / (i + 1)) for i in range(4)]

    engine = ScriptedEngine(deep, tokens_per_step=3)
    knobs = {"diverse_beam": {"n": 16, "m": 4, "groups": 2},
             "compute_optimal": {"table": {"probe": {"n": 4}, "edges": [],
                                           "bins": [{"algo": "diverse_beam",
                                                     "knobs": {"n": 16, "m": 4,
                                                               "groups": 2}}]}}}[algo]
    budget = Budget(tokens=600)
    res, log = run(algo, engine, ScriptedScorer(lambda path: 0.5), budget, knobs=knobs)
    assert_bounded(res, log, budget)
    assert res.status in ("ok", "budget_exhausted") and res.answer in {"7", "3"}, res
    assert "after finishing the best partial path greedily from the reserve" in res.selected_by
    assert res.usage.generated_tokens <= 600
    without, _ = run(algo, ScriptedEngine(deep, tokens_per_step=3), ScriptedScorer(lambda path: 0.5),
                     Budget(tokens=600, reserve=0.0), knobs=knobs)
    assert without.answer is None  # what happened before: no reserve, no answer


def test_reserve_is_validated_and_what_it_leaves_is_hand_computed():
    assert Budget(tokens=600).reserve == 0.1 and Budget(tokens=600).reserve_tokens == 60
    assert Budget(tokens=600, reserve=0).reserve_tokens == 0
    assert Budget(reserve=0.5).unlimited  # a reserve is not a limit
    for bad in (-0.1, 1.0, math.nan, True, "0.1"):
        with pytest.raises(ValueError, match="reserve"):
            Budget(tokens=10, reserve=bad)  # type: ignore[arg-type]
    clock = Clock()
    meter = Meter(Budget(tokens=600, seconds=10.0, scorer_calls=20), clock=clock)
    meter.charge_model(generated=539)
    assert not meter.exhausted()
    meter.charge_model(generated=37)  # 576: past the stopping point 540, short of 600
    assert meter.exhausted() and not meter.reached()
    # what is left of every limit: the last batch went 36 tokens into the reserve's 60
    assert meter.reserve_budget() == Budget(tokens=24, seconds=10.0, scorer_calls=20,
                                            reserve=0.0)
    clock.now = 9.5  # past the time's stopping point (9 s): 24 tokens, 0.5 s
    meter.generated_tokens = 576
    left = meter.reserve_budget()
    assert left is not None and left.tokens == 24 and left.seconds == pytest.approx(0.5)
    meter.generated_tokens = 500  # 100 left: more than the reserve, all of it
    assert (left := meter.reserve_budget()) is not None and left.tokens == 100
    clock.now = 10.0  # the time is up: nothing can be spent
    assert meter.reserve_budget() is None and meter.reached()
    meter.scorer_calls = 20
    assert not meter.scoring_left()


def test_submeter_hands_everything_it_was_charged_to_its_parent():
    """The reserve's sub-meter: what the parts' views charging it spent (model, scorer, a
    server's own counts) lands on the parent meter too, counted once; the part itself and
    the search's own view still charge their own meters."""
    from search.budget import Meter, submeter
    from search.session import Bindable

    class Part(Bindable):
        pass

    parent, part = Meter(), Part()
    view = part.bind(Session(parent))
    parent.charge_server({"requests": 1})
    with submeter(parent, Budget(tokens=10)) as sub:
        sub_view = view.bind(view.session.charging(sub))
        sub_view.meter.charge_model(generated=3, prefill=2, flops=5.0, passes=2)
        sub_view.meter.charge_scorer(calls=1, tokens=4)
        sub_view.meter.charge_server({"requests": 2, "completion_tokens": 3})
        assert sub_view.meter is sub and parent.generated_tokens == 0
        assert view.meter is parent and sub_view.session.kv is view.session.kv
    assert part.meter is not sub and part.meter is not parent
    assert (parent.scorer_calls, parent.scorer_tokens) == (1, 4)
    assert parent.server == {"requests": 3, "completion_tokens": 3}


def _batch_of(node: Any) -> int:
    """The batch that made a non-root node: the one its parent was popped in."""
    from search.algos.astar import AStarMark

    return node.parent.scores.get(AStarMark).batch


def _step_tokens(node: Any) -> int:
    """The tokens a non-root node's step generated."""
    return node.generated_tokens - node.parent.generated_tokens


def test_astar_bon_spend_stops_at_best_of_ns_estimated_tokens():
    """bon_spend=1: A* stops after the first batch at whose end its generated tokens reach
    width x k whole paths of the mean length of the finished states found so far. Replayed
    from the run's own tree, batch by batch; and the same draws as the search run to the
    same number of batches by the cap alone."""
    scorer = ScriptedScorer(lambda path: 0.0 if path[-1].startswith("The") else 0.9)
    knobs = {**KNOBS["astar"], "width": 2, "k": 2, "bon_spend": 1.0}
    res, _ = run("astar", ScriptedEngine(_flat_tree, tokens_per_step=1), scorer, Budget(),
                 knobs=knobs)
    assert res.stats["spent"] and not res.stats["capped"]
    batches = res.stats["batches"]
    nodes = [n for n in res.tree.walk() if n.parent is not None]
    assert max(map(_batch_of, nodes)) == batches - 1
    stopped_after = []
    for j in range(batches):
        made = [n for n in nodes if _batch_of(n) <= j]
        spent = sum(map(_step_tokens, made))
        lengths = [n.generated_tokens for n in made if n.finished]
        if lengths and spent >= 2 * 2 * sum(lengths) / len(lengths):
            stopped_after.append(j)
    assert stopped_after[:1] == [batches - 1]
    assert res.usage.generated_tokens == sum(map(_step_tokens, nodes))
    same, _ = run("astar", ScriptedEngine(_flat_tree, tokens_per_step=1), scorer, Budget(),
                  knobs={**knobs, "bon_spend": None, "max_batches": batches})
    assert same.stats["capped"] and same.usage == res.usage and same.answer == res.answer
    free, _ = run("astar", ScriptedEngine(_flat_tree, tokens_per_step=1), scorer, Budget(),
                  knobs={**knobs, "bon_spend": None})
    assert free.usage.generated_tokens > res.usage.generated_tokens
    with pytest.raises(ValueError, match="bon_spend"):
        run("astar", ScriptedEngine(_flat_tree, tokens_per_step=1), scorer, Budget(),
            knobs={**knobs, "bon_spend": float("nan")})
