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

import random
from collections.abc import Mapping
from typing import Any

from search.algos._run import Finisher, finish
from search.algos._stepwise import (
    SAMPLER,
    Sampler,
    path_scorer,
    resolve_agg,
    sample_paths,
    scored_by,
)
from search.budget import Meter
from search.engines.base import Engine
from search.fit import Width
from search.knobs import at_least, rules
from search.scoring import Scorer, implicit, score_nodes
from search.select import Outcome, Selection
from search.types import Node, Problem


def uses_scorer(knobs: Mapping[str, Any]) -> bool:
    """Whether a run with these knobs consults its scorer (a plain vote does not)."""
    return knobs.get("select") != "vote"


@rules(at_least(1, "n"),  # with the rules every algorithm shares (search.knobs.COMMON)
       width=Width(("n",)), scorer=uses_scorer)
def best_of_n(problem: Problem, engine: Engine, scorer: Scorer, meter: Meter, *, seed: int = 0,
              n: int = 8, select: str | None = None, agg: str | None = None,
              sampler: Sampler = SAMPLER, max_depth: int = 40) -> Outcome:
    """select: "score", "vote", "weighted_vote", or None: "vote" when no scorer was named,
    else "score" (see the module doc). agg: None for the scorer's own (Scorer.path_agg)."""
    select = select or ("vote" if implicit(scorer) else "score")
    agg = resolve_agg(agg, scorer)
    root = engine.root(problem)
    done, live, _ = sample_paths(engine, root, n, meter, sampler, random.Random(seed),
                                 max_depth=max_depth)
    resolved = dict(select=select, agg=agg)
    if select == "vote":  # counting answers needs no scorer; ties go to the likelier path
        return finish(problem, root, done + live, _cum_logprob, meter,
                      selection=Selection.of("vote", ""),
                      resolved=resolved, finisher=Finisher(engine, sampler, max_steps=max_depth))
    # rewards of every step, or of the leaf alone when only the last one counts
    leaves = done + live
    score_nodes(scorer, problem, leaves if agg == "last"
                else [a for leaf in leaves for a in leaf.path()[1:]], meter=meter)
    return finish(problem, root, leaves, path_scorer(agg), meter,
                  selection=Selection.of(select, scored_by(scorer, agg)), resolved=resolved,
                  finisher=Finisher(engine, sampler, scorer, leaf_only=agg == "last",
                                    max_steps=max_depth))


def _cum_logprob(node: Node) -> float:
    return node.cum_logprob
