"""Best-of-N with voting.

Sample N complete solutions independently (each decoded step by step, all N rows in one
batch), then select one: by outcome/process reward (path score = agg of step rewards),
by majority vote over final answers (self-consistency; Wang et al. 2023, "Self-Consistency
Improves Chain of Thought Reasoning in Language Models"), or by reward-weighted vote.

    paths <- N samples of root, extended one step at a time until each finishes
    score every path (agg over its steps' rewards, or its leaf for agg=last)
    return select(paths)

The selection follows the scorer unless `select` says otherwise. A researcher who names a
scorer (a verifier, unit tests, a PRM) for best-of-N means the textbook best-of-N: sample N,
keep the one the scorer ranks highest (Cobbe et al. 2021's verifiers; Lightman et al. 2023),
so select=None is "score" then; with no scorer named (search.solve's scorer=None, which
supplies the free log-probability scorer marked implicit) it is the plain majority vote,
which needs none. "weighted_vote" (each answer's votes weighed by score) is there to ask
for. An explicit select="vote" never consults the scorer, so search.solve refuses it beside
a named scorer rather than publish a vote labelled with that scorer (`uses_scorer`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from search.algos import Run
from search.algos._stepwise import SAMPLER, Sampler, sample_paths
from search.engines.base import Engine
from search.fit import Width
from search.knobs import at_least, rules
from search.scoring import Scorer, implicit
from search.select import DEFAULT, Selection
from search.session import Session
from search.types import Node, Outcome, Problem


def uses_scorer(knobs: Mapping[str, Any]) -> bool:
    """Whether a run with these knobs consults its scorer (a plain vote does not)."""
    return knobs.get("select") != "vote"


@rules(at_least(1, "n"),  # with the rules every algorithm shares (search.knobs.COMMON)
       width=Width(("n",)), scorer=uses_scorer)
def best_of_n(problem: Problem, engine: Engine, scorer: Scorer, session: Session, *, seed: int = 0,
              n: int = 8, select: str | None = None, agg: str | None = None,
              sampler: Sampler = SAMPLER, max_depth: int = 40) -> Outcome:
    """select: "score", "vote", "weighted_vote", or None: "vote" when no scorer was named,
    else search.select.DEFAULT, "score" (see the module doc). agg: None for the scorer's own (Scorer.path_agg)."""
    select = select or ("vote" if implicit(scorer) else DEFAULT)
    vote = select == "vote"  # counting answers needs no scorer; ties go to the likelier path
    run = Run.begin(problem, engine, scorer, session, seed=seed, sampler=sampler, agg=agg,
                    select=select, selection=Selection.of("vote", "", seed=seed) if vote else None)
    done, live, _ = sample_paths(run.engine, run.root, n, run.meter, sampler, run.rng,
                                 max_depth=max_depth)
    leaves = done + live
    resolved = dict(select=select, agg=run.agg)
    if vote:
        return run.finish(leaves, score=_cum_logprob, max_depth=max_depth, reserve_scores=None,
                          resolved=resolved)
    # rewards of every step, or of the leaf alone when only the last one counts
    last = run.agg == "last"
    run.score(leaves if last else [a for leaf in leaves for a in leaf.path()[1:]])
    return run.finish(leaves, max_depth=max_depth, reserve_scores="leaf" if last else "steps",
                      resolved=resolved)


def _cum_logprob(node: Node) -> float:
    return node.cum_logprob
