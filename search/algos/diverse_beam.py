"""Diverse beam search, over reasoning steps (PRM scores) or over tokens (log-probabilities).

Vijayakumar et al. 2018, "Diverse Beam Search for Improved Description of Complex Scenes"
(AAAI; arXiv:1610.02424). B beams form G groups of B' = B/G. At every step the groups choose
in turn ("doubly greedy"), and group g's candidate scores are penalised by lambda times
their similarity to what groups 1..g-1 chose at the same step.

    every group holds the root
    for t = 1, 2, ... until B paths finished, depth limit, or budget:
        extend every group's beams (one engine batch)
        for g = 1..G:
            cand_g <- extensions of group g's beams
            s(c) = theta(c) - lam * sum_{d chosen at step t by groups < g} sim(c, d)
            group g keeps its B' best candidates by s
    return select(finished paths)

level="step": theta = agg of step rewards; a beam's candidates are M sampled next steps and
  B = N/M, as in `beam` (the root's one expansion samples N steps that all groups share);
  finished candidates leave the search as answers. With G = 1 this is `beam`, step for
  step. With lam = 0 and G > 1 it is G independent beam searches of width B', as in the
  paper (groups never trade beams).
level="token": the paper's setting. theta = the path's summed token log-probability; a beam's
  candidates are its top-B next tokens (exact: at most (g-1)B' tokens are penalised, so
  group g's best B' unpenalised extensions of a beam lie in its top B), forced with
  engine.extend; the scorer is not used (search.solve refuses a named one at this level).
  Every token is one tree node; max_tokens (not
  max_depth) bounds a path.

Diversity (knob `diversity`):
  "hamming"  the paper's Hamming diversity: sim = 1 when the candidate's new unit (the step's
             token ids, or the token) equals an earlier group's choice: the penalty counts them.
  "ngram"    step: the fraction of the candidate step's token n-grams found in the earlier
             step (so a partly reworded step is partly penalised; n shrinks to the shorter
             step's length); token: sim = 1 when the last n tokens of both paths agree (the
             paper's n-gram diversity).
A candidate (same parent, same continuation) is taken by one group at most, so groups never
hold the same beam (the paper lets groups duplicate a candidate; that only happens at the
root, where every group starts). Chosen nodes record their group (DiverseBeamMark.group).
At level="step", every depth samples N steps spread over the beams kept, as beam search
does (search/algos/beam.py); duplicates="keep" (the default, as beam's) carries every
sample, "merge" keeps one node per state among a beam's samples (siblings only: groups hold
different beams), counted as the samples it stands for.
At level="token", the chosen tokens are appended with engine.extend(generated=True): they
come from the model's own next-token distribution, so they count as generated tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from search.algos import Run
from search.algos._stepwise import (
    DUPLICATES,
    SAMPLER,
    Sampler,
    copies,
    expand_spread,
    merge_equal,
    with_copies,
)
from search.budget import Meter
from search.engines.base import Engine
from search.fit import Width
from search.knobs import Rule, at_least, divides, one_of, rules
from search.marks import Mark
from search.scoring import Scorer
from search.select import DEFAULT, Selection
from search.session import Session
from search.types import Node, Outcome, Problem

C = TypeVar("C")
Tokens = tuple[int, ...]
Similarity = Callable[[Tokens, Tokens], float]
Cand = tuple[Node, int, float]  # token level: (beam, next token id, path logprob with it)


@dataclass(slots=True)
class DiverseBeamMark(Mark):
    """Diverse beam search's value of a node (None until written)."""

    key = "diverse_beam"
    group: int | None = None  # the group that chose the node


def same(a: Tokens, b: Tokens) -> float:
    """Hamming similarity of two units: 1 if equal."""
    return float(a == b)


def ngram_overlap(a: Tokens, b: Tokens, n: int = 2) -> float:
    """The fraction of a's token n-grams that also occur in b; n shrinks to the shorter
    unit's length, so a one-token step is compared by unigrams."""
    k = min(n, len(a), len(b))
    if k == 0:
        return 0.0
    mine = {a[i:i + k] for i in range(len(a) - k + 1)}
    return len(mine & {b[i:i + k] for i in range(len(b) - k + 1)}) / len(mine)


def choose_groups(groups: Sequence[Sequence[C]], *, keep: int, lam: float,
                  theta: Callable[[C], float], unit: Callable[[C], Tokens],
                  ident: Callable[[C], Hashable], sim: Similarity) -> list[list[C]]:
    """One doubly-greedy DBS step: group g keeps its `keep` best candidates by
    theta - lam * (similarity to the units groups < g chose). Ties keep candidate order."""
    taken: set[Hashable] = set()
    chosen: list[Tokens] = []
    out: list[list[C]] = []
    for cands in groups:
        pool = [c for c in cands if ident(c) not in taken]
        penalty = {ident(c): lam * sum(sim(unit(c), d) for d in chosen) for c in pool}
        # sorted(reverse=True) is stable, exactly as in `beam`: equal scores keep their order
        best = sorted(pool, key=lambda c: theta(c) - penalty[ident(c)], reverse=True)[:keep]
        taken.update(ident(c) for c in best)
        chosen += [unit(c) for c in best]
        out.append(best)
    return out


def tail(node: Node, k: int) -> Tokens:
    """The last k token ids of node's path (prompt included)."""
    out: list[int] = []
    cur: Node | None = node
    while k and cur is not None and len(out) < k:
        out[:0] = cur.step.token_ids if cur.step is not None else cur.prompt_ids
        cur = cur.parent
    return tuple(out[-k:]) if k else ()


