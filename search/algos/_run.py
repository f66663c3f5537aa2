"""How a search ends, and the set-up every scored step-level search begins with.

Every algorithm ends through `finish`: candidates from its leaves (the best partial path first
finished from the budget's reserve when the budget stopped the search before any finished),
the selection, the Outcome (search.select: what the search found). A search that delegates
(compute_optimal) ends through `finish_delegated`: what its sub-search found, with its own
stats and selection. The Result is built from the Outcome once, by the call that knows every
knob's actual value, the algorithm's name and seed, and its meter's usage (search.knobs.run);
a search hands `finish` only the knobs it resolved itself (agg=None becomes the scorer's
own, ...).

`Run` is what the scored step-level searches (beam, dvts, diverse beam, MCTS, A*, the particle
methods) share: the sampler and its random stream, the root, the path-score aggregation and
the selection, and `Run.finish`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from search import aggregate
from search.algos._stepwise import Sampler, Stepper, path_score, resolve_agg, roll, scored_by
from search.budget import Meter, submeter
from search.engines.base import Engine
from search.scoring import Scorer, score_nodes
from search.select import Outcome, Ranking, Selection, candidates, pack
from search.session import charging
from search.types import Candidate, Node, Problem, Result


# -- finishing from the reserve -------------------------------------------------------------
@dataclass(frozen=True)
class Finisher:
    """How a search finishes its best partial path from the budget's reserve (Budget.reserve)
    when the budget stopped it before any path finished.

    complete(node): greedy steps (temperature 0, the sampler's stop and step size, each step
    capped at the reserve's tokens left; `roll` with one tip) until the path finishes, a step
    adds no token, max_steps more steps, or the reserve is spent; then its new nodes are
    scored (every new step, or only the leaf when leaf_only: an outcome scorer or agg
    "last"), while scorer calls are left. Runs on a sub-meter (search.budget.submeter) that
    the engine's and scorer's views charge (search.session.charging), so every token is
    charged to the run's meter.
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
        stalled: list[Node] = []
        with submeter(meter, budget) as sub:
            engine = charging(self.engine, sub)
            [tip], _ = roll([node], self.greedy_step(engine, sub, stalled), sub,
                            steps=self.max_steps,
                            goes_on=lambda tip: not tip.finished and not stalled)
            if self.scorer is not None and tip is not node and meter.scoring_left():
                new = tip.path()[node.depth + 1:]
                score_nodes(charging(self.scorer, sub), problem,
                            [tip] if self.leaf_only else new, meter=sub)
        return tip

    def greedy_step(self, engine: Engine, meter: Meter, stalled: list[Node]) -> Stepper:
        """`roll`'s step for complete: the one tip's greedy next step, capped at meter's tokens
        left. A step that adds no token is detached (greedy decoding would only repeat it):
        the tip stays where it was and is appended to `stalled`."""

        def step(tips: Sequence[Node]) -> list[Node]:
            [tip] = tips
            left = meter.tokens_left()
            cap = self.sampler.step_tokens if left is None else min(self.sampler.step_tokens,
                                                                      left)
            [[child]] = engine.expand([tip], 1, stop=self.sampler.stop, max_tokens=cap,
                                      temperature=0.0, top_p=1.0, seed=0)
            if child.generated_tokens <= tip.generated_tokens:
                child.detach()
                stalled.append(tip)
                return [tip]
            return [child]

        return step


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
           score: Callable[[Node], float], meter: Meter, *, selection: Selection | Ranking,
           resolved: Mapping[str, Any] | None = None, stats: Mapping[str, Any] | None = None,
           finisher: Finisher | None = None, partial: Sequence[Node] | None = None) -> Outcome:
    """Candidates from the leaves (finished ones may answer; with a finisher, the best
    partial path, of `partial` if given, is first finished from the reserve if the budget
    stopped the search before any did), the selection (or a search's own Ranking, whose
    stats come first), the Outcome (selected_by: the selection's label). resolved: the knobs
    the search resolved itself, for Result.knobs (search.knobs.run adds the others)."""
    saved = None
    if finisher is not None:
        leaves, saved = rescue(problem, leaves, score, meter, finisher, partial=partial)
    cands = candidates(problem, leaves, [score(leaf) for leaf in leaves])
    found: Mapping[str, Any] = {}
    if isinstance(selection, Ranking):
        cands, chosen, found = selection.rank(problem, leaves, cands)
    else:
        chosen = selection.choose(problem, cands)
    stats = {**found, **(stats or {}), **(saved.stats() if saved else {})}
    return pack(problem, root, cands, chosen, meter, resolved=resolved, stats=stats,
                chosen_by=saved.label(selection.label, chosen) if saved else selection.label)


