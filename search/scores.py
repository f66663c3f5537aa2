"""What a search writes on a tree node (Node.scores): named, typed values, and a dict for the
values the core does not name.

Each field is None (False for the flags) until a search writes it, and each is written by one
part of the core, named beside it. `extras` holds the rest: a scorer's values stored under
their own key (search.scoring.score_nodes(..., key=...)), a caller's notes.

flat() is the one mapping every serialisation of a tree prints (the viewer, GraphML, networkx,
the determinism dumps): {name: float}, the fields that are set in FIELDS order, then the extras
in the order written. Ids, counts and flags are ints and bools here and floats there, as trees
have always been written out (FIELDS is the order in which the searches write them, so a
node's flat scores read as they were written).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Scores:
    """A node's values. None: not written (the node was not scored, popped, ...)."""

    # search.algos._stepwise.merge_equal: duplicate samples of one state
    copies: int | None = None  # how many equal samples this node stands for (1 if alone)
    invalid: bool = False  # score_nodes: the scorer gave NaN or inf (reward is then -inf)
    unscored: bool = False  # score_nodes: the budget left no scorer call for it (-inf)
    reward: float | None = None  # score_nodes: the scorer's value of the node
    lookahead: float | None = None  # beam: the scorer's value at the end of its rollout
    subtree: int | None = None  # dvts: the index of the subtree that generated the node
    group: int | None = None  # diverse_beam: the group that chose the node
    cost: float | None = None  # astar: sum of step costs c(r) from the root
    g: float | None = None  # astar: g of the node (sum, mean or last of the costs)
    f: float | None = None  # astar: g + h
    # the id of the node that holds this node's state: merge_equal (a duplicate sample, never
    # scored) or astar (a state reached again at lower g, or one already expanded)
    merged_into: int | None = None
    pop: int | None = None  # astar: the node's place in pop order (from 0)
    batch: int | None = None  # astar: the batch it was popped in (from 0)
    visits: float | None = None  # mcts: the visit count N (virtual losses included while live)
    q: float | None = None  # mcts: the mean backed-up value W / N
    log_weight: float | None = None  # _smc: a particle's log-weight when it finished
    reference: int | None = None  # particle_gibbs: the pass after which it was the reference
    rpc_p: float | None = None  # rpc: length-normalised path probability
    rpc_low: float | None = None  # rpc: posterior of the mixture's low component
    rpc_pruned: bool = False  # rpc: pruned (offline, or stopped live)
    extras: dict[str, float] = field(default_factory=dict)

    def flat(self) -> dict[str, float]:
        """{name: value as a float}: the fields that are set (FIELDS order), then extras."""
        out: dict[str, float] = {}
        for name in FIELDS:
            value = getattr(self, name)
            if value is not None and value is not False:
                out[name] = float(value)
        out.update(self.extras)
        return out


FIELDS = tuple(name for name in Scores.__dataclass_fields__ if name != "extras")
