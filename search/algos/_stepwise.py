"""Helpers shared by the step-level searches: one way to sample a batch of steps, to roll
paths forward, to score paths and to merge duplicate states. How a search begins and ends
(Run, Run.finish) is in search/algos/__init__.py.

Only `Sampler.expand` (and the `step` a caller gives `roll`) reach the engine; every algorithm
decides which nodes go into them.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from search import aggregate
from search.budget import Meter
from search.engines.base import DEFAULT_STOP, Engine
from search.knobtypes import Group
from search.scoring import Scorer, name, path_agg
from search.types import Node


@dataclass(frozen=True)
class Sampler(Group):
    """The sampling knobs every step-level search passes to `engine.expand`: one keyword-only
    parameter of the algorithm, four knobs by their own names (search.knobs: a knob group)."""

    temperature: float = 0.8
    top_p: float = 1.0
    step_tokens: int = 256  # tokens at most per step
    stop: Sequence[str] | None = DEFAULT_STOP  # the step delimiters (None: none)

    def expand(self, engine: Engine, nodes: Sequence[Node], n: int, rng: random.Random
               ) -> list[list[Node]]:
        """For each node, n sampled next steps: one batched engine call with a fresh seed."""
        if not nodes:
            return []
        return engine.expand(nodes, n, stop=self.stop, max_tokens=self.step_tokens,
                             temperature=self.temperature, top_p=self.top_p,
                             seed=rng.getrandbits(32))

    def one_step(self, engine: Engine, rng: random.Random) -> Stepper:
        """`expand` with one sample per node, as `roll` takes a step."""
        return lambda nodes: [child for (child,) in self.expand(engine, nodes, 1, rng)]


@dataclass(frozen=True)
class GreedySampler(Sampler):
    """Sampler at temperature 0 throughout: only the step size and delimiters are knobs."""

    temperature: float = field(default=0.0, init=False)
    top_p: float = field(default=1.0, init=False)


SAMPLER = Sampler()  # the step-level searches' defaults
GREEDY = GreedySampler()

T = TypeVar("T")
Stepper = Callable[[Sequence[Node]], list[Node]]  # one child of each node, in one engine call


Prune = Callable[[int, list[Node], list[Node]], list[Node]]  # (depth, done, live) -> cut


def sample_paths(engine: Engine, root: Node, n: int, meter: Meter, sampler: Sampler,
                 rng: random.Random, *, max_depth: int, prune: Prune | None = None
                 ) -> tuple[list[Node], list[Node], list[Node]]:
    """n independent samples of the root, each extended one step at a time (all live paths
    in one batch) until it finishes, reaches max_depth steps, or the budget ends.

    prune(depth, done, live) may name live paths to stop early. Returns (finished paths,
    paths still live when the loop ended, pruned paths); the root itself is never a path.
    The first step samples the root n times in one call; `roll` takes the others.
    """
    done: list[Node] = []
    cut: dict[int, Node] = {}

    def settle(new: list[Node]) -> None:
        """After a step (every new tip is one step deeper): the finished ones are done, prune
        may stop live ones, and the live rest stay cached."""
        done.extend(c for c in new if c.finished)
        live = [c for c in new if not c.finished]
        if prune is not None and live:
            drop = {c.id for c in prune(new[0].depth - root.depth, done, live)}
            cut.update((c.id, c) for c in live if c.id in drop)

    if max_depth < 1 or meter.exhausted():
        return [], [], []
    [first] = sampler.expand(engine, [root], n, rng)
    settle(first)
    tips, _ = roll(first, sampler.one_step(engine, rng), meter, steps=max_depth - 1,
                   goes_on=lambda tip: not tip.finished and tip.id not in cut, after=settle)
    return done, [tip for tip in tips if not tip.finished and tip.id not in cut], \
        list(cut.values())


def roll(tips: Sequence[Node], step: Stepper, meter: Meter, *, steps: int | None = None,
         goes_on: Callable[[Node], bool] = lambda tip: not tip.finished,
         after: Callable[[list[Node]], Any] | None = None) -> tuple[list[Node], bool]:
    """Rollouts: every tip extended one step at a time. Each round the tips that go on (the
    unfinished ones, by default) take one step together (`step`: one engine call, one child
    per tip) and `after` sees their new tips; until no tip goes on, `steps` rounds, or the
    budget ends while a tip would go on. Returns where each tip got to (in the given order)
    and whether the budget stopped the rollouts."""
    tips = list(tips)
    for _ in range(steps) if steps is not None else itertools.count():
        live = [i for i, tip in enumerate(tips) if goes_on(tip)]
        if not live:
            break
        if meter.exhausted():
            return tips, True
        for i, child in zip(live, step([tips[i] for i in live])):
            tips[i] = child
        if after is not None:
            after([tips[i] for i in live])
    return tips, False


# -- path scores ----------------------------------------------------------------------------
def resolve_agg(agg: str | None, scorer: Scorer) -> str:
    """The aggregation of step scores a search uses: the caller's `agg`, else the one the
    scorer declares (Scorer.path_agg). Unknown names fail here, before any model call."""
    chosen = path_agg(scorer) if agg is None else agg
    aggregate.get(chosen)
    return chosen


def scored_by(scorer: Scorer, agg: str) -> str:
    """What candidate scores are, for Result.selected_by: "steps, min"."""
    return f"{name(scorer)}, {agg}"


def path_score(node: Node, agg: Callable[[Sequence[float]], float]) -> float:
    """agg of the step rewards along node's path (the root has none: -inf)."""
    rewards = node.rewards()
    return agg(rewards) if rewards else float("-inf")


