"""Why A* spends more tokens than best-of-N on tiny-arith, measured; and A* against
best-of-N at equal tokens with each scorer.

    python -m reports.studies.astar_tokens [--problems 60] [--data-seed 7] [--seeds 0]
                                  [--scorers steps,value] [--out runs/astar-study]
                                  [--diagnose 30] [--no-run]

The problems are disjoint from the demo's (generator seed 7, not the demo's 2024; training
used seeds >= 1,000,000), so knobs chosen here are not tuned to the demo. For each scorer the
runner (reports.eval, resumable) runs best-of-N at widths 1..16 (the reference curve) and the
A* variants below, each knob given explicitly so a later change of a default never reuses a
stale row. The table prints, per variant and width, accuracy, mean generated tokens and
scorer calls, best-of-N's accuracy at the same tokens (its curve, linear in log tokens) and
the tokens best-of-N needs for A*'s accuracy. --diagnose N solves the first N problems
directly with both tie rules and prints what the trees show: batches, the share capped at
max_batches, pops per step of the goal's depth (1 = straight down; more = breadth), the
distinct step scores the scorer gave, and the share of pops that tied the best open f.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from problems import arith
from reports.analysis.bands import accuracy_at, band, curve_of, tokens_to_match
from reports.analysis.rows import Row, group
from reports.eval.grid import parse_ints
from search.algos.astar import AStarMark
from search.cli import parse, printout

BASE = {"ties": "deep", "duplicates": "merge", "cost": "neglog", "g": "sum", "h_weight": 1.0}
# (label, knobs over BASE, widths N: k = min(4, N) samples per pop unless k is given)
VARIANTS: list[tuple[str, dict[str, Any], list[int]]] = [
    ("ties=fifo (before)", {"ties": "fifo"}, [4, 16]),
    ("ties=deep", {}, [2, 4, 8, 16]),
    ("deep, duplicates=keep", {"duplicates": "keep"}, [4]),
    ("deep, h_weight=0", {"h_weight": 0.0}, [4]),
    ("deep, cost=complement", {"cost": "complement"}, [4]),
    ("deep, g=mean", {"g": "mean"}, [4]),
    ("deep, k=16 width=1", {"k": 16}, [16]),
    ("deep, k=2 width=8", {"k": 2}, [16]),
]
BON_WIDTHS = [1, 2, 4, 8, 16]
BON_KNOBS = {"select": "weighted_vote"}  # as the demo


PROG = "python -m reports.studies.astar_tokens"
OPTIONS: dict[str, dict[str, Any]] = {  # the command line: flag -> add_argument's keywords
    "--problems": dict(type=int, default=60),
    "--difficulty": dict(type=int, default=arith.DEFAULT_DIFFICULTY),
    "--data-seed": dict(type=int, default=7),
    "--seeds": dict(type=parse_ints, default=[0]),
    "--scorers": dict(default="steps,value"),
    "--out": dict(type=Path, default=Path("runs/astar-study")),
    "--diagnose": dict(type=int, default=0, help="problems for the tree statistics"),
    "--no-run": dict(action="store_true", help="only tabulate what the files hold"),
    "--quiet": dict(action="store_true"),
    "--concurrency": dict(type=int, default=16,
                          help="runs in flight at once (rows are the same at any value)"),
}


def label_of(row: Row) -> str:
    """The VARIANTS label whose knobs the row ran with (k aside), else "?"."""
    knobs = row["knobs"]
    for label, over, _ in VARIANTS:
        want = {**BASE, **over}
        if all(knobs.get(k) == v for k, v in want.items()):
            return label
    return "?"


def run(problems: Sequence[Any], *, scorers: Sequence[str], seeds: Sequence[int], out: Path,
        engine: Any, quiet: bool, concurrency: int = 1) -> list[Row]:
    from reports.eval.grid import Grid
    from reports.eval.sweep import run_grid

    rows: list[Row] = []
    for scorer in scorers:
        path = out / f"{scorer}.jsonl"
        common: dict[str, Any] = dict(out=path, engine=engine, model="tiny-arith",
                                      scorer=scorer, quiet=quiet, concurrency=concurrency)
        rows += run_grid(Grid(problems, ["best_of_n"], BON_WIDTHS, seeds, dataset="arith",
                              knobs={"best_of_n": BON_KNOBS}), **common).rows
        for _, over, widths in VARIANTS:
            rows += run_grid(Grid(problems, ["astar"], widths, seeds, dataset="arith",
                                  knobs={"astar": {**BASE, **over}}), **common).rows
    return rows


@printout
def table(rows: Sequence[Row]) -> Iterator[str]:
    for scorer, srows in group(rows, lambda r: r["scorer"]).items():
        curve = curve_of(srows)
        yield (f"\nscorer {scorer}: best-of-N (weighted vote) "
               + ", ".join(f"N={w}: {a:.1%} at {t:.0f} tok" for w, (t, a)
                           in zip(BON_WIDTHS, curve)))
        yield (f"{'A* variant':<24} {'N':>3} {'k':>3} {'accuracy':>8} {'tokens':>7} "
               f"{'scorer':>7} {'BoN acc@tok':>11} {'BoN tok@acc':>11} {'tok ratio':>9}")
        astar = [r for r in srows if r["algo"] == "astar"]
        for (lab, width, k), g in group(astar, lambda r: (label_of(r), r["budget"]["width"],
                                                          r["knobs"]["k"])).items():
            b = band(g)
            eq = accuracy_at(curve, b.tokens)
            need = tokens_to_match(curve, b.accuracy)
            yield (
                f"{lab:<24} {width:>3} {k:>3} {b.accuracy:>8.1%} {b.tokens:>7.0f} "
                f"{b.scorer_calls:>7.1f} {'-' if eq is None else f'{eq:.1%}':>11} "
                f"{'never' if need is None else f'{need:.0f}':>11} "
                f"{'-' if need is None else f'{b.tokens / need:.2f}x':>9}")


def _at(place: int | None, missing: float = float("inf")) -> float:
    """A pop or batch index; `missing` for a node never popped."""
    return missing if place is None else place


@printout
def diagnose(problems: Sequence[Any], engine: Any, scorers: Sequence[str], *, width: int = 1,
             k: int = 4) -> Iterator[str]:
    """Tree statistics of A* with either tie rule on each scorer (one seed)."""
    import search
    from search.api import get_scorer

    yield f"\nA* trees, width={width} k={k}, {len(problems)} problems, seed 0:"
    yield (f"{'scorer':<7} {'ties':<5} {'batches':>7} {'capped':>7} {'pops/goal depth':>15} "
           f"{'distinct step scores':>20} {'pops at a tied f':>16} {'tokens':>7}")
    for scorer in scorers:
        for ties in ("fifo", "deep"):
            stats: list[Mapping[str, float]] = []
            values: set[float] = set()
            for p in problems:
                res = search.solve(p, "astar", engine=engine, scorer=get_scorer(scorer, engine),
                                   seed=0, width=width, k=k, **{**BASE, "ties": ties})
                nodes = list(res.tree.walk())
                values |= {round(n.scores.reward, 6) for n in nodes
                           if n.scores.reward is not None}
                marks = {n.id: n.scores.get(AStarMark) or AStarMark() for n in nodes}
                popped = sorted((n for n in nodes if marks[n.id].pop is not None),
                                key=lambda n: _at(marks[n.id].pop))
                goal = popped[-1] if popped and popped[-1].finished else None
                # a pop tied if another state open at that moment had the same f
                tied = sum(any(q is not p_ and marks[q.id].f == marks[p_.id].f
                               and _at(marks[q.id].pop) > _at(marks[p_.id].pop)
                               and (q.parent is not None
                                    and _at(marks[q.parent.id].batch, 1e9)
                                    < _at(marks[p_.id].batch))
                               for q in nodes
                               if q.scores.merged_into is None and marks[q.id].merged_into is None)
                           for p_ in popped[1:])
                stats.append({"batches": res.stats.get("batches", 0),
                              "capped": float(bool(res.stats.get("capped"))),
                              "breadth": len(popped) / goal.depth if goal else float("nan"),
                              "tied": tied / max(1, len(popped) - 1),
                              "tokens": res.usage.generated_tokens})

            def mean(key: str, rows: list[Mapping[str, float]] = stats) -> float:
                vals = [s[key] for s in rows if s[key] == s[key]]
                return sum(vals) / len(vals) if vals else float("nan")

            yield (f"{scorer:<7} {ties:<5} {mean('batches'):>7.1f} {mean('capped'):>7.0%} "
                   f"{mean('breadth'):>15.2f} {len(values):>20} {mean('tied'):>16.0%} "
                   f"{mean('tokens'):>7.0f}")


def main(argv: Sequence[str] | None = None) -> int:
    from search.api import get_engine

    args = parse(PROG, __doc__, OPTIONS, argv, check=lambda a: (
        "generator seed 2024 is the demo's: choose knobs on other problems"
        if a.data_seed == 2024 else None))
    scorers = [s.strip() for s in args.scorers.split(",") if s.strip()]
    problems = arith.generate(args.problems, seed=args.data_seed, difficulty=args.difficulty)
    engine = get_engine("tiny-arith")
    if args.no_run:
        from reports.analysis.rows import read_rows

        rows = read_rows([args.out / f"{s}.jsonl" for s in scorers
                          if (args.out / f"{s}.jsonl").exists()])
    else:
        rows = run(problems, scorers=scorers, seeds=args.seeds, out=args.out, engine=engine,
                   quiet=args.quiet, concurrency=args.concurrency)
    print(f"tiny-arith, {args.problems} problems (difficulty {args.difficulty}, generator seed "
          f"{args.data_seed}), seeds {args.seeds}")
    print(table(rows))
    if args.diagnose:
        print(diagnose(problems[:args.diagnose], engine, scorers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
