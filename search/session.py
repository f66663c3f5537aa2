"""A Session: what one search owns while engines and scorers are shared.

`search.solve` starts one Session per search: its meter (and through it the budget), its KV
scope (the search trees it has cached, in any model's KV store: what its `retain` may free)
and its cancel event (set by the driver of many searches when it is interrupted). Engines and
scorers receive it explicitly: `part.bind(session)` is the part as that search uses it (a
`Bindable`'s view), and every charge, every KV entry and every scheduler job of that view
goes to that session. Nothing is looked up by which thread is calling, so several searches
in several threads (search.solve_many, the eval runner) share one engine and one scorer and
each is charged exactly what it spent.
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, TypeVar

from search.budget import Meter
from search.types import Budget, Node

P = TypeVar("P")


class KVScope:
    """The search trees (their roots) of one search: those its engine made (`add`, from
    Engine.root) and those it has cached in any model's KV store (search.runtime.kvtree).
    `retain` under this scope frees segments of these trees only; the progress line reads
    them. Weak: a tree nobody holds leaves the scope with its segments."""

    __slots__ = ("roots", "__weakref__")

    def __init__(self) -> None:
        self.roots: weakref.WeakSet[Node] = weakref.WeakSet()

    def add(self, root: Node) -> Node:
        """Record a tree of this search; returns its root."""
        self.roots.add(root)
        return root


@dataclass(frozen=True, eq=False)
class Session:
    """One search's own state, handed to the engine and scorer it uses (see module doc).

    meter: what the search has spent, and its budget (Meter.budget).
    kv: the trees it has cached (KVScope).
    cancel: once set, the search's model work ends at its next forward and its later calls
        raise search.runtime.sched.Interrupted (a driver sets it on Ctrl-C).
    """

    meter: Meter = field(default_factory=Meter)
    kv: KVScope = field(default_factory=KVScope)
    cancel: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def start(cls, budget: Budget | None = None, *, cancel: threading.Event | None = None,
              stop: threading.Event | None = None) -> Session:
        """A fresh session with a fresh meter for `budget` (and the driver's cancel event;
        `stop`: the meter's, which ends the search as a limit would: search.solve's
        `interrupt`)."""
        return cls(Meter(budget, stop=stop),
                   cancel=threading.Event() if cancel is None else cancel)

    @property
    def budget(self) -> Budget:
        return self.meter.budget

    def charging(self, meter: Meter) -> Session:
        """The same search charging another meter (a sub-meter, a scratch count): same KV
        scope, same cancel event."""
        return dataclasses.replace(self, meter=meter)


class Bindable:
    """Base of the engines and scorers that several searches share: each search uses
    `part.bind(session)`, a view of the part that has every attribute of the part (one
    shared instance dict: the model, the KV store, the caches, the counters, whatever a
    method learns and sets) but its own `session`, which its methods charge (`self.meter`),
    cache under (`self.session.kv`) and stop by. The part itself (unbound) has a session of
    its own, made on first use: direct calls (tests, benchmarks) charge `part.meter`.
    A subclass keeps an instance dict (it declares no __slots__ of its own)."""

    __slots__ = ("_session",)  # the one per-view attribute; everything else is shared

    @property
    def session(self) -> Session:
        try:
            return self._session
        except AttributeError:
            self._session = Session()
            return self._session

    @property
    def meter(self) -> Meter:
        """The meter this view charges: its session's."""
        return self.session.meter

    def __getstate__(self) -> dict[str, Any]:
        """What a copy or a pickle (a Ray worker's engine) keeps: the shared state, not the
        session (a copy starts with one of its own; a cancel event does not pickle)."""
        return self.__dict__

    def bind(self: P, session: Session) -> P:
        """This part as `session`'s search uses it (see the class doc)."""
        view = object.__new__(type(self))
        view.__dict__ = self.__dict__  # shared, so nothing a view sets is lost to the others
        view._session = session  # type: ignore[attr-defined]
        return view


def bind(part: P, session: Session) -> P:
    """`part` as `session`'s search uses it: its view where it is Bindable; a part that is
    not (a scorer that charges nothing itself) is used as it is."""
    return part.bind(session) if isinstance(part, Bindable) else part


def charging(part: P, meter: Meter) -> P:
    """`part`'s view that charges `meter` (same search: KV scope and cancel event kept);
    a part that is not Bindable is used as it is."""
    if not isinstance(part, Bindable):
        return part
    return part.bind(part.session.charging(meter))  # type: ignore[return-value]


def shares(part: Any) -> bool:
    """Whether several searches may share `part` and keep their charges apart."""
    return isinstance(part, Bindable)
