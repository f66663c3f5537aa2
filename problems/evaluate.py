"""Measure an embedded reasoner and record the table next to its weights (metrics.json).

    python -m problems.evaluate tiny-arith --n 500 --seed 12345 [--levels 5 9] [--samples 16]

Per difficulty level, on n held-out problems `problems.arith.generate(n, seed=seed,
difficulty=level)` (training only ever used seeds >= 1,000,000):
  greedy     accuracy of one temperature-0 solution per problem;
  pass@k     coverage: share of problems where any of k samples (temperature --temperature,
             default 1.0) is right;
  maj@k      accuracy of the majority answer of those k samples (ties: first seen).
Answers are graded with verifiers.math.verify(gold, solution text). Also: seconds to load
the model by name, seconds to decode 1,000 tokens one problem at a time (batch 1), and the
greedy accuracy on the fixed 50-problem set that tests/test_reasoners.py re-measures.
Decoding goes through HFEngine.expand with many roots at once, whole solutions per call.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from problems import arith
from search.engines.hf import HFEngine
from search.types import Problem
from verifiers.math import extract_answer, normalize, verify

FIXED_SEED, FIXED_N = 777, 50  # the fixed set: arith.generate(50, seed=777), default level
MAX_ROWS = 256  # rows (problems x samples) decoded together; bounds the KV cache in memory


def max_tokens(difficulty: int) -> int:
    """A solution's token cap, about 1.25x the longest gold solution at this level (205
    characters at 5 operations, 357 at 9): a row that never says <eos> costs the whole batch."""
    return 40 * difficulty + 60


def solve_all(engine: HFEngine, problems: Sequence[Problem], n: int, *, temperature: float,
              seed: int) -> list[list[str]]:
    """n whole solutions per problem (texts), decoded in batches of about MAX_ROWS rows."""
    out: list[list[str]] = []
    chunk = max(1, MAX_ROWS // n)
    for start in range(0, len(problems), chunk):
        part = problems[start:start + chunk]
        cap = max_tokens(max(int(p.metadata.get("difficulty", arith.DEFAULT_DIFFICULTY))
                             for p in part))
        roots = [engine.root(p) for p in part]
        kids = engine.expand(roots, n, stop=None, max_tokens=cap, temperature=temperature,
                             seed=seed + start)
        out += [[c.step.text for c in cs if c.step is not None] for cs in kids]
        engine.retain([])
    return out


def grade(problem: Problem, text: str) -> bool:
    return bool(verify(str(problem.answer), text).correct)


def greedy_accuracy(engine: HFEngine, problems: Sequence[Problem]) -> float:
    """Share right at temperature 0, all problems in one batch (so the figure is exact to
    reproduce: the same rows in the same batch give the same floats)."""
    roots = [engine.root(p) for p in problems]
    cap = max_tokens(max(int(p.metadata["difficulty"]) for p in problems))
    kids = engine.expand(roots, 1, stop=None, max_tokens=cap, temperature=0.0)
    engine.retain([])
    return sum(grade(p, cs[0].step.text) for p, cs in zip(problems, kids)  # type: ignore[union-attr]
               ) / len(problems)


def fixed_set() -> list[Problem]:
    return arith.generate(FIXED_N, seed=FIXED_SEED, difficulty=arith.DEFAULT_DIFFICULTY)


def level_metrics(engine: HFEngine, difficulty: int, n: int, seed: int, samples: int,
                  temperature: float, n_sampled: int) -> dict[str, Any]:
    """Greedy on n problems; pass@k, maj@k and per-sample accuracy on the first n_sampled."""
    problems = arith.generate(n, seed=seed, difficulty=difficulty)
    t0 = time.monotonic()
    greedy = solve_all(engine, problems, 1, temperature=0.0, seed=seed)
    subset = problems[:n_sampled]
    sampled = solve_all(engine, subset, samples, temperature=temperature, seed=seed)
    right_greedy = [grade(p, g[0]) for p, g in zip(problems, greedy)]
    right = [[grade(p, t) for t in ts] for p, ts in zip(subset, sampled)]
    votes = []
    for p, ts in zip(subset, sampled):
        answers = [a for t in ts if (a := extract_answer(t)) is not None]
        top = Counter(normalize(a) for a in answers).most_common(1)
        votes.append(bool(top) and grade(p, f"The answer is {top[0][0]}."))
    m = len(subset)
    return {"difficulty": difficulty, "n": n, "n_sampled": m, "greedy": sum(right_greedy) / n,
            f"pass@{samples}": sum(any(r) for r in right) / m,
            f"maj@{samples}": sum(votes) / m,
            "sample_accuracy": sum(map(sum, right)) / (m * samples),
            "minutes": round((time.monotonic() - t0) / 60, 2)}


def speed(name: str) -> dict[str, float]:
    """Seconds to load by name, and to decode 1,000 tokens one problem at a time."""
    t0 = time.monotonic()
    engine = HFEngine.load(name)
    load_s = time.monotonic() - t0
    tokens, i, t0 = 0, 0, time.monotonic()
    while tokens < 1000:
        p = arith.generate(i + 1, seed=99, difficulty=arith.DEFAULT_DIFFICULTY)[i]
        child = engine.expand([engine.root(p)], 1, stop=None, max_tokens=1000 - tokens,
                              temperature=1.0, seed=i)[0][0]
        tokens += len(child.step.token_ids)  # type: ignore[union-attr]
        engine.retain([])
        i += 1
    decode_s = (time.monotonic() - t0) * 1000 / tokens
    return {"load_seconds": round(load_s, 2), "decode_1000_tokens_seconds": round(decode_s, 2)}


def evaluate(name: str, *, n: int = 500, seed: int = 12345, levels: Sequence[int] = (5, 9),
             samples: int = 16, temperature: float = 1.0, sampled: int | None = None,
             hard_sampled: int = 100) -> dict[str, Any]:
    """The table of the module docstring. Sampled columns use the first `sampled` problems
    (default all n) at the first level and `hard_sampled` at the others: 16 samples of 500
    long solutions cost half an hour on a busy 2-core CPU."""
    if seed >= 1_000_000:
        raise ValueError("seeds >= 1,000,000 are training data; pick a smaller one")
    from problems import reasoners

    record: dict[str, Any] = {"model": name, "eval_seed": seed, "samples": samples,
                              "temperature": temperature, "threads": torch.get_num_threads(),
                              "grader": "verifiers.math.verify(gold, solution text)"}
    record.update(speed(name))
    engine = HFEngine.load(name)
    record["fixed_set"] = {"how": f"arith.generate({FIXED_N}, seed={FIXED_SEED}, difficulty="
                                  f"{arith.DEFAULT_DIFFICULTY}), one batch, temperature 0",
                           "greedy": greedy_accuracy(engine, fixed_set())}
    record["levels"] = []
    for i, level in enumerate(levels):
        record["levels"].append(level_metrics(engine, level, n, seed, samples, temperature,
                                              min(n, sampled or n) if i == 0
                                              else min(n, hard_sampled)))
        print(table(record), flush=True)
    folder = reasoners.model_dir(name) if name in reasoners.NAMES else Path(name)  # or a path
    path = folder / "metrics.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {path}")
    return record


def table(record: dict[str, Any]) -> str:
    k = record["samples"]
    lines = [f"{record['model']}: held-out problems (seed {record['eval_seed']}), {k} samples "
             f"at T={record['temperature']}; greedy over n, sampled columns over n_sampled",
             f"{'difficulty':>10} {'n':>5} {'greedy':>8} {'n_sampled':>9} {f'pass@{k}':>8} "
             f"{f'maj@{k}':>8} {'per-sample':>10}"]
    for lv in record.get("levels", []):
        lines.append(f"{lv['difficulty']:>10} {lv['n']:>5} {lv['greedy']:>8.1%} "
                     f"{lv['n_sampled']:>9} {lv[f'pass@{k}']:>8.1%} {lv[f'maj@{k}']:>8.1%} "
                     f"{lv['sample_accuracy']:>10.1%}")
    lines.append(f"fixed 50-problem set greedy: {record['fixed_set']['greedy']:.1%}; load "
                 f"{record['load_seconds']} s; 1,000 tokens (batch 1) "
                 f"{record['decode_1000_tokens_seconds']} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m problems.evaluate", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name")
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--seed", type=int, default=12345)
    ap.add_argument("--levels", type=int, nargs="+", default=[arith.DEFAULT_DIFFICULTY, 9])
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--sampled", type=int, default=None,
                    help="problems sampled at the first level (default: all n)")
    ap.add_argument("--hard-sampled", type=int, default=100,
                    help="problems sampled at levels after the first (default 100)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    evaluate(args.name, n=args.n, seed=args.seed, levels=args.levels, samples=args.samples,
             temperature=args.temperature, sampled=args.sampled,
             hard_sampled=args.hard_sampled)


if __name__ == "__main__":
    main()
