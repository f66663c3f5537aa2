"""Step-level beam search guided by a process reward model, with optional lookahead.

As in Snell et al. 2024 ("Scaling LLM Test-Time Compute Optimally can be More Effective
than Scaling Model Parameters") and HF search-and-learn: N candidates at the first step;
afterwards keep the N/M best unfinished paths (by aggregated step reward) and expand each
with M sampled next steps, so N new steps are scored at every depth.

    beams <- N samples of the first step from the root
    repeat until N paths finished, depth limit, or budget:
        score new steps with the PRM; move finished paths to `done`
        if lookahead > 0: roll each unfinished candidate `lookahead` steps further at
            temperature 0 and score the rollout's end with the PRM  (Snell et al. sec. 5.1)
        beams <- top N/M unfinished paths by agg(step rewards)
        beams <- N sampled next steps spread over the beams (M each when N/M are kept)
    return select(done)   (the shared selection, search.select; agg: the scorer's own)
    (rounds > 1: a depth's N samples are drawn in rounds, below)

Lookahead (Snell et al.'s "lookahead search"; search-and-learn's generate_k_steps): the
rollouts of all candidates advance together, one batched temperature-0 expand per lookahead
step. The PRM's score of a rollout's last step stands in for the candidate's own step reward
when candidates are ranked: a candidate's key is agg(rewards of the steps before it + [score
at the end of its rollout]), stored as the node's BeamMark.lookahead. The kept beam is the candidate
itself, never a rollout node; rollouts stay in the tree (their tokens are real generation
and charged like any other) but are neither beams nor candidates, and the final selection
among finished paths uses their own PRM rewards. Our choices: no lookahead at the last depth,
nor when every unfinished candidate is kept anyway (it could not change the beams); if the
budget ends mid-rollout, no lookahead score is written (the search stops at this depth).

Width per depth (search-and-learn's beam_search, which copies the kept beams back up to N
rows every iteration): every depth samples N steps, spread over the beams kept (_stepwise.spread: M
each when N/M are kept; when fewer survive, because paths finished or were merged, each
gets N // kept and the best-ranked one more), so a depth never spends less than N samples.

Duplicates (knob `duplicates`; search-and-learn's filter_duplicates, off by default there):
a small model often samples the same step several times from one beam ("The answer is
135." four times). "keep" (the default, as search-and-learn runs it) scores and carries
every sample, identical ones included. "merge" keeps one node per state (path text,
finished) of each depth's candidates: it alone is scored, ranked and kept, so the kept beams
are distinct, and it counts as the number of samples it stands for (scores.copies) toward N
finished paths and in a vote; the samples it saves are spent on the kept beams at the next
depth (the spread above).

Rounds (knob `rounds`, default 1: every depth draws its N samples at once, as the references
do): a depth's N samples are drawn in rounds of N // rounds (_stepwise.draw_rounds). The bar
of a depth is the best kept beam's path score. A depth stops early once `keep` unfinished
candidates reach the bar and none finished (it already holds as good a beam for every slot;
a depth where paths finish draws its N, so the vote weighs as many finished paths); the
samples it did not draw go to a bank. A depth collapsed when no candidate reaches the bar
(every sample of the step fell below the path it extends): after its N it draws further
rounds from the same beams, paid from the bank, until a candidate reaches the bar or the
bank is spent. So a run never draws more than N samples a depth, and spends them on the
depth where the search is failing instead of the ones a few samples settle. The first depth
(no bar: the root has no score) draws its N. This is Snell et al.'s compute-optimal idea
(spend test-time compute where the problem is hard) applied per depth, with the stopping
rule of adaptive sampling (Aggarwal et al. 2023, "Let's Sample Step by Step:
Adaptive-Consistency for Efficient Reasoning and Coding with LLMs": draw in rounds, stop
when the samples drawn settle the question) and the redraw of step-level rejection sampling
(a step the verifier rejects is drawn again from the same prefix).

Ranking ties (equal keys) keep generation order, so a beam's children are ranked together
(search-and-learn's argsort does the same); the final choice among finished paths is the
shared selection (search.select), whose ties are drawn from the run's seed.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from search import aggregate
from search.algos import Run
from search.algos._stepwise import (
    DUPLICATES,
    SAMPLER,
    Sampler,
    at_bar,
    copies,
    draw_rounds,
    expand_spread,
    merge_equal,
    roll,
    with_copies,
)
from search.engines.base import Engine
from search.fit import Width
from search.knobs import at_least, divides, one_of, rules
from search.marks import Mark
from search.scoring import Scorer
from search.select import DEFAULT
from search.session import Session
from search.types import Node, Outcome, Problem


@dataclass(slots=True)
class BeamMark(Mark):
    """Beam search's value of a node (None until written)."""

    key = "beam"
    lookahead: float | None = None  # the scorer's value at the end of its rollout


