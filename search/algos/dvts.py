"""Diverse verifier tree search (DVTS).

Beeching, Tunstall & Rush 2024, "Scaling test-time compute with open models" (Hugging Face
blog and search-and-learn): split a budget of N rollouts into N/M independent subtrees. Each
subtree is a beam of width one: it samples M next steps from its current node and the PRM
picks the best of them, so no subtree can crowd out another (plain beam search lets one
strong prefix take every beam).

    heads <- N/M copies of the root (one per subtree)
    repeat until every subtree finished, depth limit, or budget:
        children <- M sampled next steps of every live head (one engine batch)
        score the children with the PRM; every finished child is a candidate
        head_i <- argmax_{c in children of head_i} agg(step rewards of c)
        a subtree whose best child is finished stops
    return select(candidates)   (best score by default)

Every node a subtree generates records its index (DvtsMark.subtree). duplicates="merge"
(as in `beam`) scores one of a head's equal children, which counts as the samples it stands
for in a vote; "keep" scores each.
"""

from __future__ import annotations

from dataclasses import dataclass

from search.algos import Run
from search.algos._stepwise import DUPLICATES, SAMPLER, Sampler, merge_equal, with_copies
from search.engines.base import Engine
from search.fit import Width
from search.knobs import at_least, divides, one_of, rules
from search.marks import Mark
from search.scoring import Scorer
from search.select import DEFAULT
from search.session import Session
from search.types import Node, Outcome, Problem


@dataclass(slots=True)
class DvtsMark(Mark):
    """DVTS's value of a node (None until written)."""

    key = "dvts"
    subtree: int | None = None  # the index of the subtree that generated the node


@rules(at_least(1, "n", "m"), divides("m", "n"), one_of("duplicates", DUPLICATES),
       scores_as_it_goes=True,
       width=Width(("n",), multiple_of="m", companions=("m",)))
def dvts(problem: Problem, engine: Engine, scorer: Scorer, session: Session, *, seed: int = 0,
         n: int = 16, m: int = 4, max_depth: int = 40, agg: str | None = None,
         select: str = DEFAULT, duplicates: str = "merge",
         sampler: Sampler = SAMPLER) -> Outcome:
    run = Run.begin(problem, engine, scorer, session, seed=seed, agg=agg, select=select,
                    sampler=sampler)
    heads: list[Node | None] = [run.root] * (n // m)  # None once a subtree has finished
    done: list[Node] = []
    for _ in range(max_depth):
        live = [(i, head) for i, head in enumerate(heads) if head is not None]
        if not live or run.meter.exhausted():
            break
        kids = [merge_equal(cs, duplicates) for cs in run.expand([h for _, h in live], m)]
        run.score([c for cs in kids for c in cs])
        for (i, _), children in zip(live, kids):
            for child in children:
                child.scores.of(DvtsMark).subtree = i
            done += [c for c in children if c.finished]
            # max keeps the first of equal scores: ties go to the earlier sample
            best = max(children, key=run.path_score)
            heads[i] = None if best.finished else best
    leaves = with_copies(done) + [h for h in heads if h is not None and h is not run.root]
    return run.finish(leaves, max_depth=max_depth)
