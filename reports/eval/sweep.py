r"""Resumable eval runner: problems x algorithms x budgets x seeds -> one JSON line per run.

    python -m reports.eval --dataset math500 --limit 100 --model <hf id or path> \
        --prm <prm id or path> --algos best_of_n,beam,astar,particle_filter \
        --budgets 4,16,64 --seeds 0,1,2 --out runs/math500.jsonl
    python -m reports.eval --dataset gsm8k --data ../shared/data --limit 200 \
        --model smollm2-135m --algos greedy,best_of_n,rpc --budgets 4,16 \
        --select weighted_vote --out runs/gsm8k.jsonl
    python -m reports.eval --dataset humaneval --model smollm2-135m --scorer unit_tests \
        --algos best_of_n,beam,pgtd --budgets 4,16 --knob step_tokens=384 --out runs/he.jsonl
    python -m reports.eval --dataset arith --difficulty 3,5 --limit 50 --model tiny-arith \
        --scorer steps --algos greedy,best_of_n,beam,astar,particle_filter --budgets 4,16 \
        --seeds 0,1 --out runs/arith.jsonl

Datasets (problems.datasets): math500, aime24, amc23, gsm8k, humaneval (public tests =
docstring examples, hidden = the full check) read --data when given, else their Hugging Face
copy (the `datasets` cache; HF_DATASETS_OFFLINE=1), else their file in $TTS_DATA_DIR or
../shared/data; a hub id (--split, --config, --revision), or a JSONL/JSON/CSV/Parquet file or
save_to_disk folder of your own (--field problem=COLUMN ...); and the procedural arith and
codegen, generated with --difficulty (a list; --limit problems per level, default 100) and
--data-seed. On a benchmark, --difficulty keeps the problems of those levels (MATH-500's 1-5).
Each problem carries its own prompt; the engine wraps it (chat template or plain prompt).

A budget value is each algorithm's width (as it declares: reports.eval.grid); --tokens adds a token
Budget per run. The model loads once per process; named scorers are built fresh per run, so
no cache carries over from one run to the next (a PRM path loads once). A named scorer goes
only to the runs that consult one (search.registry.uses_scorer); with none named, every run
gets search.solve's default (best_of_n then votes).

One final-selection rule for the whole grid (reports.eval.rules): --select (score, vote,
weighted_vote) goes to every algorithm that has a `select` knob; without it, the rule a
--knob select=... names, else search.select.DEFAULT ("score") with a scorer named and "vote"
without one. A per-algorithm select naming another rule is refused. The summary prints the
rule each algorithm's rows were chosen by ("final selection: ...").

Rows (schema 1), one per run, appended, flushed and fsynced as each run finishes:
    schema, key (hex digest of dataset, problem_id, model, scorer, algo, knobs, budget, seed),
    dataset, problem_id, difficulty (int|null), model, scorer (the grid's scorer, or null
    when the run consulted none: greedy, rpc, first_finish, a plain vote), selected_by
    (Result.selected_by: the rule and scorer that chose the answer, e.g. "vote",
    "score(unit_tests, last)"; null if the run raised), algo, knobs (what went to
    search.solve, width knobs included), budget {width, tokens}, seed, answer, gold, correct,
    status (Result.status, or "error" when the run raised), error ("Type: message"|null; a
    grading failure keeps the run's status), usage (search.Usage.as_dict(): the search's
    own seconds), load_seconds (Result.load_seconds: loading before the search, apart),
    cut_by (the budget limit that ended a "budget_exhausted" run), narrowed ({knob: [given,
    used]} where search.fit narrowed the width to the token budget), sandbox ({isolation,
    gaps} of the code sandbox a code problem's programs ran in; null for math), candidates
    [{answer, score (null if not finite), finished, correct, verified, text (--keep-text)}],
    text (the chosen solution, --keep-text), time (ISO, UTC), reused_from_seed (copies only).
    verified: what a search could check without the gold (reports.eval.correctness): the public tests on
    code, the arithmetic step checker on math; reports.studies.flaws reads it. A deterministic
    algorithm (greedy, pgtd: the seed cannot change their result) runs with the first seed;
    the rows of the other seeds are copies marked reused_from_seed, which pass@k skips.
Re-running the same command skips every run whose key is in the file; an incomplete last
line (a process killed mid-write) is cut off first, so the file stays valid JSONL and a
killed run, restarted, ends with exactly one row per run. Error rows count as done: drop them
(e.g. `jq -c 'select(.status != "error")'`) to retry. A lock keeps two runners off one file.
--workers N runs the cells on N local worker processes, one engine each (reports/eval/workers.py:
on a CPU one process keeps about one core busy: on two cores the tiny-arith grid ran 1.7x
faster on two workers, a 16-problem grid 1.3x, their start-up a few seconds), rows streamed
back into the same file and the same as one process's.
--ray [ADDRESS] runs the cells on Ray workers, one engine each, rows streamed back into the
same file (reports/eval/ray_workers.py; `pip install 'tts-search[ray]'`).
--concurrency N keeps up to N runs in flight on the one engine (search.many.concurrently: a
thread each, their model calls batched into shared forwards), rows written as each finishes
(the file's order is then the order they finished; every row is what it is at --concurrency
1, timings aside). With --workers or --ray, each worker keeps N in flight.
Ctrl-C or SIGTERM stops a grid within a few seconds: every row written is kept, the runs in
flight end at their next forward and leave no row (the same command re-runs them), one line
says so, and the exit status is 130.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from problems import datasets
from reports.eval.cells import (  # SCHEMA and read_rows: part of this module's API
    SCHEMA,
    copy_rows,
    difficulty_of,
    locked,
    read_rows,
    run_here,
)
from reports.eval.grid import SAMPLE_TOKENS, Grid, make_grid, parse_ints, parse_knobs
from reports.eval.rules import final_selection, grid_rule, one_rule
from search import scoring
from search.cli import add_threads_argument
from search.select import SELECTIONS
from search.types import Problem

if TYPE_CHECKING:
    from search.engines.base import Engine
    from search.scoring import Scorer

__all__ = ["SCHEMA", "EvalRun", "load_problems", "main", "read_rows", "run_grid", "summarize"]

PROCEDURAL = ("arith", "codegen")
INTERRUPTED = 130  # the exit status of a grid stopped by Ctrl-C or SIGTERM (128 + SIGINT)
PROCEDURAL_LIMIT = 100  # problems per difficulty level when --limit is not given


# -- problems --------------------------------------------------------------------------------
def load_problems(dataset: str, *, path: str | os.PathLike[str] | None = None,
                  limit: int | None = None, difficulty: Sequence[int] | None = None,
                  shuffle: bool = False, data_seed: int = 0, **source: Any) -> list[Problem]:
    """The problems of a dataset (problems.load: a short name, hub id, file or saved folder;
    `source`: its split, config, revision, fields) or a procedural set (problems.arith /
    problems.codegen: `limit` per difficulty level, generator seed `data_seed`)."""
    import problems

    if dataset in PROCEDURAL:
        if path is not None or any(source.values()):
            raise ValueError(f"{dataset} is generated, not read: drop --data, --split, "
                             "--config, --revision and --field")
        gen = problems.arith if dataset == "arith" else problems.codegen
        levels = list(difficulty or [gen.DEFAULT_DIFFICULTY])
        n = PROCEDURAL_LIMIT if limit is None else limit
        return [p for d in levels for p in gen.generate(n, seed=data_seed, difficulty=d)]
    try:
        found = problems.load(dataset, path, seed=data_seed, shuffle=shuffle,
                              limit=None if difficulty else limit, **source)
    except ValueError as err:
        raise ValueError(f"{err}; procedural sets: {', '.join(PROCEDURAL)}") from None
    if difficulty:
        found = [p for p in found if difficulty_of(p) in set(difficulty)]
    return found if limit is None else found[:limit]


# -- the JSONL file --------------------------------------------------------------------------
@dataclass(frozen=True)
class EvalRun:
    """What run_grid did. rows: the grid's rows in grid order (resumed ones included)."""

    out: Path
    rows: tuple[dict[str, Any], ...]
    resumed: int  # runs found already done in the file
    ran: int  # runs done now
    errors: int  # rows (of the grid) with status "error"
    reused: int = 0  # rows written now as copies of a deterministic algorithm's run


