"""Measure an embedded reasoner and record the table next to its weights (metrics.json).

    python -m training.evaluate tiny-arith --n 500 --seed 12345 [--levels 5 9] [--samples 16]
    python -m training.evaluate tiny-code --n 200 [--levels 3 5]

Per difficulty level, on n held-out problems `<generator>.generate(n, seed=seed,
difficulty=level)` (training only ever used seeds >= 1,000,000; the generator is the one the
model was trained on, problems.arith or problems.codegen):
  greedy     share right with one temperature-0 solution per problem;
  pass@k     coverage: share of problems where any of k samples (temperature --temperature,
             default 0.8, the searches' default) is right;
  maj@k      (math) accuracy of the majority answer of those k samples (ties: first seen);
  verified   (code) share of samples passing the public tests, and false_positive_share:
             of those, the share failing the hidden ones (what public-test verification
             lets through).
Grading is verifiers.grade.grade: math answers by verifiers.math.verify, programs by their
hidden tests in the sandbox. Also: seconds to load the model by name, seconds to decode 1,000
tokens one problem at a time (batch 1), and the greedy accuracy on the fixed 50-problem set
that tests/test_reasoners.py re-measures. Decoding goes through HFEngine.expand with many
roots at once, whole solutions per call.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from problems import arith, codegen
from search.cli import parse, printout
from search.engines.base import DEFAULT_STOP
from search.engines.hf import HFEngine
from search.types import Problem
from verifiers.grade import Grade, grade
from verifiers.math import extract_answer, normalize

FIXED_SEED, FIXED_N = 777, 50  # the fixed set: generate(50, seed=777), default level
MAX_ROWS = 256  # rows (problems x samples) decoded together; bounds the KV cache in memory


PROG = "python -m training.evaluate"
OPTIONS: dict[str, dict[str, Any]] = {  # the command line: flag -> add_argument's keywords
    "name": {},
    "--n": dict(type=int, default=500),
    "--seed": dict(type=int, default=12345),
    "--levels": dict(type=int, nargs="+", default=None,
                     help="difficulties (default: the default and a harder one)"),
    "--samples": dict(type=int, default=16),
    "--temperature": dict(type=float, default=0.8),
    "--sampled": dict(type=int, default=None,
                      help="problems sampled at the first level (default: all n)"),
    "--hard-sampled": dict(type=int, default=100,
                           help="problems sampled at levels after the first (default 100)"),
    "--threads": dict(type=int, default=2),
}


@dataclass(frozen=True)
class Task:
    """What a reasoner is trained and measured on."""

    generate: Callable[..., list[Problem]]
    default_difficulty: int
    hard_difficulty: int  # more steps than trained on
    tokens_per_level: int  # solution cap = tokens_per_level * difficulty + 60, ~1.25x the
                           # longest gold at a level: a row that never ends costs its batch


TASKS = {"arith": Task(arith.generate, arith.DEFAULT_DIFFICULTY, 9, 40),
         "code": Task(codegen.generate, codegen.DEFAULT_DIFFICULTY, 6, 45)}


def task_of(name: str) -> Task:
    from training import reasoners

    return TASKS[reasoners.training_record(name)["config"].get("task", "arith")]


def max_tokens(difficulty: int, task: Task = TASKS["arith"]) -> int:
    return task.tokens_per_level * difficulty + 60


def cap(problems: Sequence[Problem]) -> int:
    task = TASKS["code" if problems[0].domain == "code" else "arith"]
    return max_tokens(max(int(p.metadata.get("difficulty", task.default_difficulty))
                          for p in problems), task)


def solve_all(engine: HFEngine, problems: Sequence[Problem], n: int, *, temperature: float,
              seed: int) -> list[list[str]]:
    """n whole solutions per problem (texts), decoded in batches of about MAX_ROWS rows."""
    out: list[list[str]] = []
    chunk = max(1, MAX_ROWS // n)
    for start in range(0, len(problems), chunk):
        part = problems[start:start + chunk]
        roots = [engine.root(p) for p in part]
        kids = engine.expand(roots, n, stop=None, max_tokens=cap(part),
                             temperature=temperature, seed=seed + start)
        out += [[c.step.text for c in cs if c.step is not None] for cs in kids]
    return out


class Grader:
    """verifiers.grade.grade with a cache: samples often repeat a program or solution."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], Grade] = {}

    def __call__(self, problem: Problem, text: str) -> Grade:
        key = (problem.id, text)
        if key not in self._seen:
            self._seen[key] = grade(problem, text)
        return self._seen[key]


