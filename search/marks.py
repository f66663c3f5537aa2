"""What a search writes on a tree node (Node.scores): the values every search shares, named
and typed; each algorithm's own values (a Mark defined in the algorithm's module, kept under
the algorithm's key); and a dict for the values the core does not name.

The shared fields are None (False for the flags) until a search writes them; each is written
by one part of the core, named beside it. A Mark is a small dataclass an algorithm defines
next to its code (A*'s cost, g and f: search.algos.astar.AStarMark; MCTS's visits and Q:
search.algos.mcts.MctsMark; ...): `scores.of(AStarMark)` is the node's A* mark (made on
first use), `scores.get(AStarMark)` the same or None. `extras` holds the rest: a scorer's
values stored under their own key (search.scoring.score_nodes(..., key=...)), a caller's notes.

flat() is the one mapping every serialisation of a tree prints (the viewer, GraphML, networkx,
the determinism dumps): {name: float}, the shared fields that are set (FIELDS order), then
each mark's set fields (field order; marks in the order they were first written), then the
extras in the order written. Ids, counts and flags are ints and bools here and floats there,
as trees have always been written out.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import ClassVar, TypeVar


def _set_values(obj: object, names: tuple[str, ...]) -> dict[str, float]:
    """{name: float(value)} of the named attributes that are set (neither None nor False)."""
    out: dict[str, float] = {}
    for name in names:
        value = getattr(obj, name)
        if value is not None and value is not False:
            out[name] = float(value)
    return out


class Mark:
    """An algorithm's own values on a node. Subclass it as a dataclass (every field None or
    False until written) in the algorithm's module, with `key` = the algorithm's name."""

    __slots__ = ()
    key: ClassVar[str]

    def flat(self) -> dict[str, float]:
        """{field: value as a float} of the fields that are set, in field order."""
        return _set_values(self, tuple(f.name for f in fields(self)))  # type: ignore[arg-type]


M = TypeVar("M", bound=Mark)


@dataclass(slots=True)
class Scores:
    """A node's values. None: not written (the node was not scored, merged, ...)."""

    # search.algos._stepwise.merge_equal: duplicate samples of one state
    copies: int | None = None  # how many equal samples this node stands for (1 if alone)
    invalid: bool = False  # score_nodes: the scorer gave NaN or inf (reward is then -inf)
    unscored: bool = False  # score_nodes: the budget left no scorer call for it (-inf)
    reward: float | None = None  # score_nodes: the scorer's value of the node
    # merge_equal: the id of the sample that stands for this one (a duplicate, never scored)
    merged_into: int | None = None
    marks: dict[str, Mark] = field(default_factory=dict)  # the algorithms' own, by key
    extras: dict[str, float] = field(default_factory=dict)

    def get(self, kind: type[M]) -> M | None:
        """The node's mark of that kind, or None if its algorithm wrote none."""
        mark = self.marks.get(kind.key)
        if mark is not None and not isinstance(mark, kind):
            raise TypeError(f"the mark under {kind.key!r} is a {type(mark).__name__}, "
                            f"not a {kind.__name__}")
        return mark

    def of(self, kind: type[M]) -> M:
        """The node's mark of that kind, made (every field unset) if there is none yet."""
        mark = self.get(kind)
        if mark is None:
            mark = self.marks[kind.key] = kind()
        return mark

    def flat(self) -> dict[str, float]:
        """{name: value as a float}: the shared fields that are set (FIELDS order), each
        mark's, then extras. A name printed twice would hide a value: that is an error."""
        out = _set_values(self, FIELDS)
        for mark in self.marks.values():
            values = mark.flat()
            if clash := out.keys() & values.keys():
                raise ValueError(f"{type(mark).__name__} writes {sorted(clash)}, which "
                                 "another part of the node's scores already holds")
            out.update(values)
        out.update(self.extras)
        return out


FIELDS = tuple(f.name for f in fields(Scores) if f.name not in ("marks", "extras"))