def new_siblings(kids: Sequence[Node]) -> list[Node]:
    """The kids minus repeats of an earlier sibling's step text (same parent, same text is
    the same state; a repeat is dropped before it costs a scorer call). Order is kept."""
    seen: set[tuple[int, str]] = set()
    out = []
    for kid in kids:
        assert kid.parent is not None and kid.step is not None
        key = (kid.parent.id, kid.step.text)
        if key not in seen:
            seen.add(key)
            out.append(kid)
    return out


# -- a depth's width spread over the beams kept ---------------------------------------------
def spread(n: int, k: int) -> list[int]:
    """n samples over k beams (in rank order): n // k each, one more to each of the first
    n % k (the best-ranked), so a depth samples n steps however many beams are kept."""
    return [n // k + (i < n % k) for i in range(k)]


def expand_spread(expand: Callable[[Sequence[Node], int], list[list[Node]]],
                  nodes: Sequence[Node], n: int) -> list[list[Node]]:
    """n sampled next steps spread over the nodes (spread), in one engine batch: each
    node's children, in node order. `expand` is Run.expand."""
    widths = spread(n, len(nodes))
    if len(set(widths)) == 1:
        return expand(nodes, widths[0])
    rows = [b for b, w in zip(nodes, widths) for _ in range(w)]
    kids = iter([c for (c,) in expand(rows, 1)])
    return [[next(kids) for _ in range(w)] for w in widths]


# -- duplicate states ----------------------------------------------------------------------
DUPLICATES = ("merge", "keep")


def merge_equal(kids: Sequence[Node], policy: str = "merge",
                seen: dict[tuple[str, bool], Node] | None = None) -> list[Node]:
    """The kids of one expansion batch, equal states merged (policy "merge"; "keep" returns
    them as they are). A state is (path text, finished): the first kid sampled in a state
    stands for it and records scores.copies = how many kids were in it (1 if alone); each
    other one records scores.merged_into = the first one's id and is not returned, so it is
    never scored nor expanded (its tokens were generated and stay counted). Order is kept.
    `copies` lets votes count every sample (see with_copies). `seen` (state -> the node
    standing for it) carries the states of earlier batches of the same depth (draw_rounds),
    so a later batch's kid in a known state merges into that node; it is updated here."""
    if policy == "keep":
        return list(kids)
    first: dict[tuple[str, bool], Node] = {} if seen is None else seen
    out = []
    for kid in kids:
        key = (kid.text, kid.finished)
        if key in first:
            first[key].scores.copies = copies(first[key]) + 1
            kid.scores.merged_into = first[key].id
        else:
            first[key] = kid
            kid.scores.copies = 1
            out.append(kid)
    return out


def copies(node: Node) -> int:
    """How many sampled paths node stands for (1 unless merge_equal merged some into it)."""
    return 1 if node.scores.copies is None else node.scores.copies


def with_copies(leaves: Sequence[Node]) -> list[Node]:
    """Each leaf repeated copies(leaf) times: a vote over the result counts every sample."""
    return [leaf for leaf in leaves for _ in range(copies(leaf))]




# -- a depth drawn in rounds, paid for by the samples earlier depths did not need -----------
def at_bar(score: Callable[[Node], float], bar: float, keep: int
           ) -> tuple[Callable[[list[Node]], bool], Callable[[list[Node]], bool]]:
    """draw_rounds' (enough, collapsed) for a search that keeps `keep` candidates: enough
    once `keep` of them score at least `bar` and none finished (a finishing depth draws its
    n); collapsed while none reaches `bar`."""

    def enough(kids: list[Node]) -> bool:
        return not any(c.finished for c in kids) and sum(score(c) >= bar for c in kids) >= keep

    def collapsed(kids: list[Node]) -> bool:
        return max(map(score, kids), default=-math.inf) < bar

    return enough, collapsed


def draw_rounds(draw: Callable[[int], list[T]], n: int, *, rounds: int, bank: int,
                enough: Callable[[list[T]], bool], collapsed: Callable[[list[T]], bool],
                exhausted: Callable[[], bool] = lambda: False) -> tuple[list[T], int]:
    """One depth's candidates, drawn in rounds of max(1, n // rounds) samples: `draw(size)`
    samples size next steps (one engine batch) and returns its new candidates, scored.

    Before the depth's n samples are spent it stops as soon as `enough(candidates)` (the
    depth already has what the search keeps); the samples it did not draw go to the bank.
    Once n are spent it draws more rounds only while `collapsed(candidates)` (no candidate
    is as good as the path it extends) and the bank pays for a round, or part of one.
    Returns (every candidate, in draw order; the bank left). rounds=1 with an empty bank is
    one draw of n: the search without rounds. Samples a search draws over a run never
    exceed n per depth: a round past n spends what an earlier depth saved."""
    size = max(1, n // rounds)
    allowance = n + bank
    drawn = 0
    out: list[T] = []
    while drawn < allowance and not exhausted():
        take = min(size, allowance - drawn)
        out += draw(take)
        drawn += take
        if (drawn < n and enough(out)) or (drawn >= n and not collapsed(out)):
            break
    return out, allowance - drawn
