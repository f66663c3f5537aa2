"""Reasoning-Pruning Perplexity Consistency (RPC).

Zhou et al. 2025, "Bridging Internal Probability and Self-Consistency for Effective and
Efficient LLM Reasoning": self-consistency counts answers, perplexity trusts the model's
probabilities; RPC sums the probabilities of the distinct sampled paths that reach each
answer (Perplexity Consistency) after dropping the paths that a two-component Weibull
mixture places in its low-probability component (Reasoning Pruning).

    paths <- n samples of root, one step per live path per round (all rows in one batch)
        live=True: after each round from `live_after` on, fit the mixture to the running
        probabilities of the current batch and stop the live paths in its low component
    p(path) <- exp(mean token logprob)                        (length-normalised, see below)
    pruned <- posterior_low(p) > 1/2 and p < mean(p)           (mixture fitted to all finished p)
    PC(answer) <- sum of p over distinct kept paths with that answer, normalised to sum 1
    return the answer with the largest PC (its likeliest path's text)

Choices where the paper leaves them open (see also search/weibull.py):
  - p is the geometric-mean token probability exp(cum_logprob / tokens), as the authors'
    code feeds exp(mean logprob) to the fit: raw path probabilities of long solutions are
    ~0 and would compare lengths rather than confidence;
  - "distinct" paths are distinct token sequences (the paper sums over unique paths);
  - temperature defaults to 1: Step.logprobs are temperature-1 model probabilities, so the
    samples come from the distribution whose probabilities are being summed;
  - fewer than 4 distinct probabilities: no fit, nothing pruned; ties between answers go to
    the one with the likelier path, then to the one sampled first;
  - live pruning fits on the current batch (live paths' running probabilities and finished
    paths' final ones) and only ever stops live paths; stopped paths never answer;
  - the mixture fit (knobs fit_bounds, fit_starts; search/weibull.py): our bounds
    (shapes capped at 100) and 2 starts by default, or the authors' bounds (shapes and
    scales unbounded above) and up to 12 starts (the authors start once).
The scorer is not used: RPC relies only on the model's own probabilities (search.solve
refuses a named one). If the budget stops the sampling before any path finishes, the likeliest
live path is finished greedily from the budget's reserve (Budget.reserve).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from search.algos import Run
from search.algos._stepwise import Sampler, sample_paths
from search.answers import vote_key
from search.engines.base import Engine
from search.fit import Width
from search.knobs import at_least, one_of, rules, within
from search.marks import Mark
from search.scoring import Scorer
from search.select import Selection
from search.session import Session
from search.types import Candidate, Node, Outcome, Problem
from search.weibull import BOUNDS, MAX_STARTS, prune_low


@dataclass(slots=True)
class RpcMark(Mark):
    """RPC's values of a path's node (None, False until written)."""

    key = "rpc"
    rpc_p: float | None = None  # length-normalised path probability
    rpc_low: float | None = None  # posterior of the mixture's low component
    rpc_pruned: bool = False  # pruned (offline, or stopped live)


SAMPLER_T1 = Sampler(temperature=1.0)  # the model's own distribution (module doc)


def path_prob(node: Node) -> float:
    """Length-normalised path probability: the geometric mean of its token probabilities."""
    return math.exp(node.cum_logprob / max(1, node.generated_tokens))


def _mark_low(nodes: Sequence[Node], fit: Mapping[str, Any]) -> list[bool]:
    """Fit the mixture (prune_low's keywords `fit`) to the nodes' path probabilities; True
    where RPC would prune. Writes the nodes' RpcMark.rpc_p and, when fitted, rpc_low
    (posterior of the low part)."""
    probs = [path_prob(n) for n in nodes]
    mask, mix = prune_low(probs, **fit)
    post = mix.posterior_low(probs) if mix is not None else None
    for i, node in enumerate(nodes):
        mark = node.scores.of(RpcMark)
        mark.rpc_p = probs[i]
        if post is not None:
            mark.rpc_low = float(post[i])
    return [bool(m) for m in mask]


def perplexity_consistency(problem: Problem, paths: Sequence[Node], answers: Sequence[str | None],
                           ) -> dict[str, float]:
    """Normalised PC score per vote key: summed probabilities of distinct paths per answer.
    Paths without an answer take part in the normalisation but in no answer's score."""
    seen: set[tuple[int, ...]] = set()
    total: dict[str, float] = {}
    mass = 0.0
    for node, answer in zip(paths, answers):
        ids = tuple(node.token_ids())
        if ids in seen:
            continue
        seen.add(ids)
        p = path_prob(node)
        mass += p
        if answer is not None:
            key = vote_key(problem, answer)
            total[key] = total.get(key, 0.0) + p
    return {k: v / mass for k, v in total.items()} if mass > 0 else total


def rank(problem: Problem, leaves: Sequence[Node], cands: Sequence[Candidate],
         mark: Callable[[Sequence[Node]], list[bool]]
         ) -> tuple[list[Candidate], Candidate | None, dict[str, int]]:
    """RPC's choice over the finished leaves (their candidates `cands`, scored by path_prob):
    offline pruning (mark(done): True where a path goes; RPC's is _mark_low with its fit),
    then perplexity consistency over the kept. Returns the candidates, finished ones first
    (unfinished ones never answer), each scored by its answer's PC (0 if pruned or
    unanswered), the chosen one (the best answer, then its likeliest path, then the first
    sampled), and stats: how many paths were pruned."""
    order = sorted(range(len(leaves)), key=lambda i: not leaves[i].finished)  # stable
    leaves, cands = [leaves[i] for i in order], [cands[i] for i in order]
    done = [leaf for leaf in leaves if leaf.finished]
    pruned = mark(done) if done else []
    for node, cut in zip(done, pruned):
        if cut:
            node.scores.of(RpcMark).rpc_pruned = True
    kept = [(leaf, c) for leaf, c, cut in zip(done, cands, pruned) if not cut]
    pc = perplexity_consistency(problem, [leaf for leaf, _ in kept], [c.answer for _, c in kept])
    kept_ids = {leaf.id for leaf, _ in kept}

    def final(c: Candidate) -> Candidate:
        if c.node_id in kept_ids and c.answer is not None:
            return replace(c, score=pc[vote_key(problem, c.answer)])
        return replace(c, score=0.0)

    cands = [final(c) for c in cands]
    probs = {leaf.id: path_prob(leaf) for leaf in leaves}
    pool = [c for c in cands if c.node_id in kept_ids and c.answer is not None]
    # max keeps the first on ties (sampling order)
    chosen = max(pool, key=lambda c: (c.score, probs[c.node_id])) if pool else None
    return cands, chosen, dict(pruned=sum(pruned))


@rules(at_least(1, "n", "live_after"), one_of("fit_bounds", BOUNDS),
       within(1, MAX_STARTS, "fit_starts"),
       width=Width(("n",)), scorer=False)
def rpc(problem: Problem, engine: Engine, scorer: Scorer, session: Session, *, seed: int = 0,
        n: int = 8, live: bool = False, live_after: int = 2, fit_bounds: str = "project",
        fit_starts: int = 2, sampler: Sampler = SAMPLER_T1, max_depth: int = 40) -> Outcome:
    # RPC ranks answers by the model's own probabilities only: no scorer is consulted
    fit = dict(bounds=fit_bounds, starts=fit_starts)
    run = Run.begin(problem, engine, scorer, session, seed=seed, sampler=sampler,
                    selection=Selection(lambda p, leaves, cands: rank(
                        p, leaves, cands, lambda nodes: _mark_low(nodes, fit)),
                        "perplexity_consistency(path probabilities)"))

    def prune_live(depth: int, done: list[Node], frontier: list[Node]) -> list[Node]:
        """Live RPC: stop paths whose running probability falls in the low component."""
        if not live or depth < live_after:
            return []
        batch = done + frontier
        low = dict(zip((b.id for b in batch), _mark_low(batch, fit)))
        cut = [node for node in frontier if low[node.id]]
        for node in cut:
            node.scores.of(RpcMark).rpc_pruned = True
        return cut

    done, frontier, stopped = sample_paths(run.engine, run.root, n, run.meter, sampler, run.rng,
                                           max_depth=max_depth, prune=prune_live)
    # if the budget stopped it before any path finished, the likeliest live one is finished
    # from the reserve (and, if it finishes, is the one finished path)
    return run.finish(done + frontier + stopped, score=path_prob, max_depth=max_depth,
                      reserve_scores=None, partial=frontier,
                      stats=dict(live_pruned=len(stopped)))
