"""What an algorithm declares about itself, stored on its own function.

`@search.knobs.rules(...)` records one Traits on the function it decorates (`traits(fn)`
reads it back), so an algorithm carries its declarations wherever it is defined: a file of
search/algos/, another package's module found by an entry point, a function made at a
prompt. Everything the rest of the project needs to know of an algorithm is read here:
  rules          its own knob value rules (search.knobs.check runs them);
  width          the paths it runs at once from its start (search.fit: a small token budget
                 narrows or refuses it up front); None: one path;
  scale          what one budget number N (the eval grid's width) sets: a Width whose knobs
                 multiply to N (`at`), TOKENS (N samples' worth of tokens, the run's token
                 budget), or None (nothing: the budget is ignored);
  scorer         whether a run with given knobs consults its scorer at all (a bool, or a
                 function of the knobs);
  deterministic  whether the seed can never change its result (the eval grid then runs it
                 once and reuses the row for every seed);
  depth_limit    whether its depth is bounded by its knob `max_depth` (every step-level
                 search's limit, one name everywhere); False where another knob bounds it
                 (a token cap, a horizon) or the searches it hands the problem to do;
  scores_as_it_goes  whether it consults its scorer on partial paths while it searches (beam,
                 A*, SMC), not only on finished ones (best-of-N): a scorer-call limit then
                 stops its search, and its best partial path is finished from the reserve.
A function without declarations (no @rules) gets Traits(): one path, scaled by nothing,
consults its scorer (once its paths are finished), seeded, its depth bounded by max_depth.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from search.fit import Width

if TYPE_CHECKING:
    from search.knobs import Rule

TOKENS = "tokens"  # Traits.scale: N is a token budget of N samples' worth


@dataclass(frozen=True)
class Traits:
    """An algorithm's declarations (the module doc)."""

    rules: tuple[Rule, ...] = ()
    width: Width | None = None
    scale: Width | Literal["tokens"] | None = None
    scorer: bool | Callable[[Mapping[str, Any]], bool] = True
    deterministic: bool = False
    depth_limit: bool = True
    scores_as_it_goes: bool = False

    def check(self, algo: str, knobs: Sequence[str]) -> None:
        """ValueError where a width or scale names a knob the algorithm (knobs: its
        knobs) lacks, said when it is declared rather than when a budget meets it."""
        for what, width in (("width", self.width), ("scale", self.scale)):
            if isinstance(width, Width):
                named = (*width.knobs, *width.companions, width.multiple_of, width.capped)
                lacking = [k for k in named if k is not None and k not in knobs]
                if lacking:
                    raise ValueError(f"{algo}: its {what} names {', '.join(lacking)}, not among "
                                     f"its knobs ({', '.join(knobs) or 'none'})")

    def uses_scorer(self, knobs: Mapping[str, Any]) -> bool:
        """Whether a run with these knobs consults its scorer (to search or to choose)."""
        return self.scorer(knobs) if callable(self.scorer) else self.scorer

    def at(self, n: int, defaults: Mapping[str, Any], given: Mapping[str, Any]
           ) -> dict[str, Any]:
        """The knobs budget number n sets (`scale` a Width; {} otherwise), given every knob's
        default and the caller's own knobs, which win for all but the scale's first knob:
          - the scale's knobs multiply to n: each after the first keeps the caller's value
            (which must divide what is left) or the largest divisor of what is left up to
            its default; the first takes the rest (astar: k = 4, width = n / 4 for n = 16);
          - then each of the scale's companions the caller left unset takes the largest
            value up to its default that the rules relating it to the knobs set so far (the
            width's, the companions before it) allow (beam's m must divide n: 4 for n = 16,
            3 for n = 6, 1 for n = 1; diverse_beam's groups then must divide n / m).
        ValueError where n is below the scale's smallest (each knob at its floor)."""
        if not isinstance(self.scale, Width):
            return {}
        scale = self.scale
        if n < scale.floor ** len(scale.knobs):
            raise ValueError(f"needs a budget (width) of at least "
                             f"{scale.floor ** len(scale.knobs)}, got {n}")
        first, *rest = scale.knobs
        out: dict[str, Any] = {}
        left = n
        for knob in rest:
            if knob in given:
                value = int(given[knob])
                if value < 1 or left % value:
                    raise ValueError(f"{knob}={value} must divide the budget {n} "
                                     f"({' * '.join(scale.knobs)} = {n})")
            else:
                value = max(d for d in range(1, int(defaults[knob]) + 1) if left % d == 0)
            out[knob], left = value, left // value
        out = {first: left, **out}
        settled = dict(out)  # the width's knobs, then each companion in turn
        for knob in scale.companions:
            if knob in given:
                settled[knob] = given[knob]
            else:
                out[knob] = settled[knob] = self._largest_allowed(knob, defaults[knob],
                                                                  settled)
        return out

    def _largest_allowed(self, knob: str, default: int, values: Mapping[str, Any]) -> int:
        """The largest of default, default - 1, ..., 1 that the rules among `values` and
        knob allow (default itself where none does: the knob check then says why)."""
        among = [r for r in self.rules if knob in r.names and all(
            name == knob or values.get(name) is not None for name in r.names)]
        return next((v for v in range(int(default), 0, -1)
                     if not any(r.fails({**values, knob: v}) for r in among)), default)


def traits(fn: Callable[..., Any]) -> Traits:
    """What algorithm function fn declares (Traits() where it declares nothing)."""
    found = getattr(fn, "__traits__", None)
    return found if isinstance(found, Traits) else Traits()


def declare(rules: Sequence[Rule], *, width: Width | None, scale: Width | str | None,
            scorer: bool | Callable[[Mapping[str, Any]], bool], deterministic: bool,
            depth_limit: bool = True, scores_as_it_goes: bool = False) -> Traits:
    """The Traits of @rules' arguments: scale "width" (the default) is the width itself."""
    if scale == "width":
        scale = width
    if not (scale is None or isinstance(scale, Width) or scale == TOKENS):
        raise ValueError(f"scale is a search.fit.Width, {TOKENS!r} or None, got {scale!r}")
    return Traits(tuple(rules), width, scale, scorer, deterministic,  # type: ignore[arg-type]
                  depth_limit, scores_as_it_goes)

