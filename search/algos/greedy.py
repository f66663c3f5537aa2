"""Greedy decoding: the no-search baseline every sweep compares against.

One path, each step the model's most likely continuation (temperature 0), extended step by
step like every other search so its tokens, steps and tree are counted the same way.

    path <- root
    repeat: path <- argmax-decoded next step of path, until it finishes or the budget ends
    return path

It consults no scorer (there is nothing to choose between), so search.solve refuses one.
"""

from __future__ import annotations

import random

from search.algos._run import Finisher, finish
from search.algos._stepwise import GREEDY, Sampler, sample_paths
from search.budget import Meter
from search.engines.base import Engine
from search.knobs import rules
from search.scoring import Scorer
from search.select import Outcome, Selection, by_score
from search.types import Problem


# the knob rules every algorithm shares (search.knobs.COMMON); no scorer is consulted, and
# the seed cannot change the result (greedy decoding throughout)
@rules(scorer=False, deterministic=True)
def greedy(problem: Problem, engine: Engine, scorer: Scorer, meter: Meter, *, seed: int = 0,
           sampler: Sampler = GREEDY, max_depth: int = 40) -> Outcome:
    del scorer  # nothing to choose between: the one path is the answer
    root = engine.root(problem)
    done, live, _ = sample_paths(engine, root, 1, meter, sampler, random.Random(seed),
                                 max_depth=max_depth)
    return finish(problem, root, done + live, lambda leaf: leaf.cum_logprob, meter,
                  selection=Selection(by_score, "greedy (the one path)"),
                  finisher=Finisher(engine, sampler, max_steps=max_depth))
