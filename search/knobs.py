"""Algorithm knobs, checked (and parsed from command-line text) before any model loads.

An algorithm's knobs are its keyword-only parameters, `seed` excepted (solve's own argument).
`check(fn, knobs)` runs three layers, each saying what was wrong and what is allowed:
  1. names: a knob the function does not take is a TypeError ("did you mean ...");
  2. types: a value must match its parameter's annotation (int, float, bool, str,
     Sequence[str], X | None, ...; an int is a float, a bool is not an int): TypeError;
  3. values: the COMMON rules of knobs that mean the same in every algorithm (temperature,
     top_p, select, agg, token caps, ...), then the algorithm's own, declared on its function
     with @rules(...) (m divides n, ...): ValueError.
@rules also runs these checks when the function is called directly, so each rule is written
once, next to the algorithm it belongs to; it records them, with the algorithm's other
declarations, on the function (search.traits). The algorithm returns what it found (an Outcome);
`run`, behind every call (@rules, search.solve), builds the Result from it once, with every
knob's actual value. `parse` turns "8", "0.5", "true", "none", "[1, 2]" or "vote" into the
annotation's type first (the CLI and the eval runner's --knob).

A knob group (a frozen dataclass deriving from Group: the step sampler, Sampler in
search/algos/_stepwise.py) is one keyword-only parameter of the function and several knobs
by their own names: its init fields, at the parameter's place, with the parameter's default
as their defaults. Callers give them flat (solve(..., temperature=0.5)); the call folds them
into the group's object (`fold`), and the Result records them flat.

A renamed knob (RENAMED: max_steps is max_depth, the depth limit's one name) is accepted
under its old name for one release, with a DeprecationWarning (`upgrade`).
"""

from __future__ import annotations

import ast
import collections.abc
import difflib
import functools
import inspect
import json
import sys
import typing
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any, ParamSpec

from search.fit import Width
from search.knobtypes import Group, conforms, describe
from search.session import Session
from search.traits import declare, traits
from search.types import Outcome, Result

P = ParamSpec("P")
NOT_KNOBS = ("seed",)  # keyword-only, but solve's own argument
# names a caller may take for a knob that are solve's own arguments (or part of one): the
# argument they mean, for the error's hint
SOLVE_ARGUMENTS = {"model": "engine=", "engine": "engine=", "scorer": "scorer=",
                   "budget": "budget=", "tokens": "budget=Budget(tokens=...)",
                   "seconds": "budget=Budget(seconds=...)",
                   "scorer_calls": "budget=Budget(scorer_calls=...)",
                   "flops": "budget=Budget(flops=...)", "algo": "algo=",
                   "algorithm": "algo=", "progress": "progress=", "cancel": "cancel=",
                   "problem": "problem (the first argument)"}
# a knob's old name -> its name now: the old one is accepted, with a DeprecationWarning, until
# the next release
RENAMED = {"max_steps": "max_depth"}


@dataclass(frozen=True)
class Rule:
    """`ok(*values of names)` must hold; `says` is the requirement as a clause ("m must
    divide n"), or a function making it when the message is made. A rule whose
    knobs an algorithm lacks, or whose values include None (an allowed "off"), is skipped."""

    names: tuple[str, ...]
    ok: Callable[..., bool]
    says: str | Callable[[], str]

    @property
    def words(self) -> str:
        return self.says() if callable(self.says) else self.says

    def fails(self, values: Mapping[str, Any]) -> str | None:
        """None when the rule holds, else why not (with the error `ok` raised, if any)."""
        got = ", ".join(f"{n}={values[n]!r}" for n in self.names)
        try:
            if self.ok(*[values[n] for n in self.names]):
                return None
        except Exception as err:  # the check itself refused the value (a malformed table...)
            return f"{self.words} (got {got}: {type(err).__name__}: {err})"
        return f"{self.words} (got {got})"


def at_least(low: float, *names: str) -> tuple[Rule, ...]:
    return tuple(Rule((n,), lambda v: v >= low, f"{n} must be >= {low:g}") for n in names)


def above(low: float, *names: str) -> tuple[Rule, ...]:
    return tuple(Rule((n,), lambda v: v > low, f"{n} must be > {low:g}") for n in names)


def within(low: float, high: float, name: str) -> Rule:
    return Rule((name,), lambda v: low <= v <= high, f"{name} must be between {low:g} and {high:g}")


