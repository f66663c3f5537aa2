"""Train a process reward model from a policy's own rollouts: one command, resumable.

    python -m training.prm_train --policy tiny-arith --out training/models/tiny-arith-prm

1. Label: the policy samples solutions to training problems and Monte-Carlo completions
   label their steps (training.prm_labels: Math-Shepherd's soft or hard estimate, or PAV's
   progress; OmegaPRM's binary search for hard labels). Rows land in WORK/labels.jsonl (and
   WORK/val.jsonl for the validation problems) and a re-run labels only what is missing.
2. Train: the PRM is a causal LM read as Math-Shepherd's are: a step's reward is P("+") /
   (P("+") + P("-")) after its tag. By default (--format math_shepherd) it reads "question
   step1 ки\\nstep2 ки\\n..." as the hub's Math-Shepherd does; --format policy
   (policy_format) reads the policy's own text, its prompt and its steps with their
   delimiter "\\n\\n" as the tag, so the policy's weights meet the text they were trained
   on. The format is saved with the checkpoint (rewards.prm.declare_format), and
   rewards.prm reads it from there. The PRM starts from the policy's weights (--init
   policy; a tag's characters join the vocabulary where the tokenizer cannot spell them)
   or from scratch (--init scratch, the policy's architecture). The loss is the
   cross-entropy of that two-way softmax against each labelled step's label (soft labels as
   targets in [0, 1]), every step of a path read in one forward. Each epoch is checkpointed
   in WORK; the epoch with the best validation loss is kept. A program's steps are its lines
   (training.evaluate.step_stop), a worked solution's its paragraphs. --grow K adds K layers
   on top of the policy's that start as the identity (training.prm_grow); --drills N first
   trains one epoch on N arithmetic equation drills, each step labelled by its own
   arithmetic (training.arith_drills), so the PRM can tell a slip from a right step.
3. Save: save_pretrained (model and tokenizer) to OUT with prm.json (the command, the
   problems' generator seeds, label counts, labelling cost, the prefill the shared-prefix
   tree saved, validation figures, minutes). `scorer="prm:OUT"` (or the embedded name) loads
   it as any hub PRM: rewards.prm.HFPRM.load.
"""

from __future__ import annotations

import json
import math
import random
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from rewards.prm import (
    MATH_SHEPHERD,
    PRMFormat,
    declare_format,
    label_ids,
    prompt_ids,
    step_ids,
)
from search.engines.base import DEFAULT_STOP
from search.types import Problem
from training.prm_grow import FRESH_LR_SCALE, drills_for, grow_layers
from training.prm_labels import (
    LABELS,
    SEARCHES,
    LabelConfig,
    LabelledPath,
    label_problems,
    read_rows,
    saved,
    spent,
)


def policy_format(engine: Any, stop: Sequence[str] = DEFAULT_STOP) -> PRMFormat:
    """The policy's own text as a PRM of Math-Shepherd's kind reads it: the engine's prompt
    (its plain template, or the chat template with its system prompt) and the steps with
    their delimiter (the first of `stop`) as the tag, "+"/"-" read after it."""
    prompt = engine.prompt
    return PRMFormat("math_shepherd", step_tag=stop[0], good="+", bad="-",
                     chat=engine.chat, system=prompt.system_prompt,
                     question_template=prompt.template)


FORMAT_CHOICES = (MATH_SHEPHERD.family, "policy")


def encode(tok: Any, fmt: PRMFormat, path: LabelledPath
           ) -> tuple[list[int], list[int], list[float], list[int]]:
    """(ids, positions, labels, text): the path as the PRM reads it; for each labelled step
    the position whose output is its reward (the last token of its text + tag); and the
    positions of the steps' own text tokens (not the tags), for the language-model loss."""
    ids = prompt_ids(tok, fmt, path.prompt)
    positions, labels, text = [], [], []
    for step, label in zip(path.steps, path.labels):
        own = step_ids(tok, fmt, step)
        tag = len(own) - len(tok(step.strip(), add_special_tokens=False)["input_ids"])
        text += range(len(ids), len(ids) + len(own) - max(tag, 0))
        ids += own
        if label is not None:
            positions.append(len(ids) - 1)
            labels.append(float(label))
    return ids, positions, labels, text


