"""Best-of-N with voting.

Sample N complete solutions independently (each decoded step by step, all N rows in one
batch), then select one: by outcome/process reward (path score = agg of step rewards),
by majority vote over final answers (self-consistency; Wang et al. 2023, "Self-Consistency
Improves Chain of Thought Reasoning in Language Models"), or by reward-weighted vote.

    paths <- N samples of root, extended one step at a time until each finishes
    score every path (agg over its steps' rewards, or its leaf for agg=last)
    return select(paths)
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from rewards import aggregate, score_nodes
from rewards.base import Scorer
from search.algos._stepwise import Sampler, sample_paths
from search.budget import Meter
from search.engines.base import DEFAULT_STOP, Engine
from search.knobs import rules
from search.select import candidates, pack, rule
from search.types import Problem, Result


@rules()  # the knob rules every algorithm shares (search.knobs.COMMON)
def best_of_n(problem: Problem, engine: Engine, scorer: Scorer, meter: Meter, *, seed: int = 0,
              n: int = 8, select: str = "vote", agg: str = "last", temperature: float = 0.8,
              top_p: float = 1.0, step_tokens: int = 256, max_steps: int = 40,
              stop: Sequence[str] | None = DEFAULT_STOP) -> Result:
    choose, agg_fn = rule(select), aggregate.get(agg)
    sampler = Sampler(temperature, top_p, step_tokens, stop)
    root = engine.root(problem)
    done, live, _ = sample_paths(engine, root, n, meter, sampler, random.Random(seed),
                                 max_steps=max_steps)
    leaves = done + live
    if select == "vote":  # counting answers needs no scorer; ties go to the likelier path
        scores = [leaf.cum_logprob for leaf in leaves]
    else:  # rewards of every step, or of the leaf alone when only the last one counts
        score_nodes(scorer, problem, leaves if agg == "last"
                    else [a for leaf in leaves for a in leaf.path()[1:]])
        scores = [agg_fn(leaf.step_scores("reward")) for leaf in leaves]
    cands = candidates(problem, leaves, scores)
    return pack(problem, root, cands, choose(problem, cands), meter, seed=seed,
                algo="best_of_n", knobs=dict(n=n, select=select, agg=agg,
                                             temperature=temperature, top_p=top_p))
