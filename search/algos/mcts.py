"""Monte Carlo tree search over reasoning steps, with PRM values and batched leaf expansion.

UCT (Kocsis & Szepesvari 2006, "Bandit based Monte-Carlo Planning") on a tree whose edges are
sampled reasoning steps, as in step-level MCTS for LLM reasoning (e.g. Hao et al. 2023,
"Reasoning with Language Model is Planning with World Model"; Zhang et al. 2024, ReST-MCTS*).
Each node keeps a visit count N and a value sum W (Q = W / N).

    repeat `iterations` times (or until the budget ends):
        select `batch` leaves: from the root, follow argmax_c Q(c) + c_uct sqrt(ln N(parent) / N(c))
            down to a node not yet expanded; add a virtual loss (a visit of value 0) along the
            path, so the next selection of the same iteration tends elsewhere
        expand the selected unfinished leaves with K sampled steps each (one engine batch);
            drop repeated sibling steps
        evaluate every new child: its PRM score (evaluate="prm"), or the PRM score of the last
            step of a sampled rollout to the end (evaluate="rollout", batched)
        backpropagate: the child and each ancestor get N += 1, W += value;
            a selected finished (or depth-capped) leaf backs up its own score again
        remove the virtual losses
    return select(every finished path in the tree)   (best score by default)

Values are PRM scores in [0, 1] (a non-finite score counts as 0), the range c_uct = 1.4
(about sqrt 2) is tuned for. A node is expanded once (no progressive widening): a step that
none of its K samples produced is never in the tree. After the search every tree node records
its visits and Q (MctsMark).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from search.algos import Run
from search.algos._stepwise import SAMPLER, Sampler, new_siblings, roll
from search.engines.base import Engine
from search.fit import Width
from search.knobs import at_least, one_of, rules
from search.marks import Mark
from search.scoring import Scorer, reward
from search.select import DEFAULT
from search.session import Session
from search.types import Node, Outcome, Problem


@dataclass(slots=True)
class MctsMark(Mark):
    """MCTS's values of a tree node after the search (None until written)."""

    key = "mcts"
    visits: float | None = None  # the visit count N (virtual losses included while live)
    q: float | None = None  # the mean backed-up value W / N


@dataclass
class Stats:
    visits: float = 0.0
    total: float = 0.0  # sum of backed-up values

    @property
    def q(self) -> float:
        return self.total / self.visits if self.visits else 0.0


def value_of(node: Node) -> float:
    v = reward(node)
    return v if math.isfinite(v) else 0.0


class Tree:
    """UCT statistics over the search tree's nodes (by id); children created by a rollout
    are not part of the search tree and are never selected."""

    def __init__(self, root: Node, c: float, virtual_loss: float) -> None:
        self.root, self.c, self.vl = root, c, virtual_loss
        self.stats: dict[int, Stats] = {root.id: Stats()}
        self.expanded: set[int] = set()

    def kids(self, node: Node) -> list[Node]:
        return [k for k in node.children if k.id in self.stats]

    def uct(self, parent: Node, child: Node) -> float:
        s, n = self.stats[child.id], self.stats[parent.id].visits
        if s.visits == 0:
            return math.inf
        return s.q + self.c * math.sqrt(math.log(max(n, 1.0)) / s.visits)

    def select(self) -> list[Node]:
        """The path from the root to the leaf UCT picks (max keeps the first of ties)."""
        path = [self.root]
        while path[-1].id in self.expanded and (kids := self.kids(path[-1])):
            path.append(max(kids, key=lambda k, p=path[-1]: self.uct(p, k)))
        return path

    def add_virtual_loss(self, path: Sequence[Node], sign: float) -> None:
        for node in path:
            self.stats[node.id].visits += sign * self.vl

    def backup(self, leaf: Node, value: float) -> None:
        node: Node | None = leaf
        while node is not None and node.id in self.stats:
            self.stats[node.id].visits += 1
            self.stats[node.id].total += value
            node = node.parent

    def grow(self, parent: Node, kids: Sequence[Node]) -> None:
        self.expanded.add(parent.id)
        for kid in kids:
            self.stats[kid.id] = Stats()

    def frontier(self) -> list[Node]:
        """Unexpanded unfinished nodes: the only ones that may be expanded later."""
        return [node for node in self.root.walk()
                if node.id in self.stats and node.id not in self.expanded and not node.finished]


