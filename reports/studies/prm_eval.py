"""Judge process scorers the way the field judges PRMs, side by side on the same solutions.

    python -m reports.studies.prm_eval --scorers prm:tiny-arith-prm,value,steps \
        --problems 200 --data-seed 40002 --val-seed 40001 [--samples 16]

The policy samples `samples` solutions per problem step by step (training.prm_labels'
sampler); every scorer scores every step of every solution. Then, per scorer:

  first-error F1 (ProcessBench, Zheng et al. 2024): a scorer predicts a finished solution's
      first erroneous step as its first step scored below a threshold (or "none"); accuracy
      on the erroneous solutions (predicted index = true index) and on the correct ones
      (predicted "none"), F1 their harmonic mean. The threshold is chosen on the validation
      problems (--val-seed) and also reported at 1/2, ProcessBench's choice for PRMs. The
      true first error comes from the generator's derivation (training.evaluate.first_error:
      for arithmetic, wrong arithmetic or quantities not those of any correct derivation; for
      a program, whose steps are its lines, the first line after which the reference's
      remaining lines no longer pass the hidden tests).
  step AUC: a step is positive when no step up to it errs; AUC of its score against that.
  best-of-N reranking: for N in 1, 2, 4, ... samples, the accuracy of the answer chosen by
      the path score (min, last, product of step scores), by the score-weighted vote, by
      the majority vote and by an oracle (any of the N right: pass@N). Each problem's
      samples are cut into samples/N disjoint groups of N and the accuracies averaged.

--blur 0.35,0.5 adds, per sigma, the step checker made imperfect on purpose ("steps~0.5"):
each of its step scores v (1 / 0.5 / 0) becomes sigmoid(4 (v - 1/2 + sigma z)), z standard
normal (seeded): a checker that tells a wrong equation from a right one at AUC
Phi(1 / (sigma sqrt 2)), so the tables show how good a learned PRM's arithmetic must be
before its reranking pays.

Prints the tables, writes OUT/prm_eval.json, every solution with its step scores
(OUT/solutions.jsonl) and the figure OUT/prm_bon.png (.svg, .json).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from search.cli import parse, printout
from search.types import Node, Problem

AGGS = ("min", "last", "prod")
NS = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class Solution:
    """One sampled solution: per scorer its step scores; the truth about its steps."""

    problem: int  # index into the problem list
    steps: tuple[str, ...]
    scores: Mapping[str, tuple[float, ...]]
    answer: str | None
    correct: bool
    finished: bool
    first_error: int | None  # None: no erroneous step (finished solutions only)


def collect(engine: Any, scorers: Mapping[str, Any], problems: Sequence[Problem], *,
            samples: int, seed: int, temperature: float = 0.8) -> list[Solution]:
    """`samples` solutions per problem, every step scored by every scorer."""
    from search.answers import extract
    from training.evaluate import Grader, first_error, step_stop
    from training.prm_labels import LabelConfig, Labeller

    sampler = Labeller(engine, LabelConfig(paths=samples, temperature=temperature,
                                           stop=step_stop(problems)), seed=seed)
    grade = Grader()
    out: list[Solution] = []
    for start in range(0, len(problems), 16):  # 16 problems per engine batch
        chunk = problems[start:start + 16]
        leaves = sampler.sample(chunk)
        by_problem: dict[str, list[Node]] = {}
        for leaf in leaves:
            by_problem.setdefault(leaf.problem.id, []).append(leaf)
        for j, problem in enumerate(chunk):
            paths = [leaf.path()[1:] for leaf in by_problem[problem.id]]
            nodes = list({n.id: n for p in paths for n in p}.values())
            scored = {name: dict(zip((n.id for n in nodes), s.score(problem, nodes)))
                      for name, s in scorers.items()}
            for path in paths:
                leaf, steps = path[-1], tuple(n.step.text for n in path if n.step is not None)
                out.append(Solution(
                    start + j, steps, {k: tuple(v[n.id] for n in path) for k, v in scored.items()},
                    extract(problem, leaf.text) if leaf.finished else None,
                    leaf.finished and grade(problem, leaf.text).correct, leaf.finished,
                    first_error(problem, steps, grade) if leaf.finished else None))
    return out


def blur(sols: Sequence[Solution], base: str, sigma: float, *, seed: int = 0
         ) -> list[Solution]:
    """`sols` with one more scorer, f"{base}~{sigma}": `base`'s step scores blurred (module
    doc); same seed, same blur."""
    if sols and base not in sols[0].scores:
        raise ValueError(f"--blur needs the scorer {base!r} among --scorers")
    if not sigma > 0:
        raise ValueError(f"blur sigma must be > 0, got {sigma}")
    rng = random.Random(f"blur/{base}/{sigma}/{seed}")
    return [replace(s, scores={**s.scores, f"{base}~{sigma:g}": tuple(
        1 / (1 + math.exp(-4 * (v - 0.5 + sigma * rng.gauss(0, 1)))) for v in s.scores[base])})
            for s in sols]


def blur_auc(sigma: float) -> float:
    """The blurred checker's AUC between a wrong (0) and a right (1) step: P(1 + sigma z1 >
    0 + sigma z2) = Phi(1 / (sigma sqrt 2))."""
    return 0.5 * (1 + math.erf(1 / (2 * sigma)))


# -- first-error identification ------------------------------------------------------------
def predicted_error(scores: Sequence[float], tau: float) -> int | None:
    return next((i for i, s in enumerate(scores) if s < tau), None)


def first_error_f1(sols: Sequence[Solution], scorer: str, tau: float) -> dict[str, float]:
    """ProcessBench's figures over the finished solutions."""
    done = [s for s in sols if s.finished]
    err = [s for s in done if s.first_error is not None]
    ok = [s for s in done if s.first_error is None]
    acc_err = sum(predicted_error(s.scores[scorer], tau) == s.first_error for s in err)
    acc_ok = sum(predicted_error(s.scores[scorer], tau) is None for s in ok)
    a = acc_err / len(err) if err else math.nan
    b = acc_ok / len(ok) if ok else math.nan
    return {"f1": 2 * a * b / (a + b) if a + b > 0 else 0.0, "erroneous_acc": a,
            "correct_acc": b, "erroneous": len(err), "correct": len(ok), "threshold": tau}