def finish_delegated(result: Result, *, resolved: Mapping[str, Any], stats: Mapping[str, Any],
                     selected_by: str) -> Outcome:
    """`finish` for a search that hands the problem to other searches and keeps what one of
    them found (compute_optimal: its probe, or the search its table chose). That Result came
    through `finish`: its answer, text, score, candidates, tree and status stand (the status
    as the sub-search's own meter saw it). This search's own Result (built by the call:
    its algo, seed, knobs, and the usage of its whole meter, to which every sub-search was
    charged) says its own stats and selected_by; resolved: the knobs it resolved itself."""
    cut = {k: result.stats[k] for k in ("cut_by", "cut_in_flight", "best_partial")
           if k in result.stats}
    return Outcome(answer=result.answer, text=result.text, score=result.score,
                   candidates=result.candidates, tree=result.tree, status=result.status,
                   stats={**dict(stats), **cut}, selected_by=selected_by,
                   resolved=dict(resolved))


@dataclass(frozen=True)
class Run:
    """One run of a scored step-level search: what it was given, its sampler and random
    stream (seeded once, by the call's seed), the tree's root, the aggregation `agg` of step
    rewards into path scores (the caller's, else the scorer's own) and the selection."""

    problem: Problem
    engine: Engine
    scorer: Scorer
    meter: Meter
    sampler: Sampler
    rng: random.Random
    root: Node
    agg: str
    selection: Selection

    @classmethod
    def begin(cls, problem: Problem, engine: Engine, scorer: Scorer, meter: Meter, *,
              seed: int, sampler: Sampler, agg: str | None, select: str,
              scored_as: str | None = None) -> Run:
        """The run's set-up; scored_as: what candidate scores are when they are not agg of
        step rewards (A*'s "-f"), for Result.selected_by."""
        agg = resolve_agg(agg, scorer)
        selection = Selection.of(select, scored_by(scorer, scored_as or agg))
        return cls(problem, engine, scorer, meter, sampler, random.Random(seed),
                   engine.root(problem), agg, selection)

    def expand(self, nodes: Sequence[Node], n: int) -> list[list[Node]]:
        """n sampled next steps of every node (one engine batch)."""
        return self.sampler.expand(self.engine, nodes, n, self.rng)

    def score(self, nodes: Sequence[Node]) -> list[float]:
        """The scorer's rewards of the nodes (stored on them; scored once)."""
        return score_nodes(self.scorer, self.problem, nodes, meter=self.meter)

    def path_score(self, node: Node) -> float:
        """agg of the step rewards along node's path."""
        return path_score(node, aggregate.get(self.agg))

    def finish(self, leaves: Sequence[Node], *, max_depth: int,
               score: Callable[[Node], float] | None = None,
               stats: Mapping[str, Any] | None = None) -> Outcome:
        """`finish` with the run's selection, path scores (unless `score`) and a finisher
        that scores every step it adds, up to max_depth of them."""
        return finish(self.problem, self.root, leaves, score or self.path_score, self.meter,
                      selection=self.selection, resolved=dict(agg=self.agg), stats=stats,
                      finisher=Finisher(self.engine, self.sampler, self.scorer, leaf_only=False,
                                        max_steps=max_depth))

