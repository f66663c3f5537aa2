"""Helpers shared by the step-level searches (astar, diverse_beam, dvts, particle_filter,
particle_gibbs, mcts): one way to sample a batch of steps, score paths and pack the Result.

Only `Sampler.expand` reaches the engine; every algorithm decides which nodes go into it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rewards.base import KEY
from search.budget import Meter
from search.engines.base import DEFAULT_STOP, Engine
from search.select import candidates, pack
from search.types import Candidate, Node, Problem, Result


@dataclass(frozen=True)
class Sampler:
    """The sampling knobs every step-level search passes to `engine.expand`."""

    temperature: float = 0.8
    top_p: float = 1.0
    step_tokens: int = 256
    stop: Sequence[str] | None = DEFAULT_STOP

    def expand(self, engine: Engine, nodes: Sequence[Node], n: int, rng: random.Random
               ) -> list[list[Node]]:
        """For each node, n sampled next steps: one batched engine call with a fresh seed."""
        if not nodes:
            return []
        return engine.expand(nodes, n, stop=self.stop, max_tokens=self.step_tokens,
                             temperature=self.temperature, top_p=self.top_p,
                             seed=rng.getrandbits(32))

    def knobs(self) -> dict[str, Any]:
        return dict(temperature=self.temperature, top_p=self.top_p, step_tokens=self.step_tokens)


Prune = Callable[[int, list[Node], list[Node]], list[Node]]  # (depth, done, live) -> cut


def sample_paths(engine: Engine, root: Node, n: int, meter: Meter, sampler: Sampler,
                 rng: random.Random, *, max_steps: int, prune: Prune | None = None
                 ) -> tuple[list[Node], list[Node], list[Node]]:
    """n independent samples of the root, each extended one step at a time (all live paths
    in one batch) until it finishes, max_steps, or the budget.

    prune(depth, done, live) may name live paths to stop early. Returns (finished paths,
    paths still live when the loop ended, pruned paths); the root itself is never a path.
    """
    frontier, width = [root], n  # n samples of the root, then one step per live path
    done: list[Node] = []
    cut: list[Node] = []
    for depth in range(1, max_steps + 1):
        if not frontier or meter.exhausted():
            break
        new = [c for cs in sampler.expand(engine, frontier, width, rng) for c in cs]
        done += [c for c in new if c.finished]
        frontier, width = [c for c in new if not c.finished], 1
        if prune is not None and frontier:
            drop = {c.id for c in prune(depth, done, frontier)}
            cut += [c for c in frontier if c.id in drop]
            frontier = [c for c in frontier if c.id not in drop]
        engine.retain(frontier)
    return done, [f for f in frontier if f is not root], cut


def path_score(node: Node, agg: Callable[[Sequence[float]], float]) -> float:
    """agg of the step rewards along node's path (the root has none: -inf)."""
    scores = node.step_scores(KEY)
    return agg(scores) if scores else float("-inf")


def new_siblings(kids: Sequence[Node]) -> list[Node]:
    """The kids minus repeats of an earlier sibling's step text (same parent, same text is
    the same state; a repeat is dropped before it costs a scorer call). Order is kept."""
    seen: set[tuple[int, str]] = set()
    out = []
    for kid in kids:
        assert kid.parent is not None and kid.step is not None
        key = (kid.parent.id, kid.step.text)
        if key not in seen:
            seen.add(key)
            out.append(kid)
    return out


Choose = Callable[[Problem, Sequence[Candidate]], Candidate | None]  # search.select.rule(...)


def finish(problem: Problem, root: Node, leaves: Sequence[Node], scores: Sequence[float],
           meter: Meter, *, choose: Choose, seed: int, algo: str, knobs: Mapping[str, Any],
           stats: Mapping[str, Any] | None = None) -> Result:
    """Candidates from the leaves (finished ones may answer), the selection rule, the Result."""
    cands = candidates(problem, leaves, scores)
    return pack(problem, root, cands, choose(problem, cands), meter, seed=seed, algo=algo,
                knobs=knobs, stats=stats)
