"""Budget bounds (issue 9, item 4): every registered algorithm, random scripted trees, random
budgets over tokens, scorer calls and FLOPs.

Three properties, checked on an event log of every engine call, scorer call and budget check:
- the contract of search/budget.py: every generating engine call (expand, or extend of chosen
  tokens) is preceded, since the previous generating call, by a `meter.exhausted()` check
  that returned False on the meter the engine charges; so once a limit is reached, only the
  batch already under way completes;
- usage exceeds each limit by less than one batch: the most that the calls between two
  consecutive checks ever charged in that dimension;
- honesty: an answer comes from a finished path of the returned tree; "budget_exhausted"
  means no answer, no finished candidate and a limit really reached. A budget too small for
  one step (trees whose solutions need >= 2 steps) ends as "budget_exhausted", no exception.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from search.answers import extract
from search.budget import Meter, metered
from search.engines.fake import ScriptedEngine, ScriptedScorer
from search.registry import get, names
from search.types import Budget, Problem, Result

ALGOS = names()
# algorithms that never call the scorer with their default knobs: a scorer-call limit is
# never reached by them, so it cannot stop them early
SCORER_FREE = {"best_of_n", "rpc", "first_finish", "greedy"}
# small widths keep each example fast; everything else is the algorithm's default
KNOBS: dict[str, dict[str, Any]] = {
    "best_of_n": {"n": 4}, "rpc": {"n": 4}, "first_finish": {"n": 4, "chunk_tokens": 2},
    "beam": {"n": 4, "m": 2}, "dvts": {"n": 4, "m": 2}, "diverse_beam": {"n": 4, "m": 2,
                                                                          "groups": 2},
    "particle_filter": {"n": 4}, "particle_gibbs": {"n": 3, "iterations": 3},
    "astar": {"width": 2, "k": 2}, "mcts": {"iterations": 12, "batch": 2, "k": 2},
    "pgtd": {"rollouts": 12, "width": 2, "horizon": 64},
}
PROBLEM = Problem(prompt="toy", id="toy", answer="7")


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
        """Per dimension, the most the calls between two consecutive checks charged."""
        best = {"generated_tokens": 0.0, "scorer_calls": 0.0, "flops": 0.0}
        batch = dict.fromkeys(best, 0.0)
        for event in self.events + [("check", None, True)]:
            if event[0] == "check":
                best = {k: max(best[k], batch[k]) for k in best}
                batch = dict.fromkeys(best, 0.0)
            else:
                batch = {k: batch[k] + event[3][k] for k in best}
        return best


def _state(meter: Meter) -> dict[str, float]:
    return {"generated_tokens": meter.generated_tokens, "scorer_calls": meter.scorer_calls,
            "flops": meter.flops}


class LoggedEngine(ScriptedEngine):
    def __init__(self, tree: Tree, log: Log, *, tokens_per_step: int, flops_per_token: float
                 ) -> None:
        super().__init__(tree.children, tokens_per_step=tokens_per_step,
                         flops_per_token=flops_per_token)
        self.log = log

    def _logged(self, kind: str, generating: bool, call: Callable[[], Any]) -> Any:
        meter, before = self.meter, _state(self.meter)
        out = call()
        after = _state(meter)
        self.log.events.append(("call", kind, meter, {k: after[k] - before[k] for k in after},
                                generating))
        return out

    def expand(self, nodes, n=1, **kw):
        return self._logged("expand", True, lambda: super(LoggedEngine, self).expand(
            nodes, n, **kw))

    def extend(self, nodes, continuations, *, generated=False):
        return self._logged("extend", generated, lambda: super(LoggedEngine, self).extend(
            nodes, continuations, generated=generated))

    def topk_next(self, nodes, k):
        return self._logged("topk_next", False, lambda: super(LoggedEngine, self).topk_next(
            nodes, k))


class LoggedScorer(ScriptedScorer):
    def __init__(self, tree: Tree, log: Log) -> None:
        super().__init__(tree.value)
        self.log = log

    def score(self, problem, nodes):
        meter, before = self.meter, _state(self.meter)
        out = super().score(problem, nodes)
        after = _state(meter)
        self.log.events.append(("call", "score", meter, {k: after[k] - before[k] for k in after},
                                False))
        return out


def run(algo: str | Callable[..., Any], tree: Tree, budget: Budget, *,
        tokens_per_step: int = 2, flops_per_token: float = 1.0, seed: int = 0
        ) -> tuple[Any, Log]:
    """The algorithm (a registry name or a function) as search.solve runs it, with checks and
    calls logged."""
    log = Log()
    real = Meter.exhausted

    def exhausted(meter: Meter) -> bool:
        result = real(meter)
        log.events.append(("check", meter, result))
        return result

    fn = get(algo) if isinstance(algo, str) else algo
    knobs = KNOBS.get(algo, {}) if isinstance(algo, str) else {}
    engine = LoggedEngine(tree, log, tokens_per_step=tokens_per_step,
                          flops_per_token=flops_per_token)
    scorer = LoggedScorer(tree, log)
    meter = Meter(budget)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Meter, "exhausted", exhausted)
        with metered(meter, engine, scorer):
            result = fn(PROBLEM, engine, scorer, meter, seed=seed, **knobs)
    return result, log


def reached(result: Result, budget: Budget) -> bool:
    u = result.usage
    return ((budget.tokens is not None and u.generated_tokens >= budget.tokens)
            or (budget.scorer_calls is not None and u.scorer_calls >= budget.scorer_calls)
            or (budget.flops is not None and u.flops >= budget.flops))


def assert_honest(result: Result, budget: Budget) -> None:
    """No fake answer, and a status that says what happened."""
    assert result.status in ("ok", "budget_exhausted", "no_answer", "unfinished"), result.status
    finished = {n.id: n for n in result.tree.walk() if n.finished}
    for c in result.candidates:  # candidates are real paths of the tree
        assert c.finished == (c.node_id in finished)
        assert c.answer == (extract(PROBLEM, c.text) if c.finished else None)
    if result.answer is not None:
        assert result.status == "ok"
        assert any(n.text == result.text and extract(PROBLEM, n.text) == result.answer
                   for n in finished.values()), result
    else:
        assert result.status != "ok" and result.text == ""
    if result.status == "budget_exhausted":
        assert reached(result, budget) and not any(c.finished for c in result.candidates)
    if result.algo != "compute_optimal":  # (its probe's tree is not the Result's)
        # nothing generated is lost: every token paid for is a step of the returned tree
        kept = sum(len(n.step.token_ids) for n in result.tree.walk() if n.step is not None)
        assert kept == result.usage.generated_tokens


def assert_bounded(result: Result, log: Log, budget: Budget) -> None:
    assert log.violations() == []
    batch, used = log.largest_batch(), result.usage
    for limit, name in ((budget.tokens, "generated_tokens"),
                        (budget.scorer_calls, "scorer_calls"), (budget.flops, "flops")):
        if limit is not None:
            spent = getattr(used, name)
            assert spent <= limit or spent - limit < batch[name], (name, spent, limit, batch)


budgets = st.builds(
    Budget, tokens=st.none() | st.integers(1, 60), scorer_calls=st.none() | st.integers(1, 20),
    flops=st.none() | st.floats(1.0, 200.0)).filter(lambda b: not b.unlimited)


def bounded_and_honest(algo: str | Callable[..., Any], examples: int) -> None:
    @settings(max_examples=examples, deadline=None, derandomize=True)
    @given(tree=trees, budget=budgets, tokens_per_step=st.integers(1, 4),
           seed=st.integers(0, 99))
    def check(tree, budget, tokens_per_step, seed):
        result, log = run(algo, tree, budget, tokens_per_step=tokens_per_step, seed=seed)
        assert_bounded(result, log, budget)
        assert_honest(result, budget)

    check()


@pytest.mark.parametrize("algo", ALGOS)
def test_usage_stays_within_one_batch_of_the_budget(algo):
    bounded_and_honest(algo, 25)


@pytest.mark.slow
@pytest.mark.parametrize("algo", ALGOS)
def test_usage_stays_within_one_batch_of_the_budget_many_trees(algo):
    bounded_and_honest(algo, 400)


@pytest.mark.parametrize("lookahead", [1, 2])
def test_beam_lookahead_stays_within_one_batch_of_the_budget(lookahead):
    """The same bounds with beam's lookahead on: each rollout step is its own checked batch."""
    bounded_and_honest(functools.partial(get("beam"), **KNOBS["beam"], lookahead=lookahead), 25)


