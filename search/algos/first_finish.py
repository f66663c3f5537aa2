"""First Finish Search (FFS), and FFS-k.

Agarwal et al. 2025, "First Finish Search: Efficient Test-Time Scaling in Large Language
Models": shorter reasoning traces are more often correct, so launch n samples in one batch and
return the first one to finish; the others are stopped and cost nothing more. FFS-k waits for
the first k finishers and takes a majority vote over their answers.

    paths <- n samples of root, advanced together in rounds of `chunk_tokens` tokens
    each round: bound <- tokens of the k-th shortest finished path (inf while fewer)
                stop every live path with >= bound tokens (it can no longer finish first)
    first <- the k finished paths with the fewest generated tokens (ties: launch order)
    return first[0] (k = 1) or majority_vote(first)

The paper's synchronous FFS decodes all rows in lockstep and stops at the first EOS token.
Here a round is one batched `expand` of at most `chunk_tokens` tokens per row (stop=None:
rows stay in lockstep) or of one reasoning step (stop=delimiters: rows drift apart); the
bound rule above keeps the answer exact either way (a live path with t tokens can only finish
with more than t), and caps each round at the bound, so at most one round is spent past the
finish. Fewer than k finishers (budget or max_tokens reached): the vote is over those.

Tokens saved against best-of-n: Result.stats records `stopped` (paths cut short) and
`stopped_tokens` (tokens they had used). With count_saved=True the stopped paths are then run
to the end outside the budget (on a scratch meter; their continuations are not kept in the
tree), and `saved_tokens` is what plain best-of-n on these same n samples would have spent
on top of FFS. This costs real compute: it is for research runs, not for answering.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import replace

from search.algos import Run
from search.algos._stepwise import Sampler
from search.budget import Meter
from search.engines.base import Engine
from search.fit import Width
from search.knobs import Rule, at_least, rules
from search.scoring import Scorer
from search.select import Selection, majority_vote
from search.session import Session, bind
from search.types import Candidate, Node, Outcome, Problem


def _kth_tokens(done: Sequence[Node], k: int) -> float:
    """Generated tokens of the k-th shortest finished path; inf while fewer than k finished."""
    if len(done) < k:
        return math.inf
    return sorted(p.generated_tokens for p in done)[k - 1]


def _race(engine: Engine, meter: Meter, rng: random.Random, frontier: list[Node], width: int,
          order: dict[int, int], k: int, chunks: Sampler, max_tokens: int
          ) -> tuple[list[Node], list[Node], list[Node]]:
    """Advance paths round by round until the first k finishers are certain.

    frontier: the root (width = n samples) or live paths (width = 1). order maps node id ->
    launch index and is filled in for every new node. chunks: the sampler of a round
    (step_tokens: chunk_tokens); max_tokens: a path's cap. Returns (finished, stopped, live),
    live being non-empty only when the budget ran out.
    """
    done: list[Node] = []
    stopped: list[Node] = []
    while frontier and not meter.exhausted():
        t0 = min(p.generated_tokens for p in frontier)
        cap = min(chunks.step_tokens, max_tokens - t0, _kth_tokens(done, k) - t0)  # >= 1
        kids = replace(chunks, step_tokens=int(cap)).expand(engine, frontier, width, rng)
        new, stalled = [], set()
        for parent, cs in zip(frontier, kids):
            for j, c in enumerate(cs):
                order[c.id] = order.get(parent.id, j)  # launch index, inherited
                new.append(c)
                if c.generated_tokens <= parent.generated_tokens:
                    stalled.add(c.id)  # no token added: it would never finish nor stop
        done += [c for c in new if c.finished]
        limit = min(_kth_tokens(done, k), max_tokens)
        live = [c for c in new if not c.finished]
        stopped += [c for c in live if c.generated_tokens >= limit or c.id in stalled]
        frontier, width = [c for c in live if c.generated_tokens < limit and
                           c.id not in stalled], 1
    return done, stopped, frontier


@rules(at_least(1, "n", "k"), Rule(("k", "n"), lambda k, n: k <= n, "k must be <= n"),
       depth_limit=False,
       width=Width(("n",), capped="k"), scorer=False)
def first_finish(problem: Problem, engine: Engine, scorer: Scorer, session: Session, *,
                 seed: int = 0, n: int = 8, k: int = 1, temperature: float = 0.8,
                 top_p: float = 1.0, chunk_tokens: int = 32, max_tokens: int = 2048,
                 stop: Sequence[str] | None = None, count_saved: bool = False) -> Outcome:
    # FFS selects by length (and, for k > 1, by vote), never by reward: no scorer is consulted
    chunks = Sampler(temperature, top_p, chunk_tokens, stop)  # one round: a chunk per path

    def first_k(problem: Problem, cands: Sequence[Candidate]) -> Candidate | None:
        # done comes first, in finishing order (a path finished from the reserve is alone)
        return majority_vote(problem, [c for c in cands if c.finished][:k])

    run = Run.begin(problem, engine, scorer, session, seed=seed, sampler=chunks,
                    selection=Selection.choosing(first_k, "first to finish" if k == 1 else
                                                 f"vote(first {k} to finish)"))
    order: dict[int, int] = {}
    done, stopped, live = _race(run.engine, run.meter, run.rng, [run.root], n, order, k, chunks,
                                max_tokens)
    done.sort(key=lambda p: (p.generated_tokens, order[p.id]))  # finishing order
    stopped_tokens = sum(p.generated_tokens for p in stopped)
    saved = _count_saved(run, stopped, order, chunks, max_tokens) if count_saved else None
    # shorter is better: ties in a vote go to the group that finished with fewer tokens
    return run.finish(done + stopped + live, score=lambda p: -float(p.generated_tokens),
                      max_depth=-(-max_tokens // chunk_tokens), reserve_scores=None,
                      partial=live, resolved=dict(stop=list(stop) if stop else None),
                      stats=dict(stopped=len(stopped), stopped_tokens=stopped_tokens,
                                 saved_tokens=saved))


def _count_saved(run: Run, stopped: list[Node], order: dict[int, int], chunks: Sampler,
                 max_tokens: int) -> int:
    """Run the stopped paths to the end on a scratch meter; the tokens that took. Their new
    nodes are detached afterwards, so the tree holds only what the budget paid for."""
    if not stopped:
        return 0
    scratch = run.session.charging(Meter())  # the same search, counted apart
    _race(bind(run.engine, scratch), scratch.meter, run.rng, list(stopped), 1, order,
          len(stopped), chunks, max_tokens)
    for node in stopped:
        for child in list(node.children):
            child.detach()
    return scratch.meter.generated_tokens