def divides(small: str, big: str) -> Rule:
    return Rule((small, big), lambda a, b: b % a == 0, f"{small} must divide {big}")


def one_of(name: str, choices: Iterable[str] | Callable[[], Iterable[str]]) -> Rule:
    """name is one of `choices` (or of choices() read when checked: a registry that plug-ins
    extend)."""
    def allowed() -> list[str]:
        return sorted(choices() if callable(choices) else choices)

    return Rule((name,), lambda v: v in allowed(),
                lambda: f"{name} must be one of {', '.join(map(repr, allowed()))}")


def _aggregates() -> Iterable[str]:
    from search.aggregate import AGGREGATES

    return AGGREGATES


def _selections() -> Iterable[str]:
    from search.select import SELECTIONS

    return SELECTIONS


def _resamplers() -> Iterable[str]:
    from search.resample import RESAMPLERS

    return RESAMPLERS


# knobs that mean the same wherever they appear
COMMON: dict[str, tuple[Rule, ...]] = {
    "temperature": at_least(0, "temperature"),
    "top_p": (Rule(("top_p",), lambda v: 0 < v <= 1, "top_p must be in (0, 1]"),),
    "select": (one_of("select", _selections),),
    "agg": (one_of("agg", _aggregates),),
    "resample": (one_of("resample", _resamplers),),
    **{cap: at_least(1, cap) for cap in ("step_tokens", "max_tokens", "max_depth",
                                         "chunk_tokens", "horizon", "iterations")},
}


def rules(*declared: Rule | tuple[Rule, ...], width: Width | None = None,
          scale: Width | str | None = "width",
          scorer: bool | Callable[[Mapping[str, Any]], bool] = True,
          deterministic: bool = False, depth_limit: bool = True,
          scores_as_it_goes: bool = False
          ) -> Callable[[Callable[P, Outcome]], Callable[P, Result]]:
    """Declare an algorithm: its own value rules, and what else others read of it
    (search.traits.Traits: width, scale, whether it consults its scorer, deterministic,
    whether max_depth bounds it, whether it scores partial paths as it goes).
    The algorithm function returns what it found (an Outcome); the decorated one is called
    like it (`run`: knobs checked, even on a direct call) and returns the Result."""
    flat = tuple(r for d in declared for r in (d if isinstance(d, tuple) else (d,)))
    said = declare(flat, width=width, scale=scale, scorer=scorer, deterministic=deterministic,
                   depth_limit=depth_limit, scores_as_it_goes=scores_as_it_goes)

    def wrap(fn: Callable[P, Outcome]) -> Callable[P, Result]:
        @functools.wraps(fn)
        def checked(*args: P.args, **kwargs: P.kwargs) -> Result:
            return run(checked, args, kwargs)

        said.check(fn.__name__, names(checked))
        checked.__traits__ = said  # type: ignore[attr-defined]
        return checked

    return wrap


def _always(knobs: Mapping[str, Any]) -> bool:
    del knobs
    return True


@dataclass(frozen=True)
class Labels:
    """What the caller (search.solve) knows of a run before it starts, for its Result: the
    model's name, the scorer's (recorded when consulted(the run's knobs), else ""), and
    whether the engine talks to a server (its counts then go in stats["server"]), and the
    seconds its loading took (Result.load_seconds), and the knobs search.fit narrowed to
    fit the budget ({knob: (given, used)}, stats["narrowed"])."""

    model: str = ""
    scorer: str = ""
    consulted: Callable[[Mapping[str, Any]], bool] = _always
    server: bool = False
    load_seconds: float = 0.0
    narrowed: Mapping[str, tuple[int, int]] = field(default_factory=dict)


