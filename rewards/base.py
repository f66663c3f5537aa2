"""The scorer protocol shared by PRMs, ORMs and verifiers."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from search.budget import Meter
from search.types import Node, Problem


@runtime_checkable
class Scorer(Protocol):
    """score(problem, nodes) -> one float per node, for the node's latest step (a PRM) or,
    at a finished leaf, for the whole solution (an ORM/verifier). Higher is better.
    Each scorer charges `meter` (scorer calls, tokens, FLOPs)."""

    meter: Meter

    def score(self, problem: Problem, nodes: Sequence[Node]) -> list[float]: ...


KEY = "reward"  # where algorithms store a scorer's value in Node.scores


def score_nodes(scorer: Scorer, problem: Problem, nodes: Sequence[Node], key: str = KEY
                ) -> list[float]:
    """Score the nodes that have no `key` yet, store the values, return all nodes' values.

    A scorer returning the wrong count is a bug and raises; a NaN or infinite score is
    recorded as a failure (scores["invalid"] = 1) and ranks as -inf, so nothing already
    computed is lost.
    """
    todo = [n for n in nodes if key not in n.scores]
    if todo:
        values = list(scorer.score(problem, todo))
        if len(values) != len(todo):
            raise ValueError(f"{type(scorer).__name__}.score returned {len(values)} scores "
                             f"for {len(todo)} nodes")
        for node, v in zip(todo, values):
            v = float(v)
            if not math.isfinite(v):
                node.scores["invalid"] = 1.0
                v = -math.inf
            node.scores[key] = v
    return [n.scores[key] for n in nodes]