CODE_STOP = ("\n",)  # a program's steps are its lines


def step_stop(problems: Sequence[Problem]) -> tuple[str, ...]:
    """Where the steps of these problems' solutions end: a program's at each line, any other
    solution's at DEFAULT_STOP (labels, PRM training and PRM evaluation cut them alike)."""
    return CODE_STOP if problems and problems[0].domain == "code" else DEFAULT_STOP


def first_error(problem: Problem, steps: Sequence[str], check: Grader | None = None
                ) -> int | None:
    """The index of the first erroneous step of a finished solution, None when no step errs,
    as the generator's derivation defines it. Arithmetic: problems.arith.first_error. A
    program (its steps are the lines of the body): line k errs when the sample's lines up to
    k, completed by the reference's lines after k (the reference has one line per stage,
    then its return), fail the hidden tests in the sandbox; so a line that computes what
    its stage computes in other words is right, and a dropped or extra stage errs where the
    programs part."""
    if problem.domain != "code":
        return arith.first_error(problem, tuple(steps))
    check = check or Grader()
    reference = problem.metadata["solution"][len(problem.prompt):].splitlines(keepends=True)
    for k in range(len(steps)):
        if not check(problem, "".join(steps[:k + 1]) + "".join(reference[k + 1:])).correct:
            return k
    return None


def greedy_accuracy(engine: HFEngine, problems: Sequence[Problem]) -> float:
    """Share right at temperature 0, all problems in one batch (so the figure is exact to
    reproduce: the same rows in the same batch give the same floats)."""
    roots = [engine.root(p) for p in problems]
    kids = engine.expand(roots, 1, stop=None, max_tokens=cap(problems), temperature=0.0)
    check = Grader()
    return sum(check(p, cs[0].step.text).correct  # type: ignore[union-attr]
               for p, cs in zip(problems, kids)) / len(problems)


def fixed_set(task: Task = TASKS["arith"]) -> list[Problem]:
    return task.generate(FIXED_N, seed=FIXED_SEED, difficulty=task.default_difficulty)


def level_metrics(engine: HFEngine, task: Task, difficulty: int, n: int, seed: int,
                  samples: int, temperature: float, n_sampled: int) -> dict[str, Any]:
    """Greedy on n problems; pass@k and the rest on the first n_sampled."""
    problems = task.generate(n, seed=seed, difficulty=difficulty)
    check = Grader()
    t0 = time.monotonic()
    greedy = solve_all(engine, problems, 1, temperature=0.0, seed=seed)
    subset = problems[:n_sampled]
    sampled = solve_all(engine, subset, samples, temperature=temperature, seed=seed)
    grades = [[check(p, t) for t in ts] for p, ts in zip(subset, sampled)]
    m = len(subset)
    row: dict[str, Any] = {
        "difficulty": difficulty, "n": n, "n_sampled": m,
        "greedy": sum(check(p, g[0]).correct for p, g in zip(problems, greedy)) / n,
        f"pass@{samples}": sum(any(g.correct for g in gs) for gs in grades) / m,
        "sample_accuracy": sum(g.correct for gs in grades for g in gs) / (m * samples)}
    if task is TASKS["code"]:
        verified = [g for gs in grades for g in gs if g.verified]
        row["verified"] = len(verified) / (m * samples)
        row["false_positive_share"] = (sum(g.false_positive for g in verified) / len(verified)
                                       if verified else 0.0)
    else:
        votes = []
        for p, ts in zip(subset, sampled):
            answers = [a for t in ts if (a := extract_answer(t)) is not None]
            top = Counter(normalize(a) for a in answers).most_common(1)
            votes.append(bool(top) and check(p, f"The answer is {top[0][0]}.").correct)
        row[f"maj@{samples}"] = sum(votes) / m
    row["minutes"] = round((time.monotonic() - t0) / 60, 2)
    return row