def build(policy: str, *, init: str = "policy", fmt: PRMFormat = MATH_SHEPHERD, seed: int = 0,
          grow: int = 0) -> tuple[Any, Any]:
    """(model, tokenizer) of a new PRM: the policy's weights (init="policy") or its
    architecture freshly initialised (init="scratch"), with `grow` more decoder layers on top
    (grow_layers); the step tag's characters are added to the vocabulary where the
    tokenizer would spell them as unknown."""
    from transformers import AutoModelForCausalLM

    from search.models import load_model

    model, tok, _ = load_model(policy)
    torch.manual_seed(seed)  # the new tag embedding is drawn at random
    unk = getattr(tok, "unk_token_id", None)
    if unk is not None and unk in step_ids(tok, fmt, "x"):
        tok.add_tokens([fmt.step_tag.strip()])
        model.resize_token_embeddings(len(tok))
    if init == "scratch":
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(model.config)
    elif init != "policy":
        raise ValueError(f"init must be 'policy' or 'scratch', got {init!r}")
    label_ids(tok, fmt)  # "+" and "-" must be single tokens: a clear error before training
    grow_layers(model, grow)
    return model.float().train(), tok


def hidden_states(model: Any, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, T, hidden]: the decoder's last hidden states (the LM head is applied only where
    it is read)."""
    return model.get_decoder()(input_ids=ids, attention_mask=mask).last_hidden_state


def pair_logits(model: Any, hidden: torch.Tensor, pair: tuple[int, int]) -> torch.Tensor:
    """[..., 2] logits of the (good, bad) tokens from hidden states [..., hidden]."""
    head = model.get_output_embeddings()
    out = hidden @ head.weight[list(pair)].T
    return out + head.bias[list(pair)] if getattr(head, "bias", None) is not None else out


class Batches:
    """Encoded paths padded into batches (right padding; positions are unchanged by it).
    A batch: ids [B, T], mask [B, T], the labelled positions (rows, cols) and their labels,
    and the text positions (rows, cols) of the paths that grade correct (the LM loss's)."""

    def __init__(self, tok: Any, fmt: PRMFormat, paths: Sequence[LabelledPath]) -> None:
        self.items = [(*e, p.correct) for p in paths if (e := encode(tok, fmt, p))[1]]
        self.pad = int(tok.pad_token_id if tok.pad_token_id is not None else 0)

    def __call__(self, order: Sequence[int], size: int):  # -> Iterator of tensor tuples
        for start in range(0, len(order), size):
            chunk = [self.items[i] for i in order[start:start + size]]
            width = max(len(item[0]) for item in chunk)
            ids = torch.full((len(chunk), width), self.pad, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            rows, cols, labels, lm_rows, lm_cols = [], [], [], [], []
            for b, (seq, pos, lab, text, correct) in enumerate(chunk):
                ids[b, :len(seq)] = torch.tensor(seq)
                mask[b, :len(seq)] = 1
                rows += [b] * len(pos)
                cols += pos
                labels += lab
                if correct:  # position t - 1 predicts text token t
                    lm_rows += [b] * len(text)
                    lm_cols += [t - 1 for t in text]
            yield (ids, mask, torch.tensor(rows), torch.tensor(cols), torch.tensor(labels),
                   torch.tensor(lm_rows, dtype=torch.long), torch.tensor(lm_cols, dtype=torch.long))


def loss_and_scores(model: Any, batch: tuple[torch.Tensor, ...], pair: tuple[int, int], *,
                    lm_weight: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The cross-entropy of the two-way softmax against the labels (plus lm_weight times
    the language-model loss on the text of paths that grade correct); the scores; the
    labels."""
    ids, mask, rows, cols, labels, lm_rows, lm_cols = batch
    hidden = hidden_states(model, ids, mask)
    logp = torch.log_softmax(pair_logits(model, hidden[rows, cols], pair), -1)
    loss = -(labels * logp[:, 0] + (1 - labels) * logp[:, 1]).mean()
    if lm_weight and len(lm_rows):
        logits = model.get_output_embeddings()(hidden[lm_rows, lm_cols])
        loss = loss + lm_weight * torch.nn.functional.cross_entropy(
            logits.float(), ids[lm_rows, lm_cols + 1])
    return loss, logp[:, 0].exp(), labels


def read(model: Any, data: Batches, pair: tuple[int, int], size: int = 64
         ) -> tuple[list[float], list[float], list[float]]:
    """(each batch's loss times its steps, every labelled step's score, its label), in the
    order of `data`, read in eval mode without gradients (the model's mode is restored)."""
    was_training = model.training
    model.eval()
    losses, scores, labels = [], [], []
    with torch.no_grad():
        for batch in data(range(len(data.items)), size):
            loss, s, y = loss_and_scores(model, batch, pair)
            losses.append(loss.item() * len(y))
            scores += s.tolist()
            labels += y.tolist()
    model.train(was_training)
    return losses, scores, labels


def evaluate(model: Any, data: Batches, pair: tuple[int, int], size: int = 64
             ) -> dict[str, float]:
    """Loss and AUC (positive: label > 1/2) over every labelled step of `data`."""
    from training.value_train import auc

    losses, scores, labels = read(model, data, pair, size)
    positive = [y > 0.5 for y in labels]
    return {"loss": sum(losses) / len(labels),
            "auc": auc(scores, positive) if 0 < sum(positive) < len(positive) else math.nan,
            "steps": len(labels)}


def train(model: Any, tok: Any, fmt: PRMFormat, paths: Sequence[LabelledPath],
          val: Sequence[LabelledPath], *, epochs: int = 8, lr: float = 5e-4,
          batch_size: int = 32, lm_weight: float = 0.0, seed: int = 0, fresh: int = 0,
          work: Path | None = None, progress: bool = True) -> list[dict[str, float]]:
    """Train in place; returns each epoch's validation figures. The last `fresh` decoder
    layers (grown ones) learn at FRESH_LR_SCALE times lr. With `work`, each epoch is
    checkpointed there and a re-run resumes after the last one; the model ends with the
    weights of the epoch of lowest validation loss."""
    from tqdm import tqdm

    pair = label_ids(tok, fmt)
    assert pair is not None, "an LM-type PRM format has good and bad tokens"
    data, held = Batches(tok, fmt, paths), Batches(tok, fmt, val)
    if not data.items:
        raise ValueError("no labelled step to train on")
    layers = model.get_decoder().layers
    grown = {id(p) for layer in list(layers)[len(layers) - fresh:] for p in layer.parameters()}
    groups = [{"params": [p for p in model.parameters() if id(p) not in grown], "lr": lr},
              {"params": [p for p in model.parameters() if id(p) in grown],
               "lr": lr * FRESH_LR_SCALE}]
    opt = torch.optim.AdamW([g for g in groups if g["params"]], weight_decay=0.01)
    steps = max(1, epochs * math.ceil(len(data.items) / batch_size))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: max(0.0, 1 - i / steps))
    history: list[dict[str, float]] = []
    best: tuple[float, dict[str, torch.Tensor]] | None = None
    ckpt = work / "train.pt" if work else None
    if work is not None:
        work.mkdir(parents=True, exist_ok=True)
    if ckpt is not None and ckpt.is_file():
        state = torch.load(ckpt, weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        sched.load_state_dict(state["sched"])
        history, best = state["history"], state["best"]
    rng = random.Random(seed)
    torch.manual_seed(seed)
    for epoch in range(epochs):
        order = list(range(len(data.items)))
        rng.shuffle(order)  # drawn every epoch, also the resumed ones: same order as unbroken
        if epoch < len(history):
            continue
        bar = tqdm(data(order, batch_size), total=math.ceil(len(order) / batch_size),
                   desc=f"training epoch {epoch + 1}/{epochs}", unit="batch",
                   disable=not progress)
        for batch in bar:
            loss, _, _ = loss_and_scores(model, batch, pair, lm_weight=lm_weight)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            bar.set_postfix_str(f"loss {loss.item():.3f}", refresh=False)
        figures = {"epoch": epoch + 1, **evaluate(model, held, pair)}
        history.append(figures)
        if progress:
            print(f"epoch {epoch + 1}: validation loss {figures['loss']:.4f}, AUC "
                  f"{figures['auc']:.4f}", file=sys.stderr)
        if best is None or figures["loss"] < best[0]:
            best = (figures["loss"], {k: v.detach().clone() for k, v in model.state_dict().items()})
        if ckpt is not None:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                        "sched": sched.state_dict(), "history": history, "best": best}, ckpt)
    if best is not None:
        model.load_state_dict(best[1])
    return history


def problems_for(policy: str, n: int, levels: Sequence[int], seed: int) -> list[Problem]:
    """n problems of the policy's task, levels cycled, problem i the i-th of its level's
    stream from generator seed `seed`."""
    from training.evaluate import TASKS, task_of
    from training.reasoners import NAMES

    task = task_of(policy) if policy in NAMES else TASKS["arith"]
    per = {lv: task.generate(n // len(levels) + 1, seed=seed, difficulty=lv) for lv in levels}
    return [per[levels[i % len(levels)]][i // len(levels)] for i in range(n)]


PROG = "python -m training.prm_train"
OPTIONS: dict[str, dict[str, Any]] = {  # the command line: flag -> add_argument's keywords
    "--policy": dict(default="tiny-arith", help="the engine's model: name, path or hub id"),
    "--out": dict(type=Path, required=True, help="folder of the saved PRM"),
    "--work": dict(type=Path, default=None,
                   help="labels and checkpoints (default runs/prm/<out's name>)"),
    "--problems": dict(type=int, default=600),
    "--val-problems": dict(type=int, default=100),
    "--levels": dict(default="4,5,6"),
    "--data-seed": dict(type=int, default=40_000, help="training problems' generator seed"),
    "--val-seed": dict(type=int, default=40_001, help="validation problems' generator seed"),
    "--labels": dict(default="hard", choices=LABELS),
    "--search": dict(default="binary", choices=SEARCHES),
    "--paths": dict(type=int, default=4),
    "--batch": dict(type=int, default=32, help="problems labelled per engine batch"),
    "--no-reuse": dict(action="store_true", help="hard labels: do not keep the completions "
                       "as labelled paths"),
    "--completions": dict(type=int, default=8),
    "--temperature": dict(type=float, default=0.8),
    "--alpha": dict(type=float, default=1.0, help="pav: weight of the progress term"),
    "--format": dict(default=MATH_SHEPHERD.family, choices=FORMAT_CHOICES,
                     help="the text the PRM reads: the policy's own, or Math-Shepherd's"),
    "--init": dict(default="policy", choices=("policy", "scratch")),
    "--grow": dict(type=int, default=0, help="decoder layers added on top of the policy's "
                   "(grow_layers)"),
    "--drills": dict(type=int, default=0, help="arithmetic: equation drill paths trained on "
                     "(one epoch) before the labels (training.arith_drills)"),
    "--drill-seed": dict(type=int, default=40_010, help="the drills' generator seed"),
    "--drill-lr": dict(type=float, default=1e-3),
    "--epochs": dict(type=int, default=8),
    "--lr": dict(type=float, default=5e-4),
    "--batch-size": dict(type=int, default=32),
    "--lm-weight": dict(type=float, default=0.0, help="weight of a language-model loss on "
                        "the text of paths that grade correct (keeps the policy's knowledge)"),
    "--seed": dict(type=int, default=0),
    "--threads": dict(type=int, default=None),
    "--quiet": dict(action="store_true"),
}


def main(argv: list[str] | None = None) -> int:
    from search.cli import parse
    from training.evaluate import step_stop

    args = parse(PROG, __doc__, OPTIONS, argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from search.engines.hf import HFEngine

    t0 = time.perf_counter()
    work = args.work or Path("runs/prm") / args.out.name
    levels = [int(v) for v in args.levels.split(",")]
    sets = {"labels": problems_for(args.policy, args.problems, levels, args.data_seed),
            "val": problems_for(args.policy, args.val_problems, levels, args.val_seed)}
    cfg = LabelConfig(labels=args.labels, search=args.search, paths=args.paths,
                      completions=args.completions, temperature=args.temperature,
                      alpha=args.alpha, reuse=not args.no_reuse, stop=step_stop(sets["labels"]))
    engine = HFEngine.load(args.policy)
    fmt = policy_format(engine, cfg.stop) if args.format == "policy" else MATH_SHEPHERD
    cost = {}
    for name, probs in sets.items():
        c = label_problems(engine, probs, work / f"{name}.jsonl", cfg, seed=args.seed,
                           batch=args.batch, progress=not args.quiet)
        cost[name] = {**asdict(c), "prefill_saved": round(saved(c), 4)}
    label_minutes = (time.perf_counter() - t0) / 60
    del engine
    rows = [LabelledPath.of(r) for r in read_rows(work / "labels.jsonl")]
    val = [LabelledPath.of(r) for r in read_rows(work / "val.jsonl")]
    model, tok = build(args.policy, init=args.init, fmt=fmt, seed=args.seed, grow=args.grow)
    common = dict(batch_size=args.batch_size, lm_weight=args.lm_weight, seed=args.seed,
                  fresh=args.grow, progress=not args.quiet)
    drilled, t1 = None, time.perf_counter()
    if drills := drills_for(sets["labels"], args.drills, args.drill_seed):  # first, 1 epoch
        drilled = {"paths": len(drills), "generator_seed": args.drill_seed, "lr": args.drill_lr,
                   "history": train(model, tok, fmt, drills, val, epochs=1, lr=args.drill_lr,
                                    work=work / "drills", **common),
                   "minutes_this_run": round((time.perf_counter() - t1) / 60, 2)}
    history = train(model, tok, fmt, rows, val, epochs=args.epochs, lr=args.lr, work=work,
                    **common)
    args.out.mkdir(parents=True, exist_ok=True)
    model.eval().save_pretrained(args.out)
    tok.save_pretrained(args.out)
    declare_format(args.out, fmt)
    labels = [lab for r in rows for lab in r.labels if lab is not None]
    meta = {"command": "python -m training.prm_train " + shlex.join(argv or sys.argv[1:]),
            "policy": args.policy, "format": asdict(fmt), "init": args.init,
            "lm_weight": args.lm_weight, "grow": args.grow, "drills": drilled,
            "label_config": asdict(cfg),
            "training_problems": {"generator_seed": args.data_seed, "levels": levels,
                                  "n": args.problems},
            "validation_problems": {"generator_seed": args.val_seed, "levels": levels,
                                    "n": args.val_problems},
            "paths": len(rows), "labelled_steps": len(labels),
            "positive_share": round(sum(v > 0.5 for v in labels) / max(len(labels), 1), 4),
            "labelling": {name: spent(work / f"{name}.jsonl") for name in ("labels", "val")},
            "cost_this_run": cost, "history": history,
            "minutes": {"labelling_this_run": round(label_minutes, 2),
                        "total_this_run": round((time.perf_counter() - t0) / 60, 2)},
            "threads": torch.get_num_threads()}
    (args.out / "prm.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(json.dumps({k: meta[k] for k in ("paths", "labelled_steps", "positive_share",
                                            "minutes")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