def run_grid(grid: Grid, *, out: str | os.PathLike[str], engine: Engine | str | None = None,
             scorer: Scorer | str | None = None, model: str | None = None,
             engine_kwargs: Mapping[str, Any] | None = None, concurrency: int = 1,
             runner: Callable[..., dict[str, dict[str, Any]]] | None = None,
             quiet: bool = False) -> EvalRun:
    """Run every cell of the grid (a reports.eval.grid.Grid: what runs) not yet in `out`,
    appending one row per run; the keywords say where and how it runs.
    runner: runs the pending cells elsewhere (reports.eval.workers.Workers: local processes;
    reports.eval.ray_workers.RayRunner), rows by key;
    without one they run here (reports.eval.cells.run_here, on a search.many.Driver).
    concurrency: runs in flight at once on the engine (per worker with a runner).

    engine: an Engine, or a model name/path loaded once here (default: search's default
    model). model: the name rows record (default: the name given, or engine.name).
    scorer: a rewards.scorers name, a PRM path ("prm:..."), a Scorer object, or None
    (logprob; unit_tests for a pgtd-only grid). Everything is checked before a model loads.
    A deterministic algorithm runs once per grid point; its other seeds' rows are copies
    marked "reused_from_seed" (written after the row they copy, so a killed run resumes
    cleanly).
    """
    from search.api import check_engine, check_scorer
    from search.many import Driver, check_concurrent

    check_concurrent(concurrency)
    cells = grid.cells()
    # rows name the default when none is given; the runs get None, so solve's default
    scorer_name = check_scorer(scorer) if scorer is not None else \
        _default_scorer(grid.algos, grid.problems)  # names checked here; nothing loads yet
    engine_name = check_engine(engine) if runner is None or not isinstance(engine, str) \
        else engine  # a runner's workers load (and check) it themselves
    if model is None:
        model = engine_name
    names = {"dataset": grid.dataset, "model": model, "scorer": scorer_name}
    keys = [c.key(**names) for c in cells]
    path = Path(out)
    with locked(path, quiet=quiet) as fd:
        wanted = set(keys)
        done = {r["key"]: r for r in read_rows(path)
                if isinstance(r, dict) and r.get("key") in wanted}
        pending = [(c, k) for c, k in zip(cells, keys) if k not in done]
        resumed = len(cells) - len(pending)
        runs = [(c, k) for c, k in pending if c.reuse_from is None]
        total = len(cells) - (len(pending) - len(runs))  # copies are not runs
        if runs and runner is not None:  # the engines load on the runner's workers
            done |= runner(runs, list(done.values()), engine=engine,
                           engine_kwargs=dict(engine_kwargs or {}), scorer=scorer, names=names,
                           fd=fd, quiet=quiet, total=total, concurrency=concurrency)
        elif runs:
            driver = Driver.load(engine, scorer, concurrency=concurrency,
                                 engine_kwargs=engine_kwargs)
            done |= run_here(runs, list(done.values()), driver, names, fd, quiet=quiet,
                             total=total)
        copies = copy_rows([(c, k) for c, k in pending if c.reuse_from is not None], done,
                           names, fd)
        done |= copies
    rows = tuple(done[k] for k in keys if k in done)
    return EvalRun(path, rows, resumed, len(runs), sum(r["status"] == "error" for r in rows),
                   len(copies))


