"""Model-free drafts for speculative decoding (search.engines.hf.spec): chains and trees.

Two sources of candidate next tokens, both free of any draft model:
  n-grams   counts of (n tokens -> next token) over every path of the trees being expanded
            and the rows' own tokens as they grow. STAND: W. Song et al., "Accelerated
            Test-Time Scaling with Model-Free Speculative Sampling" (arXiv:2506.04708).
  recycled  for every token fed, the model's top-k next tokens from that forward, kept per
            token (the latest wins; a row's accepted path is recorded last). Token Recycling:
            X. Luo et al., "Turning Trash into Treasure: Accelerating Inference of Large
            Language Models with Token Recycling" (ACL 2025, arXiv:2408.08696).
A tree (`tree`, both papers draft trees) holds several guesses per position: each context's
candidates get estimated probabilities (`candidates`: the n-gram counts of the longest
matching contexts interpolated Witten-Bell style down to a rank prior on the recycled
top-k), and the tree grows best-first, always adding the candidate whose path probability
(the product of its ancestors') is highest, until the node budget is spent or no candidate
is worth a node. A first guess the model rejects can then be rescued by a sibling, and one
verification forward checks them all (spec.verify). A chain (`draft`) is the tree of one
child a node.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from search.types import Node

if TYPE_CHECKING:
    from search.engines.hf.config import SpecConfig

# Witten-Bell weight of the unseen: a context seen N times with T distinct next tokens
# keeps N / (N + WB * T) of its mass on what followed it, passing the rest to shorter
# contexts and then the recycled prior. WB = 4 rather than the textbook 1: replaying greedy
# SmolLM2-135M on 12 GSM8K prompts, the estimated path probabilities of the tree nodes then
# match how often the nodes were accepted (within ~0.05 at every depth; WB = 1 estimated
# twice the rate in the 0.1-0.6 range), and the best-first order spends nodes best
WB = 4.0
# the model's recycled top-k after a token, by rank: the probability a candidate is the next
# token when no n-gram speaks for it (measured there: 0.36, 0.14, 0.04, 0.03 for ranks 1-4)
RECYCLED_PRIOR = (0.45, 0.12, 0.06, 0.04, 0.03, 0.02, 0.015, 0.01)
FAN = 4  # most children tried per tree node


@dataclass
class DraftTree:
    """Per row, the tokens verified after its last token (the root, column 0).

    Node i (column i + 1 of the verification) holds tokens[i], its parent's column is
    parents[i] (0: the root) and its depth depth[i] (1: a child of the root). Nodes come in
    topological order (a parent before its children); siblings in the order they are tried
    (most probable first). A chain is the tree with parents [0, 1, 2, ...].
    """

    tokens: list[int]
    parents: list[int]
    depth: list[int]
    prob: list[float]  # estimated path probabilities (1.0 from `chain`: not estimated)

    @staticmethod
    def chain(tokens: Sequence[int]) -> DraftTree:
        k = len(tokens)
        return DraftTree(list(tokens), list(range(k)), list(range(1, k + 1)), [1.0] * k)

    def __len__(self) -> int:
        return len(self.tokens)

    def head(self, k: int) -> DraftTree:
        """The first k nodes (a tree too: parents come first)."""
        return DraftTree(self.tokens[:k], self.parents[:k], self.depth[:k], self.prob[:k])

    def ancestry(self, q: int) -> list[list[bool]]:
        """[q, q]: row i is True at column i's ancestors and itself (column 0 the root, then
        the nodes, then padding up to q columns, which sees only itself)."""
        rows = [[i == j for j in range(q)] for i in range(q)]
        for i, parent in enumerate(self.parents, 1):
            rows[i] = rows[parent].copy()  # parents come first: their rows are done
            rows[i][i] = True
        return rows

    def children(self) -> list[list[int]]:
        """Per column (root included), the columns of its children in order."""
        kids: list[list[int]] = [[] for _ in range(len(self.tokens) + 1)]
        for i, p in enumerate(self.parents):
            kids[p].append(i + 1)
        return kids


class Drafter:
    """Draft source: n-gram counts over token sequences and the model's recycled top-k."""

    def __init__(self, config: SpecConfig) -> None:
        self.cfg = config
        self.sizes = tuple(sorted(set(config.ngram), reverse=True))
        self.span = self.sizes[0]
        self.table: dict[tuple[int, ...], dict[int, int]] = {}  # n tokens -> {next: count}
        self.recycled: dict[int, tuple[int, ...]] = {}  # token -> model's top-k after it
        self.seen: set[int] = set()  # ids of the nodes already counted
        self.wb, self.fan = WB, FAN
        self.prior: tuple[float, ...] = RECYCLED_PRIOR

    def add(self, context: Sequence[int], tokens: Sequence[int]) -> None:
        """Count the n-grams that end in `tokens` (context: the tokens before them)."""
        seq = [*context[-self.span:], *tokens]
        table = self.table
        for i in range(len(seq) - len(tokens), len(seq)):
            nxt = seq[i]
            for n in self.sizes:
                if n <= i:
                    counts = table.setdefault(tuple(seq[i - n:i]), {})
                    counts[nxt] = counts.get(nxt, 0) + 1

    def add_trees(self, nodes: Iterable[Node]) -> None:
        """Count every node not counted yet in the trees of `nodes` (the whole tree under
        each root: siblings and cousins too)."""
        if len(self.table) > self.cfg.table_limit:
            self.table.clear()
            self.seen.clear()
        stack: list[tuple[Node, tuple[int, ...]]] = [
            (root, ()) for root in {n.root.id: n.root for n in nodes}.values()]
        while stack:
            node, before = stack.pop()
            own = node.prompt_ids if node.step is None else node.step.token_ids
            if node.id not in self.seen:
                self.seen.add(node.id)
                self.add(before, own)
            tail = (before + tuple(own))[-self.span:]
            stack.extend((child, tail) for child in node.children)

    def recycle(self, fed: Sequence[int], candidates: Sequence[Sequence[int]]) -> None:
        self.recycled.update(zip(fed, map(tuple, candidates)))

    # -- trees --------------------------------------------------------------------------
    def candidates(self, ctx: Sequence[int]) -> list[tuple[int, float]]:
        """The likeliest next tokens after `ctx` with estimated probabilities, best first.

        Witten-Bell interpolation, longest context first: a matching context seen N times
        with T distinct next tokens gives each next token count / (N + WB * T) and passes
        the remaining WB * T / (N + WB * T) on to the next shorter match, and at the end to
        the recycled top-k after the last token (RECYCLED_PRIOR by rank)."""
        out: dict[int, float] = {}
        mass = 1.0
        for n in self.sizes:
            counts = self.table.get(tuple(ctx[-n:])) if n <= len(ctx) else None
            if counts:
                total = sum(counts.values()) + self.wb * len(counts)
                for t, c in counts.items():
                    out[t] = out.get(t, 0.0) + mass * c / total
                mass *= self.wb * len(counts) / total
        for t, p in zip(self.recycled.get(ctx[-1], ()) if ctx else (), self.prior):
            out[t] = out.get(t, 0.0) + mass * p
        return sorted(out.items(), key=lambda tp: -tp[1])[:self.fan]

    def tree(self, context: Sequence[int], budget: int, depth: int, min_prob: float = 0.0,
             fan: int | None = None) -> DraftTree:
        """Up to `budget` nodes, at most `depth` deep, to follow `context`: best-first by
        estimated path probability, none below `min_prob`, at most `fan` children a node
        (None: `candidates`' FAN; 1: a chain)."""
        span = self.span
        ctxs = [list(context[-span:])]  # per column (root first): the last span tokens
        out = DraftTree([], [], [], [])
        heap: list[tuple[float, int, int, int, int]] = []  # (-path prob, order, parent, token, depth)
        order = itertools.count()  # ties: the first offered first

        def offer(col: int, prob: float, d: int) -> None:
            for t, p in self.candidates(ctxs[col])[:fan]:
                if prob * p < min_prob:
                    break
                heapq.heappush(heap, (-prob * p, next(order), col, t, d + 1))

        offer(0, 1.0, 0)
        while heap and len(out) < budget:
            neg, _, parent, token, d = heapq.heappop(heap)
            out.tokens.append(token)
            out.parents.append(parent)
            out.depth.append(d)
            out.prob.append(-neg)
            ctxs.append([*ctxs[parent][1 - span:], token] if span > 1 else [token])
            if d < depth:
                offer(len(out), -neg, d)
        return out

    def draft(self, context: Sequence[int], k: int) -> list[int]:
        """Up to k tokens to follow `context`: a chain, the tree of one child a node (each
        the likeliest candidate after the chain so far, no threshold)."""
        return self.tree(context, k, k, fan=1).tokens