@rules(at_least(1, "n", "m", "rounds"), divides("m", "n"), at_least(0, "lookahead"),
       one_of("duplicates", DUPLICATES),
       scores_as_it_goes=True,
       width=Width(("n",), multiple_of="m", companions=("m",)))
def beam(problem: Problem, engine: Engine, scorer: Scorer, session: Session, *, seed: int = 0,
         n: int = 16, m: int = 4, max_depth: int = 40, lookahead: int = 0,
         agg: str | None = None, select: str = DEFAULT, duplicates: str = "keep",
         rounds: int = 1, sampler: Sampler = SAMPLER) -> Outcome:
    run = Run.begin(problem, engine, scorer, session, seed=seed, agg=agg, select=select,
                    sampler=sampler)
    agg_fn = aggregate.get(run.agg)
    keep = n // m
    beams: list[Node] = [run.root]
    done: list[Node] = []

    def rank_key(node: Node) -> float:
        # agg of the path's step rewards, the node's own replaced by its lookahead score
        rewards = node.rewards()
        mark = node.scores.get(BeamMark)
        if mark is not None and mark.lookahead is not None:
            rewards[-1] = mark.lookahead
        return agg_fn(rewards)

    bank = 0  # samples earlier depths did not draw (rounds > 1)
    for depth in range(max_depth):
        if not beams or sum(map(copies, done)) >= n or run.meter.exhausted():
            break
        kids, bank = _draw_depth(run, beams, n, keep, rounds, bank, duplicates)
        done += [c for c in kids if c.finished]
        alive = [c for c in kids if not c.finished]
        if lookahead and depth < max_depth - 1 and sum(map(copies, done)) < n and \
                len(alive) > keep:
            _look_ahead(run, alive, lookahead)
        # sorted() is stable: equal scores keep generation order, so runs are reproducible
        alive = sorted(alive, key=rank_key, reverse=True)
        beams = alive[:keep]
    # unfinished beams are reported but never answer (unless one is finished from the
    # budget's reserve); the root alone (no step) is not a path
    leaves = with_copies(done) or [b for b in beams if b is not run.root]
    return run.finish(leaves, max_depth=max_depth)


def _draw_depth(run: Run, beams: list[Node], n: int, keep: int, rounds: int, bank: int,
                duplicates: str) -> tuple[list[Node], int]:
    """A depth's candidates (scored, duplicates merged by the policy) and the bank left: the
    n samples spread over the beams, drawn in rounds (_stepwise.draw_rounds). The bar is
    the best kept beam's path score (the first depth has none to lose: its n are drawn);
    the depth has enough when `keep` unfinished candidates reach it and none finished (a
    finishing depth draws its n, so the vote has as many paths), and it collapsed when no
    candidate reaches it."""
    bar = max(map(run.path_score, beams)) if beams != [run.root] else math.inf
    seen: dict[tuple[str, bool], Node] = {}

    def draw(size: int) -> list[Node]:
        new = merge_equal([c for cs in expand_spread(run.expand, beams, size) for c in cs],
                          duplicates, seen)
        run.score(new)
        return new

    enough, collapsed = at_bar(run.path_score, bar, keep)
    return draw_rounds(draw, n, rounds=rounds, bank=bank, enough=enough, collapsed=collapsed,
                       exhausted=run.meter.exhausted)


def _look_ahead(run: Run, starts: Sequence[Node], steps: int) -> None:
    """Roll every start up to `steps` steps further at temperature 0 (one batched expand per
    step over all unfinished rollouts; a finished one stops early) and store the PRM's score
    of each rollout's last node as start's BeamMark.lookahead. If the budget runs out first,
    nothing is stored and the starts are ranked by their own rewards."""
    greedy = dataclasses.replace(run.sampler, temperature=0.0)
    tips, cut = roll(starts, greedy.one_step(run.engine, run.rng), run.meter, steps=steps)
    if cut:
        return
    # only the ends are scored: the steps in between are never ranked
    for start, value in zip(starts, run.score(tips)):
        start.scores.of(BeamMark).lookahead = value
