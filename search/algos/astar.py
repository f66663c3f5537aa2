"""A*-decoding: best-first search over partial solutions on a PRM-guided priority queue.

Chatziveroglou 2025, "A*-Decoding: Token-Efficient Inference Scaling" (arXiv:2505.13672).
A state is a partial solution; its successors are K sampled next steps; the open list is
ordered by f = g + h. The paper returns as soon as a finished state is popped; here the
search goes on until `finalists` finished states have been popped (finalists=1: the paper).

    push root with f = 0
    repeat until `finalists` finished states are popped, the queue empties, or the budget ends:
        pop up to `width` states in f order (a finished one ends the batch: it waits its turn)
        expand each with K sampled steps, in one engine batch (duplicates: below)
        score the new steps with the PRM (r in [0, 1])
        g(child) = g(parent) + c(r_child)      with c(r) = -log r
        h(child) = 0 if finished or admissible, else h_weight * (1 - r_child)
        push the children (duplicates="merge": a child whose state is known at a lower g is
            merged into it)
    return select(the popped finished states)   (else the finished, then open, states found)

Choices where the paper leaves room:
- g: the step cost is the PRM's negative log c = -log r (r clipped to [1e-6, 1]), so
  g = -log prod(r) never decreases along a path. g="mean" divides by the number of steps
  (length-normalised: longer paths are not penalised, but f order loses its guarantees).
  g="last" is the newest step's cost alone: for a scorer whose newest score already judges
  the whole path (a value head, path_agg "last"), a sum would charge a path once per step
  for the same estimate and so rank every shallow state before any deep one.
- h: the paper's PRM complement 1 - r of the newest step, times h_weight. It estimates how
  far off track the path already is and may overestimate the remaining cost.
  admissible=True sets h = 0: the only PRM-derived estimate that never overestimates a sum of
  unknown non-negative future costs. The search is then uniform-cost: it pops states in
  non-decreasing f and returns the cheapest finished path among the states it samples.
- Batching: a finished state is popped (as the goal) only when it is the queue's minimum,
  so popping `width` states at a time never returns a solution sequential A* would not.
- Ties (knob `ties`): equal f pops the deeper state first ("deep", the default), then the
  earlier pushed; "fifo" pops the earlier pushed. With a verifier's few score levels (the
  step checker's 1 / 0.5 / 0) every sound path has f = 0, and "fifo" then pops them
  breadth-first (both rules measured in docs/studies.md, by reports/studies/astar_tokens.py).
- Costs (knob `cost`): "neglog" c(r) = -log r (a probability's surprisal) or "complement"
  c(r) = 1 - r (bounded: a zero score costs 1, not 13.8).
- Duplicates (knob `duplicates`): "keep" (the default, as search-and-learn runs its
  searches: no duplicate filtering) treats every sampled node as its own state, so a step
  the model samples four times is expanded four times, and a batch always samples
  width * K steps. "merge" makes a state (path text, finished): equal texts reached by
  different step splits are one state; the lower g wins and an expanded state is never
  reopened. With a small model most samples of a step are equal, so merging leaves one
  state per depth, K samples a batch and a frontier that can run dry with the budget left.
- The root's single expansion samples K * width steps, so every batch has the same width.
- A cap: best-first search has no natural stop but the goal, and with flat or misleading
  scores it may expand for a long time (a width-16 run once spent 60,481 tokens where beam
  search spends ~1,300). At most `max_batches` batches run (default 40: the depth limit
  of a beam search sampling as many steps per batch, so A* never samples more than that
  beam search could); Result.stats says how many ran and whether the cap stopped it.
- Finalists (knob `finalists`, default 4): the finished states popped before the search
  stops, handed like every search's finished paths to the shared final selection (`select`
  over path scores, agg of step rewards: search.select). The paper stops at the first, which
  leaves a vote nothing to weigh; 4 gives the selection a choice at a width-16 search's
  cost of a few more batches (finalists=1 is the paper's search).
- Rounds (knob `rounds`, default 1: every popped state is expanded with its K samples at
  once, as the paper does): a batch's width * K samples are drawn in rounds, spread over
  the popped states, by beam search's rule (_stepwise.draw_rounds; the references are in
  search/algos/beam.py): the bar is the best popped state's path score; a batch stops early
  once as many unfinished children as states popped reach it and none finished, banking the
  samples it did not draw; a batch whose children all fall below it draws further rounds
  from the same states, paid by the bank. A batch costs fewer samples where the path is
  easy, so a run draws at most width * K samples a batch on the whole and at the same
  batch cap spends fewer tokens (the root's batch draws its K * width).
- Spend (knob `bon_spend`, default None: no such stop): once a finished state has been found,
  the search stops when the tokens it generated reach bon_spend times what best-of-N at its
  width would generate, estimated as N = width * K whole paths of the mean length (in
  generated tokens) of the finished states found so far. With graded scores (a learned PRM)
  a finished state is rarely the queue's minimum, so without it the batch cap is the only
  stop; with it A* spends what the search it is compared with spends (the stop of
  best-of-N-matched comparisons, Snell et al. 2024, arXiv:2408.03314: equal generation
  budgets). What it returns is as at the cap: the popped goals, else the finished states found.
A*'s values of a node are its AStarMark (node.scores.of(AStarMark)): scored nodes record cost,
g and f; popped nodes pop (pop order) and batch; a merged node merged_into (the id of the
state that replaced it).
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass

from search.algos import Run
from search.algos._stepwise import (
    DUPLICATES,
    SAMPLER,
    Sampler,
    at_bar,
    draw_rounds,
    expand_spread,
    merge_equal,
)
from search.engines.base import Engine
from search.fit import Width
from search.knobs import Rule, above, at_least, one_of, rules
from search.marks import Mark
from search.scoring import Scorer, reward
from search.select import DEFAULT
from search.session import Session
from search.types import Node, Outcome, Problem

EPS = 1e-6  # PRM scores are clipped to [EPS, 1] before -log, so a zero score costs ~13.8
COSTS = ("neglog", "complement")
TIES = ("deep", "fifo")
G_RULES = ("sum", "mean", "last")


@dataclass(slots=True)
class AStarMark(Mark):
    """A*'s values of a node (None until written)."""

    key = "astar"
    cost: float | None = None  # sum of step costs c(r) from the root
    g: float | None = None  # g of the node (sum, mean or last of the costs)
    f: float | None = None  # g + h
    # the id of the node that holds this node's state: a state reached again at lower g, or
    # one already expanded (its heap entry is then stale)
    merged_into: int | None = None
    pop: int | None = None  # the node's place in pop order (from 0)
    batch: int | None = None  # the batch it was popped in (from 0)