def _tag(groups: Sequence[Sequence[Node]]) -> list[Node]:
    for g, beams in enumerate(groups):
        for node in beams:
            node.scores.of(DiverseBeamMark).group = g
    return [node for beams in groups for node in beams]


def _unique(groups: Sequence[Sequence[Node]]) -> list[Node]:
    return list({node.id: node for beams in groups for node in beams}.values())


def uses_scorer(knobs: Mapping[str, Any]) -> bool:
    """Token-level diverse beam search ranks by log-probabilities alone."""
    return knobs.get("level", "step") != "token"


@rules(at_least(1, "n", "m", "groups", "ngram"), at_least(0, "lam"), divides("m", "n"),
       Rule(("groups", "n", "m"), lambda g, n, m: (n // m) % g == 0, "groups must divide n/m"),
       one_of("level", ("step", "token")), one_of("diversity", ("hamming", "ngram")),
       one_of("duplicates", DUPLICATES),
       width=Width(("n",), narrow=False, companions=("m", "groups")),
       scores_as_it_goes=True,
       scorer=uses_scorer)
def diverse_beam(problem: Problem, engine: Engine, scorer: Scorer, session: Session, *,
                 seed: int = 0, n: int = 16, m: int = 4, groups: int = 4, lam: float = 0.5,
                 diversity: str = "ngram", ngram: int = 2, level: str = "step",
                 max_depth: int = 40, max_tokens: int = 256, agg: str | None = None,
                 select: str = DEFAULT, duplicates: str = "keep",
                 sampler: Sampler = SAMPLER) -> Outcome:
    per = n // m // groups
    token = level == "token"  # the scorer is not consulted: paths rank by their log-probability
    run = Run.begin(problem, engine, scorer, session, seed=seed, agg=agg, select=select,
                    sampler=sampler,
                    selection=Selection.of(select, "path logprob", seed=seed) if token else None)
    if token:
        leaves = _by_token(run.engine, run.meter, run.root, groups=groups, per=per, lam=lam,
                           width=1 if diversity == "hamming" else ngram, max_tokens=max_tokens)
        return run.finish(leaves, score=lambda leaf: leaf.cum_logprob, max_depth=max_depth,
                          reserve_scores=None, resolved={})  # agg plays no part
    sim = same if diversity == "hamming" else (lambda a, b: ngram_overlap(a, b, ngram))
    leaves = _by_step(run, n=n, m=m, groups=groups, per=per, lam=lam, sim=sim,
                      max_depth=max_depth, duplicates=duplicates)
    return run.finish(leaves, max_depth=max_depth)


def _by_step(run: Run, *, n: int, m: int, groups: int, per: int, lam: float, sim: Similarity,
             max_depth: int, duplicates: str) -> list[Node]:
    beams: list[list[Node]] = [[run.root] for _ in range(groups)]
    done: list[Node] = []
    for _ in range(max_depth):
        flat = _unique(beams)
        if not flat or sum(map(copies, done)) >= n or run.meter.exhausted():
            break
        # equal siblings merge (one beam's samples); groups hold different beams, and
        # merging across beams would let one group's candidate absorb another's
        kids = [merge_equal(cs, duplicates) for cs in expand_spread(run.expand, flat, n)]
        children = {node.id: cs for node, cs in zip(flat, kids)}
        new = [c for cs in kids for c in cs]
        run.score(new)
        done += [c for c in new if c.finished]
        cands = [[c for b in bs for c in children[b.id] if not c.finished] for bs in beams]
        beams = choose_groups(cands, keep=per, lam=lam, theta=run.path_score,
                              unit=lambda c: c.step.token_ids if c.step else (),
                              ident=lambda c: c.id, sim=sim)
        _tag(beams)
    return with_copies(done) or [b for b in _unique(beams) if b is not run.root]


def _by_token(engine: Engine, meter: Meter, root: Node, *, groups: int, per: int, lam: float,
              width: int, max_tokens: int) -> list[Node]:
    """Token-level DBS; `width` is the n-gram length of a unit (1: Hamming)."""
    keep = groups * per
    beams: list[list[Node]] = [[root] for _ in range(groups)]
    done: list[Node] = []
    for _ in range(max_tokens):
        flat = _unique(beams)
        if not flat or len(done) >= keep or meter.exhausted():
            break
        tops = {node.id: top for node, top in zip(flat, engine.topk_next(flat, keep))}
        tails = {node.id: tail(node, width - 1) for node in flat}
        cands: list[list[Cand]] = [[(b, tok, b.cum_logprob + lp) for b in bs
                                    for tok, lp in tops[b.id]] for bs in beams]
        picks = choose_groups(cands, keep=per, lam=lam, theta=lambda c: c[2],
                              unit=lambda c, t=tails: t[c[0].id] + (c[1],),
                              ident=lambda c: (c[0].id, c[1]), sim=same)
        flat_picks = [c for group in picks for c in group]
        kids = engine.extend([c[0] for c in flat_picks], [[c[1]] for c in flat_picks],
                             generated=True)
        order = iter(kids)
        grown = [[next(order) for _ in group] for group in picks]
        _tag(grown)  # finished picks too: they were chosen by their group
        done += [c for group in grown for c in group if c.finished]
        beams = [[c for c in group if not c.finished] for group in grown]
    return done or [b for b in _unique(beams) if b is not root]
