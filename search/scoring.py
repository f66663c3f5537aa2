"""The scorer contract shared by PRMs, ORMs and verifiers, and scorers by name.

The core holds the contract (Scorer, KEY, score_nodes; aggregation in search.aggregate) and
the registry of scorer factories (SCORERS, a search.plugins.Registry) with its own free
scorer, "logprob" (search.logprob), so the default path runs with no plug-in loaded; the
plug-ins that implement the others (rewards) add theirs when search.plugins loads them, and
another package adds one by an entry point in the group "tts_search.scorers" (name =
"module:factory"), so the core never imports them. A factory is called as factory(engine=)
(the generator engine, which it may ignore) and returns a Scorer that names itself (its
`name` attribute; the registry does not rename it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from search.budget import BudgetReached, Meter
from search.plugins import Registry, resolve
from search.session import shares
from search.types import Node, Problem


@runtime_checkable
class Scorer(Protocol):
    """score(problem, nodes) -> one float per node, for the node's latest step (a PRM) or,
    at a finished leaf, for the whole solution (an ORM/verifier). Higher is better.
    That is all a scorer needs: the core counts its calls, one per node (score_nodes), and
    keeps it within the budget. A scorer that runs a model or counts its own calls derives
    from search.session.Bindable: each search then scores through its view
    (`scorer.bind(session)`) and the view charges everything it costs to its session's
    meter, calls included (`self.meter.charge_scorer(calls=..., tokens=..., flops=...)`);
    the core then counts nothing for it.

    Two optional attributes describe it (read through `path_agg` and `name` below):
      path_agg  how a path's score is formed from its step scores, a search.aggregate
                name: the default of every algorithm's `agg` knob. "last" (the default for
                a scorer that does not say) reads the leaf alone: right for outcome
                verifiers, which score a finished solution, and for value estimates.
      name      what records and Result.selected_by call it (default: its class name).
    """

    def score(self, problem: Problem, nodes: Sequence[Node]) -> list[float]: ...


KEY = "reward"  # the scorer's value of a node: Node.scores.reward (its name in flat scores)


def path_agg(scorer: Scorer) -> str:
    """The aggregation a scorer declares for its paths (see Scorer), "last" if none."""
    return str(getattr(scorer, "path_agg", "last"))


def name(scorer: Scorer) -> str:
    """The scorer's name (its registry name when it has one)."""
    return str(getattr(scorer, "name", "") or type(scorer).__name__)


def implicit(scorer: Scorer) -> bool:
    """True for the scorer `search.solve` supplies when the caller names none (the free
    log-probability scorer, marked so): searches that can do without one (best_of_n's
    vote) then choose without it."""
    return bool(getattr(scorer, "implicit", False))


def score_nodes(scorer: Scorer, problem: Problem, nodes: Sequence[Node], key: str = KEY, *,
                meter: Meter | None) -> list[float]:
    """Score the nodes that have no value yet, store the values, return all nodes' values.

    The value is stored as Node.scores.reward (key KEY), or under another `key` in
    Node.scores.extras. A scorer returning the wrong count is a bug and raises; a NaN or
    infinite score is recorded as a failure (scores.invalid) and ranks as -inf, so nothing
    already computed is lost.

    The calls are charged to the search's `meter` (None: nothing is counted or limited) one
    way per scorer (see Scorer): a Bindable scorer's view charges them itself (the sandbox's
    unit_tests charges a program's run once, however many nodes share it); for any other
    scorer the core charges one call per node scored, so a plain scorer needs no meter.
    The limits hold here: only as many nodes as calls are left are scored (none once the
    seconds are up or the FLOPs spent; Meter.scorer_room); a node the budget leaves
    unscored (an empty step the budget cut before its first token is never scored) is
    marked so (scores.unscored) and reads -inf.
    """
    todo = [n for n in nodes if _stored(n, key) is None]
    for node in [n for n in todo if _empty(n)]:  # nothing to score: the budget gave it no token
        node.scores.unscored = True
        _put(node, key, -math.inf)
    todo = [n for n in todo if not _empty(n)]
    room = len(todo) if meter is None else meter.scorer_room(len(todo))
    values = None
    if room:
        try:
            values = list(scorer.score(problem, todo[:room]))
        except BudgetReached:  # a model scorer's forward would pass a limit: none scored
            pass
        else:
            _store(scorer, todo[:room], values, key)
            if meter is not None and not shares(scorer):  # a view charged its own calls
                meter.charge_scorer(calls=room)
    for node in todo[0 if values is None else room:]:  # what the budget left unscored
        node.scores.unscored = True
        _put(node, key, -math.inf)
    return [reward(n, key) for n in nodes]


def _store(scorer: Scorer, nodes: Sequence[Node], values: list[Any], key: str) -> None:
    if len(values) != len(nodes):
        raise ValueError(f"{type(scorer).__name__}.score returned {len(values)} scores "
                         f"for {len(nodes)} nodes")
    for node, v in zip(nodes, values):
        v = float(v)
        if not math.isfinite(v):
            node.scores.invalid = True
            v = -math.inf
        _put(node, key, v)


