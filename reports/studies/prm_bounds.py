"""What bounds a learned PRM: its step AUC against the truth, beside what each variant learns.

    python -m reports.studies.prm_bounds --work runs/prm/b --variants mc:1:5e-4,truth:1:5e-4 \
        [--prm tiny-arith-prm]

On the validation paths of a labelling run (WORK/val.jsonl) every step gets its true label
from the generator's derivation (problems.arith.first_error: positive while no step up to it
errs). Printed, each as a step AUC against that truth:
  depth alone          earlier steps score higher (what a PRM learns if it learns nothing);
  the labels           the Monte-Carlo labels themselves, where they label a step;
  the policy's surprise  no training: a step scores the policy's lowest token log-probability
                       on the path so far (every token; digits only): how much of the truth
                       the policy's own beliefs already hold, for a PRM to learn to read;
  --prm                a trained PRM (a name or folder);
  ..., arithmetic      for the surprise and --prm, the AUC against each step's own
                       arithmetic instead (equation_holds: is its one equation right?),
                       over the steps with one equation: does it tell a slip from a right
                       step, wherever the step stands;
  each --variants      LABELS:EPOCHS:LR[:FORMAT], a PRM trained here on WORK/labels.jsonl
                       as training.prm_train trains (tiny-arith init, --lm-weight, one thread,
                       FORMAT math_shepherd (default) or policy: training.prm_train's --format),
                       with LABELS "mc" (the Monte-Carlo labels) or "truth" (the derivation's:
                       what perfect labels would teach the same model in the same time).
Training on the truth separates the two bounds: label noise (mc falls short of truth) and
learning (truth itself falls short of 1).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from search.cli import parse
from training.prm_labels import LabelledPath, read_rows

PROG = "python -m reports.studies.prm_bounds"
OPTIONS: dict[str, dict[str, Any]] = {
    "--work": dict(type=Path, default=Path("runs/prm/b")),
    "--policy": dict(default="tiny-arith"),
    "--prm": dict(default=None, help="a trained PRM to measure too (name or folder)"),
    "--variants": dict(default="", help="LABELS:EPOCHS:LR[:FORMAT],... (LABELS: mc or "
                       "truth; FORMAT: math_shepherd or policy)"),
    "--lm-weight": dict(type=float, default=1.0),
    "--seed": dict(type=int, default=0),
}


def true_labels(path: LabelledPath) -> LabelledPath:
    """The path with every step labelled by the derivation (arith problems only)."""
    from problems.arith import first_error, problem_of

    fe = first_error(problem_of(path.problem_id), list(path.steps))
    bad = len(path.steps) if fe is None else fe
    return LabelledPath(path.problem_id, path.prompt, path.answer, path.steps,
                        tuple(1.0 if j < bad else 0.0 for j in range(len(path.steps))),
                        path.correct)


def step_scores(model: Any, tok: Any, fmt: Any, paths: Sequence[LabelledPath]) -> list[float]:
    """A PRM's score of every labelled step of `paths`, in order, read as training.prm_train
    reads them in training."""
    from rewards.prm import label_ids
    from training.prm_train import Batches, read

    pair = label_ids(tok, fmt)
    assert pair is not None
    return read(model, Batches(tok, fmt, paths), pair)[1]


def equation_holds(step: str) -> bool | None:
    """Whether the one equation of a step is right arithmetic (a division exactly: 58 / 4 =
    14 is wrong); None for a step with no equation or more than one."""
    from problems.arith import EQUATION, holds

    found = EQUATION.findall(step)
    if len(found) != 1:
        return None
    a, op, b, c = found[0]
    return holds(int(a), op, int(b), int(c))


def arithmetic_auc(scores: Sequence[float], paths: Sequence[LabelledPath]) -> float:
    """AUC of per-step scores (one per step of `paths`, in order) against each step's own
    arithmetic (equation_holds), over the steps with one equation: whether a scorer tells a
    wrong equation from a right one wherever it stands."""
    from training.value_train import auc

    pairs = [(s, ok) for s, ok in zip(scores, (equation_holds(t) for p in paths
                                                for t in p.steps)) if ok is not None]
    return auc([s for s, _ in pairs], [ok for _, ok in pairs])


def surprise_scores(engine: Any, paths: Sequence[LabelledPath]) -> dict[str, list[float]]:
    """Per step of every path, the policy's lowest token log-probability on the path up to
    the step's end, over every token of the steps and over their digits only: the
    log-probabilities the engine gives the path's own tokens when it forces them (extend)."""
    from search.types import Problem

    out: dict[str, list[float]] = {"every token": [], "digits": []}
    for start in range(0, len(paths), 64):  # 64 paths' trees in memory at a time
        chunk = paths[start:start + 64]
        nodes = [engine.root(Problem(prompt=p.prompt, id=p.problem_id)) for p in chunk]
        forced: list[list[Any]] = [[] for _ in chunk]  # each path's steps, as the engine read them
        for j in range(max(len(p.steps) for p in chunk)):
            live = [i for i, p in enumerate(chunk) if j < len(p.steps)]
            kids = engine.extend([nodes[i] for i in live], [chunk[i].steps[j] for i in live])
            for i, kid in zip(live, kids):
                nodes[i] = kid
                forced[i].append(kid.step)
        for steps in forced:
            low = {k: 0.0 for k in out}
            for step in steps:
                pieces = engine.tokenizer.convert_ids_to_tokens(list(step.token_ids))
                for piece, lp in zip(pieces, step.logprobs):
                    low["every token"] = min(low["every token"], lp)
                    if piece.strip().isdigit():
                        low["digits"] = min(low["digits"], lp)
                for k in out:
                    out[k].append(low[k])
    return out