def mark(node: Node) -> AStarMark:
    """node's A* mark (made on first use)."""
    return node.scores.of(AStarMark)


def _merged(node: Node) -> bool:
    m = node.scores.get(AStarMark)
    return m is not None and m.merged_into is not None


def _value(node: Node, name: str) -> float:
    m = node.scores.get(AStarMark)
    value = None if m is None else getattr(m, name)
    assert value is not None, "an offered node has been evaluated"
    return value


def step_cost(reward: float, cost: str = "neglog") -> float:
    """c(r) = -log r ("neglog") or 1 - r ("complement"), r clipped to [EPS, 1] (a
    non-finite score counts as EPS)."""
    r = min(max(reward if math.isfinite(reward) else EPS, EPS), 1.0)
    return -math.log(r) if cost == "neglog" else 1.0 - r


class Frontier:
    """The open list: a heap of (f, tie, push order, node), tie = -depth ("deep") or 0
    ("fifo"); merged states are deleted lazily. merge=False: every node is its own state."""

    def __init__(self, *, ties: str = "deep", merge: bool = True) -> None:
        self.heap: list[tuple[float, int, int, Node]] = []
        self.states: dict[object, Node] = {}  # state -> the node that holds it
        self.closed: set[int] = set()  # ids of popped nodes
        self._order = itertools.count()
        self.deep, self.merge = ties == "deep", merge

    def offer(self, node: Node) -> None:
        """Push node unless its state is known at no higher g or already popped."""
        key = (node.text, node.finished) if self.merge else node.id
        old = self.states.get(key)
        if old is not None:
            if old.id in self.closed or _g(old) <= _g(node):
                mark(node).merged_into = old.id
                return
            mark(old).merged_into = node.id  # its heap entry is now stale
        self.states[key] = node
        tie = -node.depth if self.deep else 0
        heapq.heappush(self.heap, (_f(node), tie, next(self._order), node))

    def peek(self) -> Node | None:
        while self.heap and _merged(self.heap[0][-1]):
            heapq.heappop(self.heap)
        return self.heap[0][-1] if self.heap else None

    def pop(self) -> Node:
        if self.peek() is None:
            raise IndexError("pop from an empty frontier")
        node = heapq.heappop(self.heap)[-1]
        self.closed.add(node.id)
        return node

    def open_nodes(self) -> list[Node]:
        """Live open states in pop order."""
        return [e[-1] for e in sorted(self.heap) if not _merged(e[-1])]


def _g(node: Node) -> float:
    return _value(node, "g")


def _f(node: Node) -> float:
    return _value(node, "f")


@rules(at_least(1, "width", "k", "max_batches", "finalists", "rounds"), above(0, "bon_spend"),
       one_of("g", G_RULES), one_of("cost", COSTS),
       one_of("ties", TIES), one_of("duplicates", DUPLICATES), at_least(0, "h_weight"),
       Rule(("admissible", "g"), lambda a, g: not a or g == "sum",
            "g must be 'sum' for admissible search (additive costs)"),
       scores_as_it_goes=True,
       width=Width(("width", "k"), spread=4.0))
