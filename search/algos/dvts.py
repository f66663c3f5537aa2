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

Every node a subtree generates records scores["subtree"] = its index. duplicates="merge"
(as in `beam`) scores one of a head's equal children, which counts as the samples it stands
for in a vote; "keep" scores each.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from search.algos._stepwise import (
    DUPLICATES,
    Finisher,
    Sampler,
    finish,
    merge_equal,
    path_scorer,
    resolve_agg,
    scored_by,
    with_copies,
)
from search.budget import Meter
from search.engines.base import DEFAULT_STOP, Engine
from search.knobs import at_least, divides, one_of, rules
from search.scoring import Scorer, score_nodes
from search.select import Selection
from search.types import Node, Problem, Result


@rules(at_least(1, "n", "m"), divides("m", "n"), one_of("duplicates", DUPLICATES))
def dvts(problem: Problem, engine: Engine, scorer: Scorer, meter: Meter, *, seed: int = 0,
         n: int = 16, m: int = 4, max_depth: int = 40, agg: str | None = None,
         select: str = "score", duplicates: str = "merge",
         temperature: float = 0.8, top_p: float = 1.0, step_tokens: int = 256,
         stop: Sequence[str] | None = DEFAULT_STOP) -> Result:
    agg = resolve_agg(agg, scorer)
    selection, score = Selection.of(select, scored_by(scorer, agg)), path_scorer(agg)
    sampler = Sampler(temperature, top_p, step_tokens, stop)
    rng = random.Random(seed)
    root = engine.root(problem)
    heads: list[Node | None] = [root] * (n // m)  # None once a subtree has finished
    done: list[Node] = []
    for _ in range(max_depth):
        live = [(i, head) for i, head in enumerate(heads) if head is not None]
        if not live or meter.exhausted():
            break
        kids = [merge_equal(cs, duplicates)
                for cs in sampler.expand(engine, [head for _, head in live], m, rng)]
        score_nodes(scorer, problem, [c for cs in kids for c in cs])
        for (i, _), children in zip(live, kids):
            for child in children:
                child.scores["subtree"] = float(i)
            done += [c for c in children if c.finished]
            # max keeps the first of equal scores: ties go to the earlier sample
            best = max(children, key=score)
            heads[i] = None if best.finished else best
        engine.retain([head for head in heads if head is not None])
    leaves = with_copies(done) + [head for head in heads if head is not None and head is not root]
    return finish(problem, root, leaves, score, meter, selection=selection, seed=seed,
                  algo="dvts",
                  knobs=dict(n=n, m=m, max_depth=max_depth, agg=agg, select=select,
                             duplicates=duplicates, **sampler.knobs()),
                  finisher=Finisher(engine, sampler, scorer, leaf_only=False,
                                    max_steps=max_depth))
