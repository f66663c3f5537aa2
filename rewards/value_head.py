"""A value-head PRM on the generator's own hidden states: scoring a step costs no forward.

The engine (HFEngine(keep_hidden=True)) records, for every generated step, the final hidden
state its last token was predicted from. A logistic head maps it to P(this path reaches a
correct answer). Labels follow Math-Shepherd (Wang et al. 2024): a step's label is the share
of m sampled completions from it whose final answer verifies against the gold answer.

    features, labels <- for sampled steps of training problems: (h(step), share correct)
    head <- logistic regression on (features, soft labels), L2-regularised
    score(step) = sigmoid(w . h(step) + b)

Train: python -m rewards.value_head --model tiny-arith --problems 200 --out <model dir>
The head is saved next to the model it belongs to (value_head.safetensors + .json).
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from search.budget import Meter
from search.types import Node, Problem

HEAD_FILE = "value_head.safetensors"


class ValueHead(torch.nn.Module):
    """Logistic head [hidden] -> P(correct). Inputs are standardised with stored stats."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(hidden, 1)
        self.mean: torch.Tensor
        self.std: torch.Tensor
        self.register_buffer("mean", torch.zeros(hidden))
        self.register_buffer("std", torch.ones(hidden))

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # [B, hidden] -> [B]
        return torch.sigmoid(self.linear((h - self.mean) / self.std)).squeeze(-1)


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


def load(folder: str | Path) -> ValueHead:
    from safetensors.torch import load_file

    path = Path(folder) / HEAD_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no value head at {path}; train one with "
                                "`python -m rewards.value_head --model <name>`")
    state = load_file(str(path))
    head = ValueHead(state["mean"].shape[0])
    head.load_state_dict(state)
    return head.eval()


def model_folder(engine: Any) -> Path:
    """The folder of the engine's model, where its head lives: an embedded reasoner's
    (problems.reasoners) or the local path it was loaded from."""
    from problems import reasoners

    name = str(getattr(engine, "name", ""))
    if name in reasoners.NAMES:
        return reasoners.model_dir(name)
    if Path(name).is_dir():
        return Path(name)
    raise FileNotFoundError(f"no model folder for engine {name!r}: a value head lives next to "
                            "an embedded reasoner or a locally saved model")


def value_scorer(engine: Any) -> ValueHeadScorer:
    """The scorer registered as "value": the head saved next to the engine's model. It turns
    on the engine's keep_hidden, so every step sampled from now on records its features."""
    head = load(model_folder(engine))
    engine.kv.keep_hidden = True
    return ValueHeadScorer(engine, head)


class ValueHeadScorer:
    """Scorer: the head applied to each node's recorded step features."""

    def __init__(self, engine: Any, head: ValueHead) -> None:
        if not engine.kv.keep_hidden:
            raise ValueError("a value head needs the engine built with keep_hidden=True")
        self.engine, self.head = engine, head
        self.meter = Meter()

    def score(self, problem: Problem, nodes: Sequence[Node]) -> list[float]:
        del problem
        missing = [n for n in nodes if n not in self.engine.step_features]
        if missing:
            raise ValueError(f"no step features for {missing[0]!r}: only steps sampled by this "
                             "engine with keep_hidden=True can be scored by its value head")
        x = torch.stack([self.engine.step_features[n] for n in nodes])
        self.meter.charge_scorer(calls=len(nodes), flops=2.0 * x.numel())
        with torch.no_grad():
            return self.head(x).tolist()


def rollout_labels(engine: Any, problems: Sequence[Problem], *, paths: int = 2,
                   completions: int = 4, step_tokens: int = 96, max_steps: int = 12,
                   temperature: float = 1.0, seed: int = 0
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Math-Shepherd labels: for steps on sampled paths, the share of `completions` rollouts
    from the step whose answer verifies. Returns features [N, hidden] and labels [N]."""
    from verifiers.math import verify

    rng = random.Random(seed)
    feats: list[torch.Tensor] = []
    labels: list[float] = []
    for problem in problems:
        assert problem.answer is not None
        frontier = engine.expand([engine.root(problem)], paths, max_tokens=step_tokens,
                                 temperature=temperature, seed=rng.getrandbits(32))[0]
        for _ in range(max_steps):
            for node in frontier:
                if node.finished:  # a finished step's label is its own correctness
                    feats.append(engine.step_features[node])
                    labels.append(float(verify(problem.answer, node.text).correct))
            live = [n for n in frontier if not n.finished]
            if not live:
                break
            rolls = engine.expand(live, completions, stop=None,
                                  max_tokens=step_tokens * max_steps, temperature=temperature,
                                  seed=rng.getrandbits(32))
            for node, outs in zip(live, rolls):
                feats.append(engine.step_features[node])
                labels.append(sum(verify(problem.answer, o.text).correct for o in outs) / len(outs))
            frontier = [c[0] for c in engine.expand(live, 1, max_tokens=step_tokens,
                                                    temperature=temperature,
                                                    seed=rng.getrandbits(32))]
        engine.retain([])
    return torch.stack(feats), torch.tensor(labels)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="tiny-arith")
    ap.add_argument("--problems", type=int, default=200)
    ap.add_argument("--difficulty", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="folder of the model (default: its own folder)")
    args = ap.parse_args(argv)
    from problems import arith
    from search.engines.hf import HFEngine

    engine = HFEngine.load(args.model, keep_hidden=True)
    kw = {"difficulty": args.difficulty} if args.difficulty else {}
    probs = arith.generate(args.problems, seed=10_000 + args.seed, **kw)
    split = int(0.8 * len(probs))
    x_tr, y_tr = rollout_labels(engine, probs[:split], seed=args.seed)
    x_te, y_te = rollout_labels(engine, probs[split:], seed=args.seed + 1)
    head = fit(x_tr, y_tr, seed=args.seed)
    with torch.no_grad():
        test_auc = auc(head(x_te).tolist(), (y_te > 0.5).tolist())
    meta = {"model": args.model, "problems": args.problems, "seed": args.seed,
            "train_steps": len(y_tr), "test_steps": len(y_te), "test_auc": round(test_auc, 4)}
    try:
        out = Path(args.out) if args.out else model_folder(engine)
    except FileNotFoundError as err:
        raise SystemExit(f"{err}; give --out") from None
    save(head, out, meta)
    print(json.dumps(meta))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
