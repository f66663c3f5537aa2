"""The search algorithms (one file each, search/algos/NAME.py holding `def NAME`; files
starting with "_" hold what several share), and how every one of them begins and ends.

A search begins with a `Run` (Run.begin: what it was given, its step sampler, its random
stream seeded once by the call's seed, the tree's root, the aggregation of step rewards into
path scores and the `Selection` that chooses the answer) and ends with `run.finish(leaves)`:

    if the budget stopped the search before any leaf finished: finish the best partial leaf
        greedily from the budget's reserve (Budget.reserve)
    candidates <- one per leaf, scored by the path score
    chosen <- the Selection's choice among them
    return the Outcome: the chosen answer, the candidates, the tree, the status and why

The Outcome (search.types) is what the search found; the call that knows every knob's actual
value, the algorithm's name and seed and the meter's usage makes the Result of it, once
(search.knobs.run). A search that hands the problem to other searches (compute_optimal) ends
with `Outcome.of(their Result)`: what their finish found, with its own stats.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from search import aggregate
from search.algos._stepwise import SAMPLER, Sampler, path_score, resolve_agg, roll, scored_by
from search.budget import Meter
from search.engines.base import Engine
from search.scoring import Scorer, score_nodes
from search.select import DEFAULT, Selection, best_partial, candidates, tie_break
from search.session import Session, bind
from search.types import Candidate, Node, Outcome, Problem


@dataclass(frozen=True)
class Run:
    """One run of a search: what it was given (the engine and scorer as its session's views,
    so every cost reaches the session's meter), its sampler and random stream (seeded once,
    by the call's seed), the tree's root, the aggregation `agg` of step rewards into path
    scores (the caller's, else the scorer's own) and the selection of the answer."""

    problem: Problem
    engine: Engine
    scorer: Scorer
    session: Session
    sampler: Sampler
    rng: random.Random
    root: Node
    agg: str
    selection: Selection

    @classmethod
    def begin(cls, problem: Problem, engine: Engine, scorer: Scorer, session: Session, *,
              seed: int, sampler: Sampler = SAMPLER, agg: str | None = None, select: str = DEFAULT,
              scored_as: str | None = None, selection: Selection | None = None) -> Run:
        """The run's set-up. The answer is chosen by the rule `select` over path scores
        (scored_as: what candidate scores are when they are not agg of step rewards, A*'s
        "-f", for Result.selected_by), or by `selection` where the search chooses its own way."""
        agg = resolve_agg(agg, scorer)
        if selection is None:
            selection = Selection.of(select, scored_by(scorer, scored_as or agg), seed=seed)
        engine, scorer = bind(engine, session), bind(scorer, session)
        return cls(problem, engine, scorer, session, sampler, random.Random(seed),
                   engine.root(problem), agg, selection)

    @property
    def meter(self) -> Meter:
        """What the search has spent, and its budget: its session's meter."""
        return self.session.meter

    def expand(self, nodes: Sequence[Node], n: int) -> list[list[Node]]:
        """n sampled next steps of every node (one engine batch)."""
        return self.sampler.expand(self.engine, nodes, n, self.rng)

    def score(self, nodes: Sequence[Node]) -> list[float]:
        """The scorer's rewards of the nodes (stored on them; scored once)."""
        return score_nodes(self.scorer, self.problem, nodes, meter=self.meter)

    def path_score(self, node: Node) -> float:
        """agg of the step rewards along node's path."""
        return path_score(node, aggregate.get(self.agg))

    def finish(self, leaves: Sequence[Node], *, max_depth: int = 40,
               score: Callable[[Node], float] | None = None, reserve_scores: str | None = "steps",
               reserve_sampler: Sampler | None = None, partial: Sequence[Node] | None = None,
               stats: Mapping[str, Any] | None = None,
               resolved: Mapping[str, Any] | None = None) -> Outcome:
        """How every search ends (see the module doc): candidates from the leaves (finished
        ones may answer), scored by `score` (default: the path score), the selection's choice,
        the Outcome.

        If the budget stopped the search (meter.exhausted()) before any leaf finished, its
        best partial leaf (highest score, of ties the first by text; of `partial` when given) is
        first finished greedily from the reserve: greedy steps (temperature 0, the stop and
        step size of `reserve_sampler`, default the run's sampler, each step capped at the
        reserve's tokens left) until the path finishes, a step adds no token, max_depth more
        steps, or the reserve is spent; then its new nodes are scored while scorer calls are
        left (reserve_scores: "steps" every new step, "leaf" its leaf alone, None nothing).
        stats: the search's own, for Result.stats; resolved: the knobs it resolved itself,
        for Result.knobs (default: agg, None as the scorer's own; search.knobs.run records
        the others as given)."""
        score = score or self.path_score
        rescue = None
        pool = [leaf for leaf in (leaves if partial is None else partial)
                if leaf.step is not None and not leaf.finished]
        if pool and not any(leaf.finished for leaf in leaves) and self.meter.exhausted():
            top = max(map(score, pool))  # of equal scores, the first by text
            best = tie_break([leaf for leaf in pool if score(leaf) == top], lambda n: n.text,
                             None)
            tip = self._complete(best, reserve_sampler or self.sampler, max_depth,
                                 reserve_scores)
            if tip is not best:
                leaves = [tip if leaf is best else leaf for leaf in leaves]
                rescue = _Rescue(best, tip)
        cands = candidates(self.problem, leaves, [score(leaf) for leaf in leaves])
        cands, chosen, found = self.selection.rank(self.problem, leaves, cands)
        label = self.selection.label
        if rescue is not None and chosen is not None and chosen.node_id == rescue.tip.id:
            label += ", after finishing the best partial path greedily from the reserve"
        return _outcome(self.root, cands, chosen, self.meter, selected_by=label,
                        stats={**found, **(stats or {}), **(rescue.stats() if rescue else {})},
                        resolved=dict(agg=self.agg) if resolved is None else resolved)

    # -- finishing from the reserve -------------------------------------------------------
    def _complete(self, node: Node, sampler: Sampler, max_depth: int,
                  scores: str | None) -> Node:
        """node extended greedily from the reserve (Run.finish); returns where it got to
        (node itself if nothing could be spent). Runs within the reserve's budget
        (Session.within: the engine's and scorer's views charge a sub-meter), so every token
        is charged to the run's meter."""
        budget = self.meter.reserve_budget()
        if budget is None:
            return node
        stalled: list[Node] = []
        with self.session.within(budget) as sub:
            step = _greedy_step(bind(self.engine, sub), sampler, sub.meter, stalled)
            [tip], _ = roll([node], step, sub.meter, steps=max_depth,
                            goes_on=lambda tip: not tip.finished and not stalled)
            if scores is not None and tip is not node and self.meter.scoring_left():
                new = tip.path()[node.depth + 1:]
                score_nodes(bind(self.scorer, sub), self.problem,
                            [tip] if scores == "leaf" else new, meter=sub.meter)
        return tip


def _greedy_step(engine: Engine, sampler: Sampler, meter: Meter,
                 stalled: list[Node]) -> Callable[[Sequence[Node]], list[Node]]:
    """`roll`'s step for Run._complete: the one tip's greedy next step, capped at meter's
    tokens left. A step that adds no token is detached (greedy decoding would only repeat
    it): the tip stays where it was and is appended to `stalled`."""

    def step(tips: Sequence[Node]) -> list[Node]:
        [tip] = tips
        left = meter.tokens_left()
        cap = sampler.step_tokens if left is None else min(sampler.step_tokens, left)
        [[child]] = engine.expand([tip], 1, stop=sampler.stop, max_tokens=cap,
                                  temperature=0.0, top_p=1.0, seed=0)
        if child.generated_tokens <= tip.generated_tokens:
            child.detach()
            stalled.append(tip)
            return [tip]
        return [child]

    return step


@dataclass(frozen=True)
class _Rescue:
    """A partial path finished (or at least extended) from the reserve: start -> tip."""

    start: Node
    tip: Node

    def stats(self) -> dict[str, Any]:
        """What Result.stats["reserve"] says about it."""
        return {"reserve": {"from_node": self.start.id, "node": self.tip.id,
                            "finished": self.tip.finished,
                            "tokens": self.tip.generated_tokens - self.start.generated_tokens}}


def _outcome(root: Node, cands: Sequence[Candidate], chosen: Candidate | None, meter: Meter,
             *, selected_by: str, stats: Mapping[str, Any],
             resolved: Mapping[str, Any]) -> Outcome:
    """The Outcome; says why when there is no answer (nothing is made up), and which limit
    cut the search short or stopped it (stats["cut_by"], on every "budget_exhausted";
    stats["cut_in_flight"] when it cut a batch or scorer call short, not between them), and
    with no answer, its best partial candidate (stats["best_partial"]: its node id)."""
    if meter.cut == "interrupted":  # stopped from outside (Ctrl-C): the best so far
        status = "interrupted"
    elif meter.cut is not None:  # a limit cut work short: the answer is the best so far
        status = "budget_exhausted"
    elif chosen is not None:
        status = "ok"
    elif any(c.finished for c in cands):
        status = "no_answer"
    else:
        status = "budget_exhausted" if meter.exhausted() else "unfinished"
    stats = dict(stats)
    if status in ("budget_exhausted", "interrupted"):
        stats["cut_by"] = meter.stopped_by()
        if meter.cut is not None:  # the limit cut work in flight (else: stopped between)
            stats["cut_in_flight"] = True
        partial = best_partial(cands) if chosen is None else None
        if partial is not None:  # no answer is made up; the candidate says how far it got
            stats["best_partial"] = partial.node_id
    return Outcome(answer=chosen.answer if chosen else None, text=chosen.text if chosen else "",
                   score=chosen.score if chosen else -math.inf, candidates=tuple(cands),
                   tree=root, status=status, stats=stats, selected_by=selected_by,
                   resolved=dict(resolved))