@pytest.mark.parametrize("dimension", ["tokens", "flops", "scorer_calls"])
@pytest.mark.parametrize("algo", ALGOS)
@settings(max_examples=8, deadline=None, derandomize=True)
@given(tree=trees.filter(lambda t: t.min_depth >= 2), seed=st.integers(0, 99))
def test_a_budget_too_small_for_one_step_says_so(algo, dimension, tree, seed):
    """One token, one FLOP or one scorer call: solutions need >= 2 steps of 2 tokens."""
    budget = Budget(**{dimension: 1})
    result, log = run(algo, tree, budget, seed=seed)
    assert_bounded(result, log, budget)
    assert_honest(result, budget)
    if dimension != "scorer_calls" or algo not in SCORER_FREE | {"pgtd", "compute_optimal"}:
        # pgtd, and compute_optimal's best-of-n probe, score only complete samples
        assert (result.status, result.answer, result.text) == ("budget_exhausted", None, "")


def test_the_event_log_catches_an_algorithm_that_ignores_its_budget():
    """The checker itself: a loop that never asks the meter is flagged, one that does is not."""
    tree = Tree(seed=1, branch=2, min_depth=5, max_depth=5)  # no path finishes early

    def reckless(problem, engine, scorer, meter, *, seed=0):
        frontier = [engine.root(problem)]
        for _ in range(3):
            frontier = [c for cs in engine.expand(frontier, 1, seed=seed) for c in cs]

    def careful(problem, engine, scorer, meter, *, seed=0):
        frontier = [engine.root(problem)]
        while not meter.exhausted():
            frontier = [c for cs in engine.expand(frontier, 1, seed=seed) for c in cs]

    budget = Budget(tokens=3)  # 2 tokens per step: the second step crosses it
    _, bad = run(reckless, tree, budget)
    _, good = run(careful, tree, budget)
    assert len(bad.violations()) == 3 and good.violations() == []
    # reckless: all 3 steps in one batch (6 tokens); careful: 2 steps of 2 tokens, 1 per batch
    assert bad.largest_batch()["generated_tokens"] == 6
    assert good.largest_batch()["generated_tokens"] == 2
    assert sum(e[3]["generated_tokens"] for e in good.events if e[0] == "call") == 4
