"""Training the value head (rewards.value_head, the scorer "value"): labels from the
generator's own rollouts, a logistic fit, its held-out AUC beside simpler baselines.

Labels follow Math-Shepherd (Wang et al. 2024): a step's label is the share of m sampled
completions from it that grade correct (verifiers.grade: the gold answer, or the hidden
tests for code).

    features, labels <- for sampled steps of training problems: ([h(step); conf(path)], share)
    head <- logistic regression on (features, soft labels), L2-regularised

Train: python -m training.value_train --model tiny-arith --problems 200
The head is saved next to the model it belongs to (value_head.safetensors + .json), with
its held-out AUC and the AUC of simpler baselines measured on the same steps.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from rewards.value_head import CONFIDENCE, HEAD_FILE, ValueHead, features, model_folder
from search.engines.base import DEFAULT_STOP
from search.types import Node, Problem


def fit(features: torch.Tensor, labels: torch.Tensor, *, l2: float = 1e-3, steps: int = 300,
        seed: int = 0) -> ValueHead:
    """Logistic regression with soft labels in [0, 1] (full-batch L-BFGS, deterministic)."""
    torch.manual_seed(seed)
    head = ValueHead(features.shape[1])
    head.mean.copy_(features.mean(0))
    head.std.copy_(features.std(0).clamp_min(1e-6))
    opt = torch.optim.LBFGS(head.linear.parameters(), max_iter=steps, line_search_fn="strong_wolfe")
    x = (features - head.mean) / head.std

    def closure() -> torch.Tensor:
        opt.zero_grad()
        logits = head.linear(x).squeeze(-1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)
        loss = loss + l2 * head.linear.weight.pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)  # type: ignore[arg-type]
    return head.eval()


def auc(scores: Sequence[float], positive: Sequence[bool]) -> float:
    """Area under the ROC curve: P(score of a positive > score of a negative), ties half."""
    pos = [s for s, p in zip(scores, positive) if p]
    neg = [s for s, p in zip(scores, positive) if not p]
    if not pos or not neg:
        raise ValueError("AUC needs both positive and negative examples")
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def save(head: ValueHead, folder: str | Path, meta: dict[str, Any]) -> None:
    from safetensors.torch import save_file

    folder = Path(folder)
    save_file({k: v.contiguous() for k, v in head.state_dict().items()}, str(folder / HEAD_FILE))
    (folder / "value_head.json").write_text(json.dumps(meta, indent=2) + "\n")


def rollout_labels(engine: Any, problems: Sequence[Problem], *, paths: int = 2,
                   completions: int = 4, step_tokens: int = 96, max_steps: int = 12,
                   temperature: float = 1.0, seed: int = 0,
                   stop: Sequence[str] = DEFAULT_STOP
                   ) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Math-Shepherd labels: for steps on sampled paths, the share of `completions` rollouts
    from the step that grade correct (a finished step: its own grade). Steps end at `stop`
    (code: lines). Returns features [N, hidden + len(CONFIDENCE)], labels [N] and, per step,
    the index of its problem."""
    from training.evaluate import Grader  # verifiers.grade, cached: samples repeat

    rng = random.Random(seed)
    check = Grader()
    step = {"max_tokens": step_tokens, "temperature": temperature, "stop": tuple(stop)}
    feats: list[torch.Tensor] = []
    labels: list[float] = []
    groups: list[int] = []
    for i, problem in enumerate(problems):
        steps: list[Node] = []
        frontier = engine.expand([engine.root(problem)], paths, seed=rng.getrandbits(32),
                                 **step)[0]
        for _ in range(max_steps):
            done = [n for n in frontier if n.finished]
            live = [n for n in frontier if not n.finished]
            rolls = engine.expand(live, completions, stop=None,
                                  max_tokens=step_tokens * max_steps, temperature=temperature,
                                  seed=rng.getrandbits(32)) if live else []
            steps += done + live
            labels += [float(check(problem, n.text).correct) for n in done]
            labels += [sum(check(problem, o.text).correct for o in outs) / len(outs)
                       for outs in rolls]
            groups += [i] * len(frontier)
            if not live:
                break
            frontier = [c[0] for c in engine.expand(live, 1, seed=rng.getrandbits(32), **step)]
        feats.append(features(engine, steps))
    return torch.cat(feats), torch.tensor(labels), groups


