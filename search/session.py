"""A Session: what one search owns while engines and scorers are shared.

`search.solve` starts one Session per search: its meter (and through it the budget), its KV
scope (the search trees it has cached, in any model's KV store: dropped there when the
search ends) and its cancel event (set by the driver of many searches when it is interrupted). An
algorithm receives it (fn(problem, engine, scorer, session, ...)) and uses the engine and
scorer as that session's views (`bind(part, session)`, search.algos.Run.begin): every charge,
every KV entry and every scheduler job of a view goes to its session. That is the one route
by which a search's costs reach its meter. Nothing is looked up by which thread is calling, so
several searches in several threads (search.solve_many, the eval runner) share one engine and
one scorer and each is charged exactly what it spent.
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from search.budget import Meter, submeter
from search.types import Budget, Node

P = TypeVar("P")


class KVScope:
    """The search trees (their roots) of one search: those its engine made (`add`, from
    Engine.root) and those it has cached in any model's KV store (search.runtime.kvtree,
    listed in `stores`); the progress line reads them. `close` (the search's end) has every
    store drop these trees' KV. Weak: a tree nobody holds leaves the scope with its KV."""

    __slots__ = ("roots", "stores", "__weakref__")

    def __init__(self) -> None:
        self.roots: weakref.WeakSet[Node] = weakref.WeakSet()
        self.stores: weakref.WeakSet[Any] = weakref.WeakSet()  # each has release(scope)

    def close(self) -> None:
        """The search is over: every KV store drops its trees' KV (the trees themselves,
        a Result's, stay as they are)."""
        for store in list(self.stores):
            store.release(self)

    def add(self, root: Node) -> Node:
        """Record a tree of this search; returns its root."""
        self.roots.add(root)
        return root


@dataclass(frozen=True, eq=False)
class Session:
    """One search's own state, handed to the algorithm and, through their views, to the
    engine and scorer it uses (see module doc).

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
        """The same search charging another meter (a scratch count): same KV scope, same
        cancel event."""
        return dataclasses.replace(self, meter=meter)

    @contextmanager
    def within(self, budget: Budget) -> Iterator[Session]:
        """The same search on a sub-meter limited to `budget` for the block (the reserve's
        finishing, a delegated sub-search; search.budget.submeter): whatever was charged to
        it is then charged to this session's meter as well."""
        with submeter(self.meter, budget) as sub:
            yield self.charging(sub)


class Bindable:
    """Base of the engines and scorers that several searches share: each search uses
    `part.bind(session)`, a view of the part with its own `session`, which its methods
    charge (`self.meter`), cache under (`self.session.kv`) and stop by. A view's instance
    dict is the part's own dict object, so it reads every other attribute as the part has
    it (the model, the KV store, the caches, the counters) with a plain attribute read;
    its own fields are slots (`_session`, `_part`). It sets no attribute: what one search
    could set would be set for all, so a method that learns something for every search (a
    server's model name, a counter) sets it on `self.part`, the part itself. The part
    (unbound) has a session of its own, made on first use: direct calls (tests,
    benchmarks) charge `part.meter`. A subclass keeps an instance dict (it declares no
    __slots__ of its own)."""

    __slots__ = ("_session", "_part")  # _part: None on the part itself, the part on a view

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        del args, kwargs  # for __init__
        made = super().__new__(cls)
        object.__setattr__(made, "_part", None)
        return made

    def __setattr__(self, name: str, value: Any) -> None:
        if self._part is not None:
            raise AttributeError(f"a view of {type(self).__name__} sets no attribute "
                                 f"({name!r}): set it on the part (self.part.{name}), for "
                                 "every search, or keep it in the search's own state")
        object.__setattr__(self, name, value)

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

    @property
    def part(self: P) -> P:
        """The part itself: a view's part, or the part (unbound) itself."""
        part = self._part  # type: ignore[attr-defined]
        return self if part is None else part

    def __getstate__(self) -> dict[str, Any]:
        """What a copy or a pickle (a Ray worker's engine) keeps: the part's shared state,
        not the session (a copy is a part with a session of its own; a cancel event does
        not pickle)."""
        return self.part.__dict__

    def bind(self: P, session: Session) -> P:
        """The part as `session`'s search uses it (see the class doc); a view of that
        session already is itself."""
        if _is_view(self) and self.session is session:  # type: ignore[attr-defined]
            return self
        part = self.part  # type: ignore[attr-defined]
        view = object.__new__(type(self))
        object.__setattr__(view, "_part", part)
        object.__setattr__(view, "__dict__", part.__dict__)  # the same dict: shared reads
        object.__setattr__(view, "_session", session)
        return view


def _is_view(part: Bindable) -> bool:
    return part._part is not None


def bind(part: P, session: Session) -> P:
    """`part` as `session`'s search uses it: its view where it is Bindable; a part that is
    not (a scorer that charges nothing itself) is used as it is."""
    return part.bind(session) if isinstance(part, Bindable) else part


def shares(part: Any) -> bool:
    """Whether several searches may share `part` and keep their charges apart (and whether
    it charges its own costs: search.scoring.score_nodes)."""
    return isinstance(part, Bindable)