def best_threshold(sols: Sequence[Solution], scorer: str) -> float:
    """The threshold of highest F1 on `sols`: midpoints between the scores seen, and 1/2."""
    values = sorted({v for s in sols if s.finished for v in s.scores[scorer]})
    cands = [0.5] + [(a + b) / 2 for a, b in zip(values, values[1:])]
    if len(cands) > 400:  # a grid of quantiles keeps this fast on graded scores
        cands = [0.5] + [values[int(q * (len(values) - 1) / 400)] for q in range(1, 400)]
    return max(cands, key=lambda t: (first_error_f1(sols, scorer, t)["f1"], -abs(t - 0.5)))


def step_auc(sols: Sequence[Solution], scorer: str) -> float:
    """AUC of step scores against "no error up to this step" (finished solutions)."""
    from training.value_train import auc

    scores, positive = [], []
    for s in sols:
        if not s.finished:
            continue
        bad = len(s.steps) if s.first_error is None else s.first_error
        scores += list(s.scores[scorer])
        positive += [i < bad for i in range(len(s.steps))]
    return auc(scores, positive)


# -- best-of-N reranking -----------------------------------------------------------------
def _groups(sols: Sequence[Solution], n: int) -> Iterator[list[Solution]]:
    by: dict[int, list[Solution]] = {}
    for s in sols:
        by.setdefault(s.problem, []).append(s)
    for group in by.values():
        for i in range(0, len(group) - n + 1, n):
            yield group[i:i + n]


def rerank(sols: Sequence[Solution], n: int, how: str, scorer: str | None = None,
           agg: str = "min") -> float:
    """Accuracy of the answer chosen among groups of n samples: how = "score" (path score
    `agg` of `scorer`'s steps), "weighted_vote", "vote" or "oracle"."""
    from search.aggregate import get
    from search.select import majority_vote, rule

    right = total = 0
    for group in _groups(sols, n):
        total += 1
        if how == "oracle":
            right += any(s.correct for s in group)
            continue
        # candidates as search.select reads them: an answer only where the path finished
        cands = [_candidate(s, get(agg)(s.scores[scorer]) if scorer else 0.0, i)
                 for i, s in enumerate(group)]
        chosen = (majority_vote if how == "vote" else rule(how))(_PROBLEM, cands)
        right += chosen is not None and group[chosen.node_id].correct
    return right / total if total else math.nan


_PROBLEM = Problem(prompt="(reranking)", id="rerank")  # vote keys read only the domain


def _candidate(s: Solution, score: float, i: int) -> Any:
    from search.types import Candidate

    return Candidate(text="".join(s.steps), answer=s.answer, score=score,
                     finished=s.finished, node_id=i)


def bon_table(sols: Sequence[Solution], scorers: Sequence[str], ns: Sequence[int]
              ) -> dict[str, dict[int, float]]:
    """Every curve of the best-of-N figure: label -> {N: accuracy}."""
    curves: dict[str, dict[int, float]] = {
        "oracle (pass@N)": {n: rerank(sols, n, "oracle") for n in ns},
        "majority vote": {n: rerank(sols, n, "vote") for n in ns}}
    for name in scorers:
        for agg in AGGS:
            curves[f"{name} {agg}"] = {n: rerank(sols, n, "score", name, agg) for n in ns}
        curves[f"{name} weighted vote (min)"] = {n: rerank(sols, n, "weighted_vote", name)
                                                 for n in ns}
    return curves


