"""Step-level beam search guided by a process reward model.

As in Snell et al. 2024 ("Scaling LLM Test-Time Compute Optimally can be More Effective
than Scaling Model Parameters") and HF search-and-learn: N candidates at the first step;
afterwards keep the N/M best unfinished paths (by aggregated step reward) and expand each
with M sampled next steps, so N new steps are scored at every depth.

    beams <- N samples of the first step from the root
    repeat until N paths finished, depth limit, or budget:
        score new steps with the PRM; move finished paths to `done`
        beams <- top N/M unfinished paths by agg(step rewards)
        beams <- M sampled next steps of each beam
    return select(done)   (best score by default)
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from rewards import aggregate, score_nodes
from rewards.base import Scorer
from search.budget import Meter
from search.engines.base import DEFAULT_STOP, Engine
from search.select import candidates, pack, rule
from search.types import Node, Problem, Result


def beam(problem: Problem, engine: Engine, scorer: Scorer, meter: Meter, *, seed: int = 0,
         n: int = 16, m: int = 4, max_depth: int = 40, agg: str = "last", select: str = "score",
         temperature: float = 0.8, top_p: float = 1.0, step_tokens: int = 256,
         stop: Sequence[str] = DEFAULT_STOP) -> Result:
    if n < 1 or m < 1 or n % m:
        raise ValueError(f"beam needs positive n and m with m dividing n, got n={n}, m={m}")
    choose, agg_fn = rule(select), aggregate.get(agg)
    rng = random.Random(seed)
    keep = n // m
    root = engine.root(problem)
    beams, width = [root], n
    done: list[Node] = []
    for _ in range(max_depth):
        if not beams or len(done) >= n or meter.exhausted():
            break
        kids = [c for cs in engine.expand(beams, width, stop=stop, max_tokens=step_tokens,
                                          temperature=temperature, top_p=top_p,
                                          seed=rng.getrandbits(32)) for c in cs]
        score_nodes(scorer, problem, kids)
        done += [c for c in kids if c.finished]
        alive = [c for c in kids if not c.finished]
        # sorted() is stable: equal scores keep generation order, so runs are reproducible
        alive = sorted(alive, key=lambda c: agg_fn(c.step_scores("reward")), reverse=True)
        beams, width = alive[:keep], m
        engine.retain(beams)
    # unfinished beams are reported but never answer; the root alone (no step) is not a path
    leaves = done or [b for b in beams if b is not root]
    scores = [agg_fn(leaf.step_scores("reward")) for leaf in leaves]
    cands = candidates(problem, leaves, scores)
    return pack(problem, root, cands, choose(problem, cands), meter, seed=seed, algo="beam",
                knobs=dict(n=n, m=m, agg=agg, select=select, temperature=temperature,
                           top_p=top_p))