def run(fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any],
        labels: Labels = Labels()) -> Result:
    """Call algorithm fn (a @rules function) on args and keyword arguments (knobs flat or
    grouped, seed) after checking its knobs, and build its Result once: what the search found
    (its Outcome), the algorithm's name, seed and its session's usage, every knob's actual value
    in signature order (a knob the search resolved itself, agg=None as the scorer's own, as
    resolved; sequences as lists, as JSON writes them), what its parts noted on the meter
    (Meter.notes: a code scorer's sandbox), and the labels."""
    raw = inspect.unwrap(fn)
    kwargs = fold(fn, upgrade(fn, kwargs, stacklevel=3))
    bound = inspect.signature(raw).bind(*args, **kwargs)
    bound.apply_defaults()
    actual = flat_values(fn, bound.arguments)
    check(fn, actual, complete=True)
    found: Outcome = raw(*bound.args, **bound.kwargs)
    knobs = {k: found.resolved[k] if k in found.resolved else
             list(v) if isinstance(v, tuple) else v for k, v in actual.items()}
    meter = _session(bound.args).meter
    stats = {**found.stats, **meter.notes,
             **({"server": dict(meter.server)} if labels.server else {}),
             **({"narrowed": dict(labels.narrowed)} if labels.narrowed else {})}
    return found.result(usage=meter.usage(), seed=bound.arguments["seed"], algo=raw.__name__,
                        knobs=knobs, stats=stats, model=labels.model,
                        scorer=labels.scorer if labels.consulted(knobs) else "",
                        load_seconds=labels.load_seconds)


def _session(args: Sequence[Any]) -> Session:
    """The session an algorithm was called with: its fourth argument,
    fn(problem, engine, scorer, session, ...)."""
    if len(args) < 4 or not isinstance(args[3], Session):
        got = type(args[3]).__name__ if len(args) > 3 else "nothing"
        raise TypeError(f"an algorithm takes the search's search.session.Session as its "
                        f"fourth argument, got {got}")
    return args[3]


# -- names and types ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Knob:
    """One knob: its default, its annotation (as written: text under `from __future__ import
    annotations`), the module whose names the annotation uses, and the group parameter that
    holds it (None: a parameter of its own)."""

    default: Any
    annotation: Any
    home: str
    group: str | None = None


def knobs_of(fn: Callable[..., Any]) -> dict[str, Knob]:
    """{knob: Knob} of an algorithm function in signature order, groups spread in place."""
    return dict(_knobs(fn))


@functools.cache  # a signature does not change; every call of an algorithm reads it
def _knobs(fn: Callable[..., Any]) -> tuple[tuple[str, Knob], ...]:
    out: dict[str, Knob] = {}
    home = inspect.unwrap(fn).__module__
    for name, p in inspect.signature(fn).parameters.items():
        if p.kind is not inspect.Parameter.KEYWORD_ONLY or name in NOT_KNOBS:
            continue
        group = p.default
        if isinstance(group, Group) and is_dataclass(group):
            out.update((f.name, Knob(getattr(group, f.name), f.type, type(group).__module__,
                                     name)) for f in fields(group) if f.init)
        else:
            out[name] = Knob(p.default, p.annotation, home)
    return tuple(out.items())


def names(fn: Callable[..., Any]) -> list[str]:
    """The knobs of an algorithm function, in signature order."""
    return list(knobs_of(fn))


def defaults(fn: Callable[..., Any]) -> dict[str, Any]:
    return {k: knob.default for k, knob in knobs_of(fn).items()}


def annotation(fn: Callable[..., Any], knob: str) -> Any:
    """The evaluated annotation of a knob (annotations are strings here: `from __future__
    import annotations`); the default's type when it cannot be evaluated, Any without one."""
    spec = knobs_of(fn)[knob]
    ann = spec.annotation
    if isinstance(ann, str):
        space = {**vars(typing), **vars(collections.abc), **vars(sys.modules[spec.home])}
        try:
            ann = eval(ann, space)  # noqa: S307 - a signature's own annotation text
        except Exception:  # a name imported only for type checkers
            ann = inspect.Parameter.empty
    if ann is inspect.Parameter.empty:
        empty = inspect.Parameter.empty
        return type(spec.default) if spec.default not in (None, empty) else Any
    return ann