@rules(at_least(1, "batch", "k"), at_least(0, "c", "virtual_loss"),
       one_of("evaluate", ("prm", "rollout")),
       scores_as_it_goes=True,
       width=Width(("batch", "k"), spread=2.0), scale=Width(("iterations",)))
def mcts(problem: Problem, engine: Engine, scorer: Scorer, session: Session, *, seed: int = 0,
         iterations: int = 64, batch: int = 4, k: int = 4, c: float = 1.4,
         virtual_loss: float = 1.0, evaluate: str = "prm", max_depth: int = 40,
         agg: str | None = None, select: str = DEFAULT, sampler: Sampler = SAMPLER) -> Outcome:
    run = Run.begin(problem, engine, scorer, session, seed=seed, agg=agg, select=select,
                    sampler=sampler)
    root = run.root
    tree = Tree(root, c, virtual_loss)
    finished: dict[int, Node] = {}  # every finished path seen, rollouts included
    for _ in range(iterations):
        if run.meter.exhausted():
            break
        paths = []
        for _ in range(batch):
            path = tree.select()
            tree.add_virtual_loss(path, +1)
            paths.append(path)
        leaves = list({p[-1].id: p[-1] for p in paths}.values())
        grow = [leaf for leaf in leaves if not leaf.finished and leaf.depth < max_depth]
        for leaf in leaves:  # terminal (or depth-capped) leaves back up their own score
            if leaf not in grow:
                tree.backup(leaf, value_of(leaf) if leaf.scores.reward is not None else 0.0)
        kids = [new_siblings(cs) for cs in run.expand(grow, k)]
        for leaf, cs in zip(grow, kids):
            tree.grow(leaf, cs)
        new = [kid for cs in kids for kid in cs]
        run.score(new)
        values = [value_of(kid) for kid in new]
        if evaluate == "rollout":
            values = _rollouts(run, new, max_depth, values, finished)
        for kid, v in zip(new, values):
            tree.backup(kid, v)
        finished.update((kid.id, kid) for kid in new if kid.finished)
        for path in paths:
            tree.add_virtual_loss(path, -1)
    for node in root.walk():
        if node.id in tree.stats:
            st = tree.stats[node.id]
            node.scores.marks[MctsMark.key] = MctsMark(visits=st.visits, q=st.q)
    # nothing finished: the best-scored open nodes stand in (sorted() keeps walk order on ties)
    leaves = list(finished.values()) or sorted(
        (node for node in tree.frontier() if node is not root), key=run.path_score,
        reverse=True)[:batch]
    return run.finish(leaves, max_depth=max_depth)


def _rollouts(run: Run, starts: Sequence[Node], max_depth: int, values: list[float],
              finished: dict[int, Node]) -> list[float]:
    """Each unfinished start is continued one sampled step at a time (all of them in one
    batch per step) to the end; its value becomes the PRM score of the rollout's last step.
    A start the budget or depth cuts short keeps its own score. Finished rollouts are
    complete solutions and join `finished`."""

    def scored(tips: list[Node]) -> None:  # every rollout step is scored as it is taken
        run.score(tips)
        finished.update((tip.id, tip) for tip in tips if tip.finished)

    ends, _ = roll(starts, run.sampler.one_step(run.engine, run.rng), run.meter,
                   goes_on=lambda tip: not tip.finished and tip.depth < max_depth,
                   after=scored)
    return [value if end is start else value_of(end)
            for start, end, value in zip(starts, ends, values)]
