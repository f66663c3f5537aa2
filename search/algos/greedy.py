"""Greedy decoding: the no-search baseline every sweep compares against.

One path, each step the model's most likely continuation (temperature 0), extended step by
step like every other search so its tokens, steps and tree are counted the same way.

    path <- root
    repeat: path <- argmax-decoded next step of path, until it finishes or the budget ends
    return path
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from rewards.base import Scorer
from search.algos._stepwise import Sampler, sample_paths
from search.budget import Meter
from search.engines.base import DEFAULT_STOP, Engine
from search.knobs import rules
from search.select import by_score, candidates, pack
from search.types import Problem, Result

DETERMINISTIC = True  # the seed cannot change the result (greedy decoding throughout)


@rules()  # the knob rules every algorithm shares (search.knobs.COMMON)
def greedy(problem: Problem, engine: Engine, scorer: Scorer, meter: Meter, *, seed: int = 0,
           step_tokens: int = 256, max_steps: int = 40,
           stop: Sequence[str] | None = DEFAULT_STOP) -> Result:
    del scorer  # nothing to choose between: the one path is the answer
    root = engine.root(problem)
    sampler = Sampler(temperature=0.0, step_tokens=step_tokens, stop=stop)
    done, live, _ = sample_paths(engine, root, 1, meter, sampler, random.Random(seed),
                                 max_steps=max_steps)
    leaves = done + live
    cands = candidates(problem, leaves, [leaf.cum_logprob for leaf in leaves])
    return pack(problem, root, cands, by_score(problem, cands), meter, seed=seed, algo="greedy",
                knobs=dict(step_tokens=step_tokens, max_steps=max_steps))
