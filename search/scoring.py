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
CHECKS: Registry[Callable[[Problem, str], None]] = Registry("scorer_checks", "scorer check")
# loaders of a scorer given by path (a PRM folder, embedded name or hub id: parse), called
# as loader(path, **ScorerSpec.options())
_PATH_LOADERS: list[Callable[..., Scorer]] = []
# checks of a PRM spec's options that load nothing (a format name no row has), run by
# check_prm before any model loads
_PRM_CHECKS: list[Callable[[ScorerSpec], None]] = []


def register(name: str, factory: Callable[..., Scorer], *,
             check: Callable[[Problem, str], None] | str | None = None) -> None:
    """Make `factory(engine=None) -> Scorer` the scorer called `name`; `check(problem,
    model)` (the function, or its "module:function") raises a clear error where that scorer
    cannot work, without loading anything."""
    SCORERS.add(name, factory)
    if check is not None:
        CHECKS.add(name, check)


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


def register_path_loader(loader: Callable[..., Scorer], *,
                         check: Callable[[ScorerSpec], None] | None = None) -> None:
    """Make `loader(path, **options)` load the scorers that parse reads as a PRM ("prm:..."
    or "org/name"; options: ScorerSpec.options(), given only when the spec says them), and
    `check(spec)` refuse what it cannot load without loading anything."""
    if loader not in _PATH_LOADERS:
        _PATH_LOADERS.append(loader)
    if check is not None and check not in _PRM_CHECKS:
        _PRM_CHECKS.append(check)


def check_prm(spec: ScorerSpec) -> None:
    """Run the registered checks of a PRM spec (loads no model)."""
    for check in _PRM_CHECKS:
        check(spec)


def known() -> dict[str, str | Callable[..., Scorer]]:
    """Every registered scorer by name (the live table), after loading the plug-ins and
    reading the entry points."""
    return SCORERS.entries()


PRM_PREFIX = "prm:"  # a scorer spec naming a PRM: "prm:<folder, embedded name or hub id>"
# what a PRM spec may add after its path, ",key=value" each: the format it is read in
# (rewards.prm_formats: math-shepherd, qwen-prm, rlhflow, trl, value-head, declared) and
# whether the checkpoint's own code may run (Qwen2.5-Math-PRM's class ships as such code)
PRM_OPTIONS = ("format", "trust_remote_code")
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


@dataclass(frozen=True)
class ScorerSpec:
    """A scorer given by string, read (parse): exactly one of name and prm is set."""

    name: str | None = None  # a registered scorer ("steps", "value", ...)
    prm: str | None = None   # a PRM to load: its folder, embedded name or hub id
    format: str | None = None  # the PRM's format (None: declared or read off the checkpoint)
    trust_remote_code: bool = False

    def options(self) -> dict[str, Any]:
        """The PRM's loading options as keywords (only those given)."""
        out: dict[str, Any] = {}
        if self.format is not None:
            out["format"] = self.format
        if self.trust_remote_code:
            out["trust_remote_code"] = True
        return out


def parse(spec: str) -> ScorerSpec:
    """The one reading of a scorer string: a registered name is that scorer; otherwise
    "prm:<path or name>[,format=NAME][,trust_remote_code=true]", or a string holding a "/"
    ("org/name", "./my-prm"), is a PRM to load; anything else is the registry's
    unknown-scorer ValueError (the known names, the close ones). Loads nothing but the
    plug-ins."""
    if spec in SCORERS:
        return ScorerSpec(name=spec)
    path = spec.removeprefix(PRM_PREFIX)
    if spec.startswith(PRM_PREFIX) or "/" in path:
        path, *extra = path.split(",")
        options = dict(_option(spec, part) for part in extra)
        trust = options.get("trust_remote_code", "false")
        if trust not in _TRUE + _FALSE:
            raise ValueError(f"{spec!r}: trust_remote_code is true or false, got {trust!r}")
        return ScorerSpec(prm=path.strip(), format=options.get("format"),
                          trust_remote_code=trust in _TRUE)
    raise SCORERS.unknown(spec, also=", or a PRM path")


def _option(spec: str, part: str) -> tuple[str, str]:
    key, eq, value = (x.strip() for x in part.partition("="))
    if not eq or key not in PRM_OPTIONS or not value:
        raise ValueError(f"{spec!r}: after a PRM's path come ',key=value' options, key one of "
                         f"{', '.join(PRM_OPTIONS)}; got {part!r}")
    return key, value.lower() if key == "trust_remote_code" else value


def prm_spec(path: str, *, format: str | None = None, trust_remote_code: bool = False) -> str:
    """The scorer string naming the PRM at `path` read in `format` (parse reads it back)."""
    return PRM_PREFIX + path + (f",format={format}" if format else "") + \
        (",trust_remote_code=true" if trust_remote_code else "")


def load(name: str, *, engine: Any = None) -> Scorer:
    """A scorer by registry name or PRM path/id (parse); `engine` goes to scorers that
    reuse it."""
    spec = parse(name)
    if spec.name is not None:
        return SCORERS.get(spec.name)(engine=engine)
    if not _PATH_LOADERS:
        raise SCORERS.unknown(name, also=", or a PRM path")
    return _PATH_LOADERS[-1](str(spec.prm), **spec.options())
