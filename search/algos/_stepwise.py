"""Helpers shared by the step-level searches: one way to sample a batch of steps, score paths,
finish the best partial path from the budget's reserve, and pack the Result.

Only `Sampler.expand` and `Finisher.complete` reach the engine; every algorithm decides which
nodes go into them.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from search import aggregate
from search.budget import Meter, submeter
from search.engines.base import DEFAULT_STOP, Engine
from search.scoring import KEY, Scorer, name, path_agg, score_nodes
from search.select import Selection, candidates, pack
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


# -- path scores ----------------------------------------------------------------------------
def resolve_agg(agg: str | None, scorer: Scorer) -> str:
    """The aggregation of step scores a search uses: the caller's `agg`, else the one the
    scorer declares (Scorer.path_agg). Unknown names fail here, before any model call."""
    chosen = path_agg(scorer) if agg is None else agg
    aggregate.get(chosen)
    return chosen


def scored_by(scorer: Scorer, agg: str) -> str:
    """What candidate scores are, for Result.selected_by: "steps, min"."""
    return f"{name(scorer)}, {agg}"


def path_score(node: Node, agg: Callable[[Sequence[float]], float]) -> float:
    """agg of the step rewards along node's path (the root has none: -inf)."""
    scores = node.step_scores(KEY)
    return agg(scores) if scores else float("-inf")


def path_scorer(agg: str) -> Callable[[Node], float]:
    """path_score under the named aggregation, as a function of the leaf."""
    fn = aggregate.get(agg)
    return lambda node: path_score(node, fn)


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


# -- duplicate states ----------------------------------------------------------------------
DUPLICATES = ("merge", "keep")
COPIES = "copies"  # Node.scores key: how many equal samples a merged node stands for


def merge_equal(kids: Sequence[Node], policy: str = "merge") -> list[Node]:
    """The kids of one expansion batch, equal states merged (policy "merge"; "keep" returns
    them as they are). A state is (path text, finished): the first kid sampled in a state
    stands for it and records scores["copies"] = how many kids were in it (1 if alone);
    each other one records scores["merged_into"] = the first one's id and is not returned,
    so it is never scored nor expanded (its tokens were generated and stay counted).
    Order is kept. `copies` lets votes count every sample (see with_copies)."""
    if policy == "keep":
        return list(kids)
    first: dict[tuple[str, bool], Node] = {}
    out = []
    for kid in kids:
        key = (kid.text, kid.finished)
        if key in first:
            first[key].scores[COPIES] += 1.0
            kid.scores["merged_into"] = float(first[key].id)
        else:
            first[key] = kid
            kid.scores[COPIES] = 1.0
            out.append(kid)
    return out


def copies(node: Node) -> int:
    """How many sampled paths node stands for (1 unless merge_equal merged some into it)."""
    return int(node.scores.get(COPIES, 1.0))


def with_copies(leaves: Sequence[Node]) -> list[Node]:
    """Each leaf repeated copies(leaf) times: a vote over the result counts every sample."""
    return [leaf for leaf in leaves for _ in range(copies(leaf))]