Split = tuple[torch.Tensor, torch.Tensor, list[int]]


def held_out(train: Split, test: Split, *, l2: float) -> tuple[ValueHead, dict[str, Any]]:
    """The head fitted on `train` and its AUC on `test` (positive: label > 1/2), beside
    baselines on the same steps: a head on the hidden state alone, one on the confidence
    figures alone, and the path's min log-probability by itself; also the mean AUC within
    each test group (problem difficulty), where difficulty cannot help."""
    (x_tr, y_tr, _), (x_te, y_te, g_te) = train, test
    hidden = x_tr.shape[1] - len(CONFIDENCE)
    positive = (y_te > 0.5).tolist()

    def fitted(cols: slice) -> tuple[ValueHead, list[float]]:
        head = fit(x_tr[:, cols], y_tr, l2=l2)
        with torch.no_grad():
            return head, head(x_te[:, cols]).tolist()

    head, scores = fitted(slice(None))
    within = [auc([scores[j] for j in idx], [positive[j] for j in idx])
              for g in sorted(set(g_te)) if (idx := [j for j, h in enumerate(g_te) if h == g])
              and 0 < sum(positive[j] for j in idx) < len(idx)]
    return head, {"test_auc": auc(scores, positive),
                  "test_auc_within_difficulty": sum(within) / len(within) if within else None,
                  "baselines": {"hidden_state_only": auc(fitted(slice(0, hidden))[1], positive),
                                "confidence_only": auc(fitted(slice(hidden, None))[1], positive),
                                "path_min_logprob": auc(x_te[:, hidden].tolist(), positive)},
                  "test_positive_share": sum(positive) / len(positive)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="tiny-arith")
    ap.add_argument("--problems", type=int, default=200, help="80%% train, 20%% test")
    ap.add_argument("--levels", type=int, nargs="+", default=None,
                    help="difficulties, cycled over the problems (default: the task's "
                         "default and the two on either side)")
    ap.add_argument("--l2", type=float, default=1e-2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="folder of the model (default: its own folder)")
    args = ap.parse_args(argv)
    from search.engines.hf import HFEngine
    from training import reasoners
    from training.evaluate import TASKS, step_stop, task_of

    engine = HFEngine.load(args.model, keep_hidden=True)
    task = task_of(args.model) if args.model in reasoners.NAMES else TASKS["arith"]
    d = task.default_difficulty
    levels = args.levels or [lv for lv in range(d - 2, d + 3) if lv >= 1]
    # problem i: the i-th of its level's generator stream (seeds 10,000+, never trained on)
    per_level = {lv: task.generate(args.problems // len(levels) + 1, seed=10_000 + args.seed,
                                   difficulty=lv) for lv in levels}
    probs = [per_level[lv][i // len(levels)]
             for i, lv in zip(range(args.problems), itertools.cycle(levels))]
    split = int(0.8 * len(probs))
    stop = step_stop(probs)
    train = rollout_labels(engine, probs[:split], seed=args.seed, stop=stop)
    x_te, y_te, g_te = rollout_labels(engine, probs[split:], seed=args.seed + 1, stop=stop)
    test = (x_te, y_te, [probs[split + g].metadata["difficulty"] for g in g_te])
    head, report = held_out(train, test, l2=args.l2)
    meta = {"model": args.model, "problems": args.problems, "levels": levels, "seed": args.seed,
            "steps_end_at": list(stop),
            "l2": args.l2, "features": ["hidden state", *CONFIDENCE],
            "train_steps": len(train[1]), "test_steps": len(y_te),
            **json.loads(json.dumps(report), parse_float=lambda v: round(float(v), 4))}
    try:
        out = Path(args.out) if args.out else model_folder(engine)
    except FileNotFoundError as err:
        raise SystemExit(f"{err}; give --out") from None
    save(head, out, meta)
    print(json.dumps(meta, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
