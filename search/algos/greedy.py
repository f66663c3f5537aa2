"""Greedy decoding: the no-search baseline every sweep compares against.

One path, each step the model's most likely continuation (temperature 0), extended step by
step like every other search so its tokens, steps and tree are counted the same way.

    path <- root
    repeat: path <- argmax-decoded next step of path, until it finishes or the budget ends
    return path

It consults no scorer (there is nothing to choose between), so search.solve refuses one.
"""

from __future__ import annotations

from search.algos import Run
from search.algos._stepwise import GREEDY, Sampler, sample_paths
from search.engines.base import Engine
from search.knobs import rules
from search.scoring import Scorer
from search.select import Selection, by_score
from search.session import Session
from search.types import Outcome, Problem


# the knob rules every algorithm shares (search.knobs.COMMON); no scorer is consulted, and
# the seed cannot change the result (greedy decoding throughout)
@rules(scorer=False, deterministic=True)
def greedy(problem: Problem, engine: Engine, scorer: Scorer, session: Session, *, seed: int = 0,
           sampler: Sampler = GREEDY, max_depth: int = 40) -> Outcome:
    # nothing to choose between: the one path is the answer; the scorer is never consulted
    run = Run.begin(problem, engine, scorer, session, seed=seed, sampler=sampler,
                    selection=Selection.choosing(by_score, "greedy (the one path)"))
    done, live, _ = sample_paths(run.engine, run.root, 1, run.meter, sampler, run.rng,
                                 max_depth=max_depth)
    return run.finish(done + live, score=lambda leaf: leaf.cum_logprob, max_depth=max_depth,
                      reserve_scores=None)