def _default_scorer(algos: Sequence[str], problems: Sequence[Problem]) -> str:
    """One scorer serves the whole grid: search.api.default_scorer of every cell (logprob, or
    the public tests for pgtd), which must agree; it also says, before any model loads, what
    is wrong with a pgtd problem without tests."""
    from search.api import default_scorer

    chosen = {default_scorer(algo, problem) for algo in algos for problem in problems}
    if len(chosen) > 1:
        raise ValueError(f"the algorithms' default scorers differ ({', '.join(sorted(chosen))}), "
                         "but a grid has one scorer: pass one (e.g. unit_tests)")
    return next(iter(chosen), "logprob")


# -- summary and command line ----------------------------------------------------------------
def summarize(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per (algo, width, tokens): runs, accuracy, mean generated tokens, scorer calls and
    seconds per run, errors, unread (answers whose conclusion the grader could not read,
    counted apart from wrong); grid order."""
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["algo"], r["budget"]["width"], r["budget"]["tokens"]), []).append(r)
    return [{"algo": a, "width": w, "tokens": t, "runs": len(g),
             "accuracy": sum(bool(r["correct"]) for r in g) / len(g),
             **{k: sum(r["usage"][k] for r in g) / len(g)
                for k in ("generated_tokens", "scorer_calls", "seconds")},
             "errors": sum(r["status"] == "error" for r in g),
             "unread": sum(r.get("unread") is not None for r in g)}
            for (a, w, t), g in groups.items()]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m reports.eval", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True,
                    help="math500, aime24, amc23, gsm8k, humaneval, arith, codegen, a hub id "
                    "(owner/name), or a file (JSONL, JSON, CSV, Parquet) or saved folder")
    ap.add_argument("--data", default=None, help="where a short name's copy is: a file, saved "
                    "folder, or folder holding it (default: the hub, else $TTS_DATA_DIR)")
    datasets.add_arguments(ap)
    ap.add_argument("--limit", type=int, default=None, help="at most this many problems "
                    f"(procedural sets: per difficulty level, default {PROCEDURAL_LIMIT})")
    ap.add_argument("--difficulty", type=parse_ints, default=None, help="levels, e.g. 3,5")
    ap.add_argument("--shuffle", action="store_true", help="shuffle a benchmark by --data-seed")
    ap.add_argument("--data-seed", type=int, default=0, help="shuffle / generator seed")
    ap.add_argument("--model", default=None, help="embedded name, local folder or HF id")
    ap.add_argument("--device", default=None, help="torch device (default: cuda if available)")
    ap.add_argument("--scorer", default=None, help=f"{', '.join(sorted(scoring.known()))}, "
                    "or a PRM path (default logprob; unit_tests when the only algorithm is "
                    "pgtd)")
    ap.add_argument("--prm", default=None, help="a PRM id or path (same as --scorer prm:PATH)")
    ap.add_argument("--algos", required=True, help="comma-separated algorithm names")
    ap.add_argument("--budgets", type=parse_ints, default=[4], help="widths, e.g. 4,16,64")
    ap.add_argument("--seeds", type=parse_ints, default=[0], help="e.g. 0,1,2")
    ap.add_argument("--knob", action="append", default=[], metavar="[ALGO.]KNOB=VALUE")
    ap.add_argument("--select", default=None, choices=sorted(SELECTIONS),
                    help="the final selection of every algorithm that selects (one rule "
                    "for the grid; default: a --knob select's, else score with a scorer "
                    "named, vote without)")
    ap.add_argument("--tokens", type=int, default=None, help="generated-token budget per run")
    ap.add_argument("--sample-tokens", type=int, default=SAMPLE_TOKENS,
                    help="compute_optimal's budget N means N * this many tokens")
    ap.add_argument("--out", default="runs.jsonl", help="the JSONL file (appended)")
    ap.add_argument("--keep-text", action="store_true", help="rows keep each candidate's text "
                    "(and the chosen solution's)")
    ap.add_argument("--dry-run", action="store_true", help="check and count; run nothing")
    ap.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    ap.add_argument("--concurrency", type=int, default=1, metavar="N",
                    help="runs in flight at once on the engine, their model calls batched "
                    "(per worker with --workers or --ray); rows are the same at any N")
    add_threads_argument(ap)
    ap.add_argument("--workers", type=int, default=None, metavar="N",
                    help="run the grid on N local worker processes, one engine each "
                    "(reports.eval.workers: on a CPU, one process keeps about one core busy); "
                    "with --threads, each worker's intra-op threads")
    ap.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                    help="run the grid on Ray workers (reports.eval.ray_workers): a local "
                    "cluster, or the cluster at ADDRESS (auto, ray://host:port)")
    ap.add_argument("--ray-workers", type=int, default=None, help="default: as resources allow")
    ap.add_argument("--ray-cpus", type=float, default=1.0, help="CPUs per Ray worker")
    ap.add_argument("--ray-gpus", type=float, default=0.0, help="GPUs per Ray worker")
    args = ap.parse_args(argv)
    if args.prm is not None and args.scorer is not None:
        ap.error("give --scorer or --prm, not both")
    if args.workers is not None and args.ray is not None:
        ap.error("give --workers or --ray, not both")
    scorer = f"prm:{args.prm}" if args.prm is not None else args.scorer
    algos = [a.strip() for a in args.algos.split(",") if a.strip()]
    try:
        probs = load_problems(args.dataset, path=args.data, limit=args.limit,
                              difficulty=args.difficulty, shuffle=args.shuffle,
                              data_seed=args.data_seed, **datasets.options(args))
        if not probs:
            raise ValueError(f"no {args.dataset} problems selected (check --limit and "
                             "--difficulty)")
        knobs = parse_knobs(args.knob, algos)
        knobs = one_rule(algos, knobs, grid_rule(args.select, knobs, scorer))
        if args.threads is not None and args.workers is None:
            from search.runtime.omp import use_threads

            use_threads(args.threads)
        if args.dry_run:
            cells = make_grid(probs, algos, args.budgets, args.seeds, knobs=knobs,
                              tokens=args.tokens, sample_tokens=args.sample_tokens)
            print(f"{len(probs)} problems, {len(cells)} runs")
            return 0
        dataset = str(probs[0].metadata.get("source", args.dataset)) if probs \
            else args.dataset
        grid = Grid(probs, algos, args.budgets, args.seeds, knobs=knobs, tokens=args.tokens,
                    sample_tokens=args.sample_tokens, keep_text=args.keep_text,
                    dataset=dataset)
        with contextlib.ExitStack() as stack:  # local workers stop when the grid ends
            runner: Callable[..., dict[str, dict[str, Any]]] | None = None
            if args.ray is not None:  # Ray is imported only here
                from reports.eval.ray_workers import RayRunner

                runner = RayRunner(address=args.ray or None, workers=args.ray_workers,
                                   num_cpus=args.ray_cpus, num_gpus=args.ray_gpus)
            elif args.workers is not None:
                from reports.eval.workers import Workers

                runner = stack.enter_context(Workers(args.workers, threads=args.threads))
            run = run_grid(grid, out=args.out, engine=args.model, scorer=scorer,
                           engine_kwargs={"device": args.device} if args.device else None,
                           quiet=args.quiet, runner=runner, concurrency=args.concurrency)
    except (ValueError, TypeError, OSError, KeyError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: every row written is kept (fsynced)
        kept = len(read_rows(args.out))
        print(f"\ninterrupted: {kept} rows kept in {args.out}; the runs in flight were not "
              "written. Run the same command again to resume.", file=sys.stderr)
        return INTERRUPTED
    if not args.quiet:
        print(f"{run.out}: {len(run.rows)} runs ({run.resumed} resumed, {run.ran} new, "
              f"{run.reused} reused from a deterministic run, {run.errors} errors)")
        for s in summarize(run.rows):
            print(f"  {s['algo']:>16} width={s['width']!s:>4} tokens={s['tokens']!s:>6}  "
                  f"acc {s['accuracy']:.3f}  gen tokens {s['generated_tokens']:9.1f}  "
                  f"runs {s['runs']}" + (f"  errors {s['errors']}" if s["errors"] else "")
                  + (f"  unread {s['unread']}" if s["unread"] else ""))
        print(f"  {final_selection(run.rows)}")
    return 0