def fold(fn: Callable[..., Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """A call's keyword arguments from flat knobs: a group's knobs become its object (the one
    given for its parameter, else the parameter's default, with those fields replaced)."""
    spec = knobs_of(fn)
    out = {k: v for k, v in given.items() if k not in spec or spec[k].group is None}
    grouped: dict[str, dict[str, Any]] = {}
    for k, v in given.items():
        if k in spec and (group := spec[k].group) is not None:
            grouped.setdefault(group, {})[k] = v
    params = inspect.signature(fn).parameters
    for group, values in grouped.items():
        out[group] = replace(given.get(group, params[group].default), **values)
    return out


def flat_values(fn: Callable[..., Any], arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Every knob's value from a call's bound arguments (defaults applied): a group's knobs
    read off its object."""
    return {k: arguments[k] if spec.group is None else getattr(arguments[spec.group], k)
            for k, spec in knobs_of(fn).items()}


def upgrade(fn: Callable[..., Any], given: Mapping[str, Any], *, stacklevel: int = 2
            ) -> dict[str, Any]:
    """given with each old knob name (RENAMED) that fn takes under its new name renamed, in
    place, with a DeprecationWarning (stacklevel: as warnings.warn's, from the caller)."""
    have = names(fn)
    out: dict[str, Any] = {}
    for knob, value in given.items():
        new = RENAMED.get(knob)
        if new is not None and new in have and knob not in have:
            if new in given:
                raise TypeError(f"{fn.__name__}: give {new} only ({knob} is its old name)")
            warnings.warn(f"{fn.__name__}: knob {knob!r} is now {new!r} (the depth limit's one "
                          f"name); {knob!r} is accepted until the next release",
                          DeprecationWarning, stacklevel=stacklevel + 1)
            knob = new
        out[knob] = value
    return out


def parse(fn: Callable[..., Any], knob: str, text: str) -> Any:
    """Command-line text -> a value of the knob's type: a JSON or Python literal when that
    fits ("8", "0.5", "true", "[\"\\n\"]"), "none"/"null" where None is allowed, else the text
    itself where a string is (select=vote). TypeError saying what the knob takes otherwise."""
    [knob] = upgrade(fn, {knob: text}, stacklevel=2)
    check_names(fn, [knob])
    tp = annotation(fn, knob)
    if text.strip().lower() in ("none", "null") and conforms(None, tp):
        return None
    for loads in (json.loads, ast.literal_eval):
        try:
            value = loads(text.strip())
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if conforms(value, tp):
            return value
    if conforms(text, tp):
        return text
    got = "nothing after '='" if not text.strip() else repr(text)
    raise TypeError(f"{fn.__name__}: knob {knob} takes {describe(tp)}, got {got}")


# -- the check ---------------------------------------------------------------------------------
def check_names(fn: Callable[..., Any], given: Iterable[str]) -> None:
    allowed = names(fn)
    for knob in given:
        if knob in NOT_KNOBS:
            raise TypeError(f"{knob} is not a knob of {fn.__name__}(): it is solve's own "
                            f"argument (search.solve(..., {knob}=...); --{knob} on the command "
                            "line)")
        if knob not in allowed:
            close = difflib.get_close_matches(knob, allowed, n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            if knob in SOLVE_ARGUMENTS:
                meant = SOLVE_ARGUMENTS[knob]
                hint = (f"; did you mean {meant}"
                        f"{'...' if meant.endswith('=') else ''}? (search.solve's own "
                        f"argument, not a knob)")
            raise TypeError(f"{fn.__name__}() has no knob {knob!r}{hint}; its knobs: "
                            f"{', '.join(allowed)}")


def check(fn: Callable[..., Any], knobs: Mapping[str, Any], *, complete: bool = False,
          values_too: bool = True) -> dict[str, Any]:
    """Check the given knobs of algorithm fn (names, types, value rules, defaults filled in
    for the rules that relate several knobs); returns every knob's value. complete: knobs
    already holds every knob (a call's bound arguments); values_too=False: names and types
    only (knobs that other knobs will join). Old knob names are read as their new ones."""
    knobs = upgrade(fn, knobs, stacklevel=2)
    check_names(fn, knobs)
    values = dict(knobs) if complete else {**defaults(fn), **knobs}
    wrong = [f"knob {k} takes {describe(tp)}, got {v!r}" for k, v in knobs.items()
             if not conforms(v, tp := annotation(fn, k))]
    if wrong:
        raise TypeError(f"{fn.__name__}: {'; '.join(wrong)}")
    if not values_too:
        return values
    own = traits(fn).rules
    failed: set[str] = set()
    broken = []
    for rule in [r for k in values for r in COMMON.get(k, ())] + list(own):
        if any(n not in values or values[n] is None or n in failed for n in rule.names):
            continue
        if (why := rule.fails(values)) is not None:
            failed.update(rule.names)
            broken.append(why)
    if broken:
        raise ValueError(f"{fn.__name__}: {'; '.join(broken)}")
    return values
