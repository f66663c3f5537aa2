"""One final-selection rule per comparison: every search in a grid, a demo table or a fitted
compute-optimal table chooses its answer by the same rule (search.select), and the printout
says which.

A comparison that let best-of-N vote while another search took its top path score would
credit the searches with the selection's difference, not their own: `one_rule` hands one
`select` to every algorithm of a grid that has the knob, and refuses a grid whose knobs name
another rule for one of them; `rules_of` reads back, from the rows, the rule each algorithm
ran with (Result.selected_by), which the printouts show as `final_selection` says.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from search import registry
from search.select import DEFAULT, SELECTIONS, rule

R = TypeVar("R", bound=Mapping[str, Any])


def selects(algo: str) -> bool:
    """Whether the algorithm takes a `select` knob (its final choice is a shared rule)."""
    return "select" in registry.knob_names(algo)


def one_rule(algos: Sequence[str], knobs: Mapping[str, Mapping[str, Any]] | None,
             select: str) -> dict[str, dict[str, Any]]:
    """knobs ({algo: {knob: value}}) with `select` for every algorithm in algos that has the
    knob; an algorithm's own select knob naming another rule is refused (one rule per
    comparison). one_rule(["best_of_n", "greedy"], {}, "vote") ==
    {"best_of_n": {"select": "vote"}, "greedy": {}}."""
    rule(select)  # unknown rule: ValueError
    out: dict[str, dict[str, Any]] = {}
    for algo in algos:
        mine = dict((knobs or {}).get(algo, {}))
        if selects(algo):
            if mine.get("select", select) != select:
                raise ValueError(f"{algo}: select={mine['select']!r}, but this comparison "
                                 f"selects by {select!r} for every search; give the rule "
                                 "once (--select), not per algorithm")
            mine["select"] = select
        out[algo] = mine
    return out


def grid_rule(select: str | None, knobs: Mapping[str, Mapping[str, Any]],
              scorer: str | None) -> str:
    """The eval runner's rule for a grid: `select` when given; else the one rule the knobs
    name (several: refused); else DEFAULT with a scorer named, "vote" without one (what
    best_of_n does when no scorer is named)."""
    if select is not None:
        return select
    named = {k["select"] for k in knobs.values() if k.get("select") is not None}
    if len(named) > 1:
        raise ValueError(f"the knobs name {len(named)} selection rules ({', '.join(sorted(named))})"
                         ": one comparison selects by one rule (give --select)")
    return next(iter(named)) if named else DEFAULT if scorer is not None else "vote"


def rule_of(selected_by: str) -> str:
    """The rule of a Result.selected_by ("weighted_vote(steps, min)" -> "weighted_vote",
    "greedy" -> "greedy"), without what a reserve finish adds."""
    return selected_by.split(", after ")[0].split("(")[0].strip()


def rules_of(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """{algo: the rules its rows were chosen by, sorted}, in first-seen order of the
    algorithms; rows that chose nothing (an error) are skipped."""
    out: dict[str, set[str]] = {}
    for row in rows:
        if row.get("selected_by"):
            out.setdefault(row["algo"], set()).add(rule_of(row["selected_by"]))
    return {algo: sorted(found) for algo, found in out.items()}


def shared_rule(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """The one selection rule (of search.select's) that every row choosing by one used; None
    if no row did. Rows of several rules are refused: they are not one comparison."""
    found = {r for rs in rules_of(rows).values() for r in rs if r in SELECTIONS}
    if len(found) > 1:
        per = "; ".join(f"{a} {', '.join(rs)}" for a, rs in rules_of(rows).items())
        raise ValueError(f"these rows select by {len(found)} rules ({per}): compare rows of "
                         "one rule (give --select)")
    return next(iter(found), None)


def final_selection(rows: Sequence[Mapping[str, Any]]) -> str:
    """The printout's line: "final selection: best_of_n weighted_vote; greedy greedy"."""
    return "final selection: " + "; ".join(
        f"{algo} {', '.join(found)}" for algo, found in rules_of(rows).items())


def with_rule(rows: Sequence[R], select: str) -> list[R]:
    """The rows chosen by rule `select`, and the rows of algorithms that choose by no rule
    of search.select's (greedy: one path; compute_optimal: its table's own)."""
    rule(select)
    return [r for r in rows if not r.get("selected_by")
            or rule_of(r["selected_by"]) not in SELECTIONS
            or rule_of(r["selected_by"]) == select]
