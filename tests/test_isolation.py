"""A search that fails never changes another's Result (issue 33): good searches mixed with
failing ones (bad inputs, scorers that raise at random moments, a value scorer being built
beside them) at concurrency 16 on one engine give, bit for bit, what each gives alone.

The reported failure: `TypeError: 'NoneType' object is not subscriptable` in
KVTree.feed_job, 1 job in 48, only concurrently. Building a value scorer turns on the shared
engine's keep_hidden; a job that asked for a forward without hidden states then read its
output as if it had asked for them. Jobs now read keep_hidden once (KVTree.pass_for)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from helpers import dump

import search
from search.engines.hf import HFEngine
from search.many import concurrently
from search.types import Budget, Node, Problem

GOOD = [("greedy", None, {}), ("best_of_n", None, {"n": 4}),
        ("beam", "steps", {"n": 4, "m": 2}), ("particle_filter", "steps", {"n": 4}),
        ("mcts", "steps", {"iterations": 4}), ("best_of_n", "value", {"n": 3})]
BUDGET = Budget(tokens=400)


class Boom(RuntimeError):
    """What the failing scorers raise."""


@dataclass
class RaisingScorer:
    """Scores like the step checker until its `after`-th call, then raises."""

    after: int
    calls: int = 0
    name: str = "raising"

    def score(self, problem: Problem, nodes: Sequence[Node]) -> list[float]:
        self.calls += 1
        if self.calls > self.after:
            raise Boom(f"scorer failed on call {self.calls}")
        return [1.0 / (1 + len(n.text)) for n in nodes]


@dataclass(frozen=True)
class Job:
    problem: Problem | str
    algo: str
    scorer: Any
    knobs: dict[str, Any]
    good: bool


def jobs(problems: list[Problem], seed: int) -> list[Job]:
    """Each good search once, and as many failing ones, in a shuffled order."""
    rng = random.Random(seed)
    out = [Job(p, a, s, k, True) for p in problems for a, s, k in GOOD]
    long = Problem(prompt="1 + 1 = " * 4000, id="too-long")  # past the model's context
    for i in range(len(out)):
        kind = i % 4
        p = problems[i % len(problems)]
        if kind == 0:
            out.append(Job(long, "best_of_n", None, {"n": 2}, False))
        elif kind == 1:
            out.append(Job(p, "beam", RaisingScorer(rng.randint(0, 3)), {"n": 4, "m": 2}, False))
        elif kind == 2:
            out.append(Job(p, "particle_filter", RaisingScorer(rng.randint(0, 5)), {"n": 4},
                           False))
        else:  # builds a value scorer (keep_hidden turns on), then fails in its search
            out.append(Job(p, "mcts", RaisingScorer(rng.randint(0, 2)), {"iterations": 3},
                           False))
            out.append(Job(long, "beam", "value", {"n": 4, "m": 2}, False))
    rng.shuffle(out)
    return out


def run(engine: HFEngine, job: Job) -> search.Result:
    return search.solve(job.problem, job.algo, BUDGET, engine=engine, scorer=job.scorer,
                        progress=False, **job.knobs)


@pytest.fixture(scope="module")
def problems() -> list[Problem]:
    from problems import arith

    return arith.generate(4, seed=11, difficulty=4)


@pytest.fixture(scope="module")
def solo(problems) -> dict[tuple[str, str, str], str]:
    """Every good search alone, one after another, on its own engine."""
    engine = HFEngine.load("tiny-arith")
    return {key(j): dump(run(engine, j)) for j in jobs(problems, 0) if j.good}


def key(job: Job) -> tuple[str, str, str]:
    return (job.problem.id if isinstance(job.problem, Problem) else job.problem, job.algo,
            str(job.scorer))


@pytest.mark.slow  # ~1 min per mix on 2 busy cores
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_failing_neighbours_change_no_good_result(problems, solo, seed):
    """Repeated with different mixes and orders: every good search's Result is its solo
    Result, every failing one fails with its own error."""
    engine = HFEngine.load("tiny-arith")  # fresh: keep_hidden off until a value scorer is built
    mix = jobs(problems, seed)
    changed, errors, failed = [], [], 0
    for i, out in concurrently(lambda j, _cancel: run(engine, j), mix, concurrency=16,
                               schedulers=[engine.scheduler]):
        job = mix[i]
        if job.good:
            if isinstance(out, BaseException):
                errors.append((key(job), repr(out)))
            elif dump(out) != solo[key(job)]:
                changed.append(key(job))
        elif isinstance(out, BaseException):  # its own error (a scorer may end unprovoked)
            assert isinstance(out, (Boom, ValueError)), (key(job), out)
            failed += 1
    too_long = sum(1 for j in mix if isinstance(j.problem, Problem) and j.problem.id == "too-long")
    assert failed >= too_long > 0
    assert errors == [] and changed == []


def test_a_job_that_asked_for_no_hidden_states_reads_none(problems):
    """The race itself, made deterministic: keep_hidden turns on while a job's forward is
    in flight (between the Pass and its output); the job reads its output as it asked."""
    engine = HFEngine.load("tiny-arith")
    kv = engine.kv
    root = engine.root(problems[0])
    job = kv.feed_job([root], [list(root.prompt_ids)], engine.session, all_logits=False,
                      prefill=len(root.prompt_ids))
    p = next(job)
    assert p.hidden is False
    kv.keep_hidden = True  # a value scorer is built by a neighbour
    out = p.alone()
    try:
        job.send(out)
    except StopIteration as stop:
        _, logits, hidden = stop.value
    assert hidden is None and logits.shape[0] == 1