def _empty(node: Node) -> bool:
    """An empty step the budget ended before its first token (stop reason "budget")."""
    return node.step is not None and not node.step.token_ids and \
        node.step.stop_reason == "budget"


def _put(node: Node, key: str, value: float) -> None:
    if key == KEY:
        node.scores.reward = value
    else:
        node.scores.extras[key] = value


def _stored(node: Node, key: str) -> float | None:
    return node.scores.reward if key == KEY else node.scores.extras.get(key)


def reward(node: Node, key: str = KEY) -> float:
    """The node's stored score (KeyError if it was never scored)."""
    value = _stored(node, key)
    if value is None:
        raise KeyError(f"node {node.id} has no {key!r} score")
    return value


# -- scorers by name: the core's logprob, and what the plug-ins add -----------------------------
# name -> factory(engine=None) -> Scorer
SCORERS: Registry[Callable[..., Scorer]] = Registry("scorers", "scorer",
                                                    {"logprob": "search.logprob:make"})
# name -> check(problem, model name) raising what the scorer needs and lacks (a gold answer,
# a value head next to the model), run before any model loads (search.api.check_scorer)
CHECKS: dict[str, Callable[[Problem, str], None]] = {}
# loaders of a scorer given by path (a PRM folder, embedded name or hub id: parse)
_PATH_LOADERS: list[Callable[[str], Scorer]] = []


def register(name: str, factory: Callable[..., Scorer], *,
             check: Callable[[Problem, str], None] | None = None) -> None:
    """Make `factory(engine=None) -> Scorer` the scorer called `name`; `check(problem,
    model)` raises a clear error where that scorer cannot work, without loading anything."""
    SCORERS.add(name, factory)
    if check is not None:
        CHECKS[name] = check


@dataclass(frozen=True)
class Factory:
    """factory(engine=None) -> Scorer for the class or function at `target` ("module:attr",
    imported on the first call), made as make() or, with `engine`, as make(engine)."""

    target: str
    engine: bool = False

    def __call__(self, engine: Any = None) -> Scorer:
        if self.engine and engine is None:
            raise ValueError(f"scorer {self.target.rpartition(':')[2]} needs the generator engine")
        return resolve(self.target)(engine) if self.engine else resolve(self.target)()


M = TypeVar("M", bound=Callable[..., Any])


def registered_as(*names: str, check: Callable[[Problem, str], None] | None = None,
                  engine: bool = False) -> Callable[[M], M]:
    """Decorator form of register: the decorated class or function (a Factory: make() or,
    with `engine`, make(engine)) is the scorer called each of `names`. rewards.scorers reads
    these decorators in its modules' source, so nothing is imported before it is used."""
    def declare(make: M) -> M:
        target = f"{make.__module__}:{make.__qualname__}"
        for each in names:
            register(each, Factory(target, engine), check=check)
        return make

    return declare


def register_path_loader(loader: Callable[[str], Scorer]) -> None:
    """Make `loader(path)` load the scorers that parse reads as a PRM ("prm:..." or "org/name")."""
    if loader not in _PATH_LOADERS:
        _PATH_LOADERS.append(loader)


def known() -> dict[str, str | Callable[..., Scorer]]:
    """Every registered scorer by name (the live table), after loading the plug-ins and
    reading the entry points."""
    return SCORERS.entries()


PRM_PREFIX = "prm:"  # a scorer spec naming a PRM: "prm:<folder, embedded name or hub id>"


@dataclass(frozen=True)
class ScorerSpec:
    """A scorer given by string, read (parse): exactly one of the two is set."""

    name: str | None = None  # a registered scorer ("steps", "value", ...)
    prm: str | None = None   # a PRM to load: its folder, embedded name or hub id


def parse(spec: str) -> ScorerSpec:
    """The one reading of a scorer string: a registered name is that scorer; otherwise
    "prm:<path or name>", or a string holding a "/" ("org/name", "./my-prm"), is a PRM to
    load; anything else is the registry's unknown-scorer ValueError (the known names, the
    close ones). Loads nothing but the plug-ins."""
    if spec in SCORERS:
        return ScorerSpec(name=spec)
    path = spec.removeprefix(PRM_PREFIX)
    if spec.startswith(PRM_PREFIX) or "/" in path:
        return ScorerSpec(prm=path)
    raise SCORERS.unknown(spec, also=", or a PRM path")


def prm_spec(path: str) -> str:
    """The scorer string naming the PRM at `path` (parse reads it back as ScorerSpec(prm=))."""
    return PRM_PREFIX + path


def load(name: str, *, engine: Any = None) -> Scorer:
    """A scorer by registry name or PRM path/id (parse); `engine` goes to scorers that
    reuse it."""
    spec = parse(name)
    if spec.name is not None:
        return SCORERS.get(spec.name)(engine=engine)
    if not _PATH_LOADERS:
        raise SCORERS.unknown(name, also=", or a PRM path")
    return _PATH_LOADERS[-1](str(spec.prm))