def astar(problem: Problem, engine: Engine, scorer: Scorer, session: Session, *, seed: int = 0,
          width: int = 4, k: int = 4, admissible: bool = False, h_weight: float = 1.0,
          g: str = "sum", cost: str = "neglog", ties: str = "deep", duplicates: str = "keep",
          finalists: int = 4, max_depth: int = 40, max_batches: int = 40, rounds: int = 1,
          bon_spend: float | None = None, agg: str | None = None, select: str = DEFAULT,
          sampler: Sampler = SAMPLER) -> Outcome:
    run = Run.begin(problem, engine, scorer, session, seed=seed, agg=agg, select=select,
                    sampler=sampler)
    root = run.root
    root.scores.marks[AStarMark.key] = AStarMark(cost=0.0, g=0.0, f=0.0)
    frontier = Frontier(ties=ties, merge=duplicates == "merge")
    frontier.offer(root)
    goals: list[Node] = []  # finished states popped, in pop order
    pops = batches = 0
    bank = 0  # samples earlier batches did not draw (rounds > 1)
    capped = spent = False
    start = run.meter.generated_tokens
    lengths: list[int] = []  # generated tokens of each finished state found

    def pop() -> Node:
        nonlocal pops
        node = frontier.pop()
        mark(node).pop, mark(node).batch = pops, batches
        pops += 1
        return node

    def evaluate(child: Node) -> None:
        assert child.parent is not None
        r = reward(child)
        total = _value(child.parent, "cost") + step_cost(r, cost)
        gval = {"sum": total, "mean": total / child.depth, "last": step_cost(r, cost)}[g]
        h = 0.0 if admissible or child.finished else h_weight * (1.0 - r)
        child.scores.marks[AStarMark.key] = AStarMark(cost=total, g=gval, f=gval + h)
        if child.finished:
            lengths.append(child.generated_tokens)

    def bon_spent() -> bool:
        """This run has generated bon_spend x best-of-(width x k)'s estimated tokens."""
        if bon_spend is None or not lengths:
            return False
        bon = width * k * sum(lengths) / len(lengths)
        return run.meter.generated_tokens - start >= bon_spend * bon

    while True:
        top = frontier.peek()
        if top is not None and top.finished:  # the cheapest open state is a solution
            goals.append(pop())
            if len(goals) >= finalists:
                break
            continue
        if top is None or run.meter.exhausted():
            break
        if batches >= max_batches:
            capped = True
            break
        if bon_spent():
            spent = True
            break
        batch: list[Node] = []
        while len(batch) < width and (top := frontier.peek()) is not None and not top.finished:
            node = pop()
            if node.depth < max_depth:  # deeper states are dead ends, reported as such
                batch.append(node)
        batches += 1
        if not batch:
            continue
        n = k * width if batch == [root] else k
        fresh, bank = _draw_batch(run, batch, n, rounds, bank, duplicates)
        for child in fresh:
            evaluate(child)
            frontier.offer(child)

    open_nodes = [node for node in frontier.open_nodes() if node is not root]
    # the popped solutions; else (the budget or cap ended the search first) the finished
    # states found, else the most promising partial paths
    leaves = goals or [node for node in open_nodes if node.finished] or open_nodes[:width]
    return run.finish(leaves, max_depth=max_depth,
                      stats=dict(batches=batches, capped=capped, spent=spent,
                                 finalists=len(goals)))


def _draw_batch(run: Run, batch: list[Node], n: int, rounds: int, bank: int,
                duplicates: str) -> tuple[list[Node], int]:
    """The batch's new states, scored, and the bank left: n samples of each popped state
    (one engine batch; rounds > 1: len(batch) * n samples spread over the batch in rounds,
    _stepwise.draw_rounds, beam search's rule). A node's equal samples are one state (same
    g); equal states of different parents meet in the frontier, where the lower g wins."""
    if rounds == 1:
        fresh = [c for cs in run.expand(batch, n) for c in merge_equal(cs, duplicates)]
        run.score(fresh)
        return fresh, bank
    bar = max(map(run.path_score, batch)) if batch[0].parent is not None else math.inf
    seen: dict[int, dict[tuple[str, bool], Node]] = {node.id: {} for node in batch}

    def draw(size: int) -> list[Node]:
        new = [c for b, cs in zip(batch, expand_spread(run.expand, batch, size))
               for c in merge_equal(cs, duplicates, seen[b.id])]
        run.score(new)
        return new

    enough, collapsed = at_bar(run.path_score, bar, len(batch))
    return draw_rounds(draw, n * len(batch), rounds=rounds, bank=bank, enough=enough,
                       collapsed=collapsed,
                       exhausted=run.meter.exhausted)