# -- acceptance walks: from the root, one verification's outputs -> the accepted columns ---
def walk(tree: DraftTree, pick: Callable[[int, list[int]], int | None]) -> list[int]:
    """The accepted columns, root first: from each accepted column c on, the child that
    pick(c, c's children in order) accepts, until it accepts none."""
    kids, path = tree.children(), [0]
    while (nxt := pick(path[-1], kids[path[-1]])) is not None:
        path.append(nxt)
    return path


def greedy_path(tree: DraftTree, best: Sequence[int]) -> list[int]:
    """best[c]: the model's argmax after column c (0: the root) -> the accepted columns,
    root first: at each node, the child holding the argmax (siblings are distinct tokens),
    until none does. The token emitted after them is best[path[-1]]: plain decoding's."""
    return walk(tree, lambda col, kids: next(
        (c for c in kids if tree.tokens[c - 1] == best[col]), None))


def sampled_path(tree: DraftTree, px: Sequence[float], u: Sequence[float]) -> list[int]:
    """Multi-candidate speculative sampling with point-mass drafts (SpecInfer, Miao et al.,
    arXiv:2305.09781; the draft trees of STAND and Token Recycling): px[i] the model's
    probability of node i's token after its parent, u[i] a uniform per node -> the accepted
    columns, root first.

    At a node with children x1..xm (distinct tokens, in order): accept x1 with p(x1); if
    rejected, p loses x1 (renormalised) and x2 is accepted with p(x2) / (1 - p(x1)), and so
    on. Each child is thus drawn with exactly its probability under p, and if every child is
    rejected the caller draws from p without them (the residual): the next token is p's.
    From an accepted child the walk repeats; at the end the caller draws from p at the last
    accepted node (without its children's tokens if it has any)."""
    def pick(_: int, kids: list[int]) -> int | None:
        tried, seen = 0.0, set()
        for c in kids:
            x, token = px[c - 1], tree.tokens[c - 1]
            if token in seen:  # a duplicate sibling has no mass left (never built so)
                continue
            if u[c - 1] * (1.0 - tried) < x:
                return c
            tried += x
            seen.add(token)
        return None

    return walk(tree, pick)