# -- finishing from the reserve -------------------------------------------------------------
@dataclass(frozen=True)
class Finisher:
    """How a search finishes its best partial path from the budget's reserve (Budget.reserve)
    when the budget stopped it before any path finished.

    complete(node): greedy steps (temperature 0, the sampler's stop and step size, each step
    capped at the reserve's tokens left) until the path finishes, max_steps more steps, or
    the reserve is spent; then its new nodes are scored (every new step, or only the leaf
    when leaf_only: an outcome scorer or agg "last"), while scorer calls are left. Runs on a
    sub-meter (search.budget.submeter), so every token is charged to the run's meter.
    """

    engine: Engine
    sampler: Sampler
    scorer: Scorer | None = None  # None: the search scores nothing (greedy, rpc, ...)
    leaf_only: bool = True
    max_steps: int = 40

    def complete(self, problem: Problem, meter: Meter, node: Node) -> Node:
        """node extended greedily from the reserve; returns where it got to (node itself if
        nothing could be spent)."""
        budget = meter.reserve_budget()
        if budget is None:
            return node
        tip = node
        with submeter(meter, budget, self.engine, self.scorer) as sub:
            for _ in range(self.max_steps):
                if tip.finished or sub.exhausted():
                    break
                left = sub.tokens_left()
                cap = self.sampler.step_tokens if left is None else min(self.sampler.step_tokens,
                                                                          left)
                [[child]] = self.engine.expand([tip], 1, stop=self.sampler.stop, max_tokens=cap,
                                               temperature=0.0, top_p=1.0, seed=0)
                if child.generated_tokens <= tip.generated_tokens:
                    child.detach()  # no token added: greedy decoding would only repeat it
                    break
                tip = child
            if self.scorer is not None and tip is not node and meter.scoring_left():
                new = tip.path()[node.depth + 1:]
                score_nodes(self.scorer, problem, [tip] if self.leaf_only else new)
        return tip


@dataclass(frozen=True)
class Rescue:
    """A partial path finished (or at least extended) from the reserve: start -> tip."""

    start: Node
    tip: Node

    def stats(self) -> dict[str, Any]:
        """What Result.stats["reserve"] says about it."""
        return {"reserve": {"from_node": self.start.id, "node": self.tip.id,
                            "finished": self.tip.finished,
                            "tokens": self.tip.generated_tokens - self.start.generated_tokens}}

    def label(self, label: str, chosen: Candidate | None) -> str:
        """Result.selected_by: the selection's label, saying so when the tip was chosen."""
        if chosen is not None and chosen.node_id == self.tip.id:
            return label + ", after finishing the best partial path greedily from the reserve"
        return label


def rescue(problem: Problem, leaves: Sequence[Node], score: Callable[[Node], float],
           meter: Meter, finisher: Finisher, *, partial: Sequence[Node] | None = None
           ) -> tuple[list[Node], Rescue | None]:
    """If the budget stopped the search (meter.exhausted()) before any of `leaves` finished,
    finish the best partial one (highest `score`, the first of ties; only those in `partial`
    when given) from the reserve. Returns the leaves, that one replaced by where it got to,
    and the Rescue (None if nothing was done)."""
    out = list(leaves)
    pool = [leaf for leaf in (out if partial is None else partial)
            if leaf.step is not None and not leaf.finished]
    if not pool or any(leaf.finished for leaf in out) or not meter.exhausted():
        return out, None
    best = max(pool, key=score)
    tip = finisher.complete(problem, meter, best)
    if tip is best:
        return out, None
    return [tip if leaf is best else leaf for leaf in out], Rescue(best, tip)


def finish(problem: Problem, root: Node, leaves: Sequence[Node],
           score: Callable[[Node], float], meter: Meter, *, selection: Selection, seed: int,
           algo: str, knobs: Mapping[str, Any], stats: Mapping[str, Any] | None = None,
           finisher: Finisher | None = None, partial: Sequence[Node] | None = None) -> Result:
    """Candidates from the leaves (finished ones may answer; with a finisher, the best
    partial path, of `partial` if given, is first finished from the reserve if the budget
    stopped the search before any did), the selection, the Result (selected_by: the
    selection's label)."""
    saved = None
    if finisher is not None:
        leaves, saved = rescue(problem, leaves, score, meter, finisher, partial=partial)
    cands = candidates(problem, leaves, [score(leaf) for leaf in leaves])
    chosen = selection.choose(problem, cands)
    if saved is None:
        return pack(problem, root, cands, chosen, meter, seed=seed, algo=algo, knobs=knobs,
                    stats=stats, chosen_by=selection.label)
    return pack(problem, root, cands, chosen, meter, seed=seed, algo=algo, knobs=knobs,
                stats={**(stats or {}), **saved.stats()},
                chosen_by=saved.label(selection.label, chosen))