def main(argv: Sequence[str] | None = None) -> int:
    import torch

    from rewards.prm import HFPRM, MATH_SHEPHERD
    from search.engines.hf import HFEngine
    from training.prm_train import build, policy_format, train
    from training.value_train import auc

    args = parse(PROG, __doc__, OPTIONS, argv)
    torch.set_num_threads(1)
    engine = HFEngine.load(args.policy)
    val = [LabelledPath.of(r) for r in read_rows(args.work / "val.jsonl")]
    truth = [true_labels(p) for p in val]
    positive = [y is not None and y > 0.5 for p in truth for y in p.labels]
    out: dict[str, float] = {
        "depth alone": auc([-j for p in truth for j in range(len(p.steps))], positive),
        "the Monte-Carlo labels": auc(
            [lab for p in val for lab in p.labels if lab is not None],
            [t is not None and t > 0.5 for p, q in zip(val, truth)
             for lab, t in zip(p.labels, q.labels) if lab is not None])}
    for kind, scores in surprise_scores(engine, truth).items():
        out[f"the policy's surprise ({kind})"] = auc(scores, positive)
        out[f"the policy's surprise ({kind}), arithmetic"] = arithmetic_auc(scores, truth)
    if args.prm:  # loaded as a search loads it: embedded name or folder, declared format
        prm = HFPRM.load(args.prm, fast=False)
        scores = step_scores(prm.model, prm.tokenizer, prm.fmt, truth)
        out[f"PRM {args.prm}"] = auc(scores, positive)
        out[f"PRM {args.prm}, arithmetic"] = arithmetic_auc(scores, truth)
    rows = [LabelledPath.of(r) for r in read_rows(args.work / "labels.jsonl")]
    for spec in filter(None, args.variants.split(",")):
        kind, epochs, lr, form = (spec.split(":") + [MATH_SHEPHERD.family])[:4]
        if kind not in ("mc", "truth") or form not in ("policy", MATH_SHEPHERD.family):
            raise SystemExit(f"a variant is mc|truth:EPOCHS:LR[:policy|math_shepherd], "
                             f"got {spec!r}")
        t0 = time.perf_counter()
        fmt = policy_format(engine) if form == "policy" else MATH_SHEPHERD
        model, tok = build(args.policy, fmt=fmt, seed=args.seed)
        train(model, tok, fmt, rows if kind == "mc" else [true_labels(p) for p in rows],
              val, epochs=int(epochs), lr=float(lr), lm_weight=args.lm_weight, seed=args.seed,
              progress=False)
        out[f"trained on {kind} labels, {epochs} epoch(s), lr {lr}, {form} format"] = \
            auc(step_scores(model, tok, fmt, truth), positive)
        print(f"{spec}: {(time.perf_counter() - t0) / 60:.1f} min")
    for name, value in out.items():
        print(f"{name:<60} {value:.3f}")
    (args.work / "bounds.json").write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
