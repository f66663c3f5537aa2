"""What bounds a learned PRM: its step AUC against the truth, beside what each variant learns.

    python -m reports.prm_bounds --work runs/prm/b --variants mc:1:5e-4,truth:1:5e-4 \
        [--prm tiny-arith-prm]

On the validation paths of a labelling run (WORK/val.jsonl) every step gets its true label
from the generator's derivation (problems.arith.first_error: positive while no step up to it
errs). Printed, each as a step AUC against that truth:
  depth alone          earlier steps score higher (what a PRM learns if it learns nothing);
  the labels           the Monte-Carlo labels themselves, where they label a step;
  --prm                a trained PRM (a name or folder);
  each --variants      LABELS:EPOCHS:LR, a PRM trained here on WORK/labels.jsonl as
                       rewards.prm_train trains (tiny-arith init, --lm-weight, one thread),
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

from problems.prm_labels import LabelledPath, read_rows
from search.cli import parse

PROG = "python -m reports.prm_bounds"
OPTIONS: dict[str, dict[str, Any]] = {
    "--work": dict(type=Path, default=Path("runs/prm/b")),
    "--policy": dict(default="tiny-arith"),
    "--prm": dict(default=None, help="a trained PRM to measure too (name or folder)"),
    "--variants": dict(default="", help="LABELS:EPOCHS:LR,... (LABELS: mc or truth)"),
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


def truth_auc(model: Any, tok: Any, paths: Sequence[LabelledPath]) -> float:
    """Step AUC of a PRM's scores against the true labels of `paths` (rewards.prm_train's
    validation figure, read on the truth)."""
    from rewards.prm import MATH_SHEPHERD, label_ids
    from rewards.prm_train import Batches, evaluate

    pair = label_ids(tok, MATH_SHEPHERD)
    assert pair is not None
    return evaluate(model, Batches(tok, MATH_SHEPHERD, paths), pair)["auc"]


def main(argv: Sequence[str] | None = None) -> int:
    import torch

    from problems.value_head import auc
    from rewards.prm import MATH_SHEPHERD
    from rewards.prm_train import build, train

    args = parse(PROG, __doc__, OPTIONS, argv)
    torch.set_num_threads(1)
    val = [LabelledPath.of(r) for r in read_rows(args.work / "val.jsonl")]
    truth = [true_labels(p) for p in val]
    out: dict[str, float] = {
        "depth alone": auc([-j for p in truth for j in range(len(p.steps))],
                           [y is not None and y > 0.5 for p in truth for y in p.labels]),
        "the Monte-Carlo labels": auc(
            [lab for p in val for lab in p.labels if lab is not None],
            [t is not None and t > 0.5 for p, q in zip(val, truth)
             for lab, t in zip(p.labels, q.labels) if lab is not None])}
    if args.prm:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from problems.reasoners import prm_folder

        where = str(prm_folder(args.prm) or args.prm)
        out[f"PRM {args.prm}"] = truth_auc(AutoModelForCausalLM.from_pretrained(where),
                                           AutoTokenizer.from_pretrained(where), truth)
    rows = [LabelledPath.of(r) for r in read_rows(args.work / "labels.jsonl")]
    for spec in filter(None, args.variants.split(",")):
        kind, epochs, lr = spec.split(":")
        if kind not in ("mc", "truth"):
            raise SystemExit(f"variant labels must be mc or truth, got {kind!r}")
        t0 = time.perf_counter()
        model, tok = build(args.policy, seed=args.seed)
        train(model, tok, MATH_SHEPHERD, rows if kind == "mc" else [true_labels(p) for p in rows],
              val, epochs=int(epochs), lr=float(lr), lm_weight=args.lm_weight, seed=args.seed,
              progress=False)
        out[f"trained on {kind} labels, {epochs} epoch(s), lr {lr}"] = truth_auc(model, tok,
                                                                                 truth)
        print(f"{spec}: {(time.perf_counter() - t0) / 60:.1f} min")
    for name, value in out.items():
        print(f"{name:<48} {value:.3f}")
    (args.work / "bounds.json").write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