@printout
def table(report: Mapping[str, Any]) -> Iterator[str]:
    yield (f"{report['policy']}: {report['problems']} problems (level {report['levels']}, "
           f"generator seed {report['data_seed']}), {report['samples']} samples each; "
           f"thresholds chosen on seed {report['val_seed']}")
    yield f"{'scorer':<24} {'F1':>6} {'err acc':>8} {'ok acc':>7} {'tau':>6} {'F1@.5':>6} {'AUC':>6}"
    for name, fig in report["scorers"].items():
        f, h = fig["first_error"], fig["first_error_at_half"]
        yield (f"{name:<24} {f['f1']:6.3f} {f['erroneous_acc']:8.3f} {f['correct_acc']:7.3f} "
               f"{f['threshold']:6.3f} {h['f1']:6.3f} {fig['step_auc']:6.3f}")
    first = next(iter(report["scorers"].values()))["first_error"]
    yield (f"(finished solutions: {first['erroneous']} erroneous, {first['correct']} correct)")
    for name in report["scorers"]:
        if "~" in name:
            sigma = float(name.split("~")[1])
            yield f"({name}: the step checker blurred, arithmetic AUC {blur_auc(sigma):.3f})"
    ns = report["ns"]
    yield "best-of-N accuracy:  " + " ".join(f"{'N=' + str(n):>7}" for n in ns)
    for label, curve in report["bon"].items():
        yield f"{label:<40} " + " ".join(f"{curve[str(n)]:7.3f}" for n in ns)


def figure(report: Mapping[str, Any], out: Path) -> dict[str, Any]:
    from matplotlib.figure import Figure

    from reports.figures.plots import save

    fig = Figure(figsize=(7.5, 4.8))
    ax = fig.subplots()
    ns = report["ns"]
    for label, curve in report["bon"].items():
        if label.endswith((" last", " prod")) or "~" in label:
            continue  # min and the weighted vote tell the story (not blurred); the JSON keeps
            # the rest
        style = ":" if label.startswith(("oracle", "majority")) else "-"
        ax.plot(ns, [curve[str(n)] for n in ns], style, marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.set_xlabel("N (samples per problem)")
    ax.set_ylabel("accuracy")
    ax.set_title(f"best-of-N reranking, {report['policy']}, {report['problems']} problems "
                 f"(level {report['levels']}, seed {report['data_seed']})", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return save(fig, {"bon": report["bon"], "ns": ns}, out, "prm_bon")


PROG = "python -m reports.studies.prm_eval"
OPTIONS: dict[str, dict[str, Any]] = {
    "--policy": dict(default="tiny-arith"),
    "--scorers": dict(default="prm:tiny-arith-prm,value,steps"),
    "--problems": dict(type=int, default=200),
    "--val-problems": dict(type=int, default=100),
    "--levels": dict(default="5"),
    "--data-seed": dict(type=int, default=40_002),
    "--val-seed": dict(type=int, default=40_001),
    "--samples": dict(type=int, default=16),
    "--seed": dict(type=int, default=0),
    "--blur": dict(default="", help="sigmas: the step checker blurred to each (module doc)"),
    "--out": dict(type=Path, default=Path("runs/prm_eval")),
}


def main(argv: Sequence[str] | None = None) -> int:
    from search.engines.hf import HFEngine
    from search.scoring import load
    from training.prm_train import problems_for

    args = parse(PROG, __doc__, OPTIONS, argv)
    levels = [int(v) for v in args.levels.split(",")]
    engine = HFEngine.load(args.policy, keep_hidden=True)
    names = [s for s in args.scorers.split(",") if s]
    scorers = {name: load(name, engine=engine) for name in names}
    val = collect(engine, scorers, problems_for(args.policy, args.val_problems, levels,
                                                args.val_seed),
                  samples=args.samples, seed=args.seed + 1)
    test = collect(engine, scorers, problems_for(args.policy, args.problems, levels,
                                                 args.data_seed),
                   samples=args.samples, seed=args.seed)
    for sigma in [float(v) for v in args.blur.split(",") if v]:
        val, test = (blur(sols, "steps", sigma, seed=args.seed) for sols in (val, test))
        names.append(f"steps~{sigma:g}")
    ns = [n for n in NS if n <= args.samples]
    report = {"policy": args.policy, "problems": args.problems, "levels": args.levels,
              "data_seed": args.data_seed, "val_seed": args.val_seed,
              "samples": args.samples, "ns": ns,
              "scorers": {name: {"first_error": first_error_f1(test, name,
                                                               best_threshold(val, name)),
                                 "first_error_at_half": first_error_f1(test, name, 0.5),
                                 "step_auc": step_auc(test, name)} for name in names},
              "bon": {label: {str(n): v for n, v in curve.items()}
                      for label, curve in bon_table(test, names, ns).items()}}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "prm_eval.json").write_text(json.dumps(report, indent=1) + "\n")
    (args.out / "solutions.jsonl").write_text("".join(json.dumps(asdict(s)) + "\n" for s in test))
    figure(report, args.out)
    print(table(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