def speed(name: str, task: Task) -> dict[str, float]:
    """Seconds to load by name, and to decode 1,000 tokens one problem at a time."""
    t0 = time.monotonic()
    engine = HFEngine.load(name)
    load_s = time.monotonic() - t0
    tokens, i, t0 = 0, 0, time.monotonic()
    while tokens < 1000:
        p = task.generate(i + 1, seed=99, difficulty=task.default_difficulty)[i]
        child = engine.expand([engine.root(p)], 1, stop=None, max_tokens=1000 - tokens,
                              temperature=1.0, seed=i)[0][0]
        tokens += len(child.step.token_ids)  # type: ignore[union-attr]
        i += 1
    decode_s = (time.monotonic() - t0) * 1000 / tokens
    return {"load_seconds": round(load_s, 2), "decode_1000_tokens_seconds": round(decode_s, 2)}


def evaluate(name: str, *, n: int = 500, seed: int = 12345, levels: Sequence[int] | None = None,
             samples: int = 16, temperature: float = 0.8, sampled: int | None = None,
             hard_sampled: int = 100) -> dict[str, Any]:
    """The table of the module docstring. Sampled columns use the first `sampled` problems
    (default all n) at the first level and `hard_sampled` at the others."""
    if seed >= 1_000_000:
        raise ValueError("seeds >= 1,000,000 are training data; pick a smaller one")
    from training import reasoners

    task = task_of(name)
    levels = levels or (task.default_difficulty, task.hard_difficulty)
    record: dict[str, Any] = {"model": name, "eval_seed": seed, "samples": samples,
                              "temperature": temperature, "threads": torch.get_num_threads(),
                              "grader": "verifiers.grade.grade (math: verifiers.math.verify; "
                                        "code: hidden tests in the sandbox)"}
    record.update(speed(name, task))
    engine = HFEngine.load(name)
    record["fixed_set"] = {"how": f"generate({FIXED_N}, seed={FIXED_SEED}, difficulty="
                                  f"{task.default_difficulty}), one batch, temperature 0",
                           "greedy": greedy_accuracy(engine, fixed_set(task))}
    record["levels"] = []
    for i, level in enumerate(levels):
        record["levels"].append(level_metrics(engine, task, level, n, seed, samples,
                                              temperature, min(n, sampled or n) if i == 0
                                              else min(n, hard_sampled)))
        print(table(record), flush=True)
    folder = reasoners.model_dir(name) if name in reasoners.NAMES else Path(name)  # or a path
    path = folder / "metrics.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {path}")
    return record


@printout
def table(record: dict[str, Any]) -> Iterator[str]:
    k = record["samples"]
    extra = ([f"maj@{k}"] if any(f"maj@{k}" in lv for lv in record.get("levels", []))
             else ["verified", "false_positive_share"])
    yield (f"{record['model']}: held-out problems (seed {record['eval_seed']}), {k} samples "
           f"at T={record['temperature']}; greedy over n, sampled columns over n_sampled")
    yield " ".join(f"{c:>10}" for c in ["difficulty", "n", "greedy", "n_sampled", f"pass@{k}",
                                        *extra, "per-sample"])
    for lv in record.get("levels", []):
        cells = [str(lv["difficulty"]), str(lv["n"]), f"{lv['greedy']:.1%}",
                 str(lv["n_sampled"]), f"{lv[f'pass@{k}']:.1%}",
                 *(f"{lv[c]:.1%}" for c in extra), f"{lv['sample_accuracy']:.1%}"]
        yield " ".join(f"{c:>10}" for c in cells)
    yield (f"fixed 50-problem set greedy: {record['fixed_set']['greedy']:.1%}; load "
           f"{record['load_seconds']} s; 1,000 tokens (batch 1) "
           f"{record['decode_1000_tokens_seconds']} s")


def main(argv: list[str] | None = None) -> None:
    args = parse(PROG, __doc__, OPTIONS, argv)
    torch.set_num_threads(args.threads)
    evaluate(args.name, n=args.n, seed=args.seed, levels=args.levels, samples=args.samples,
             temperature=args.temperature, sampled=args.sampled,
             hard_sampled=args.hard_sampled)


if __name__ == "__main__":
    main()
