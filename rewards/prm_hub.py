"""A hub PRM behind the Scorer protocol, read in its format (rewards.prm_formats) by plain
batched forwards: each node's whole path (question and steps) encoded as the card encodes
it, right-padded into batches (a causal model's outputs at a row's own positions do not see
the padding after them), the reward read at the node's latest step.

A path is read whole on every call: the card's encoding of a step can depend on the text
around it, which a per-step cache (rewards.prm.HFPRM, for the project's own formats) would
have to assume away. Concurrent searches share the model; their forwards run one at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import torch

from rewards.prm_formats import LM_PAIR, Encoded, HubFormat
from rewards.prm_load import Rewards
from search.runtime.sched import Interrupted
from search.runtime.transfer import device_or_default
from search.session import Bindable
from search.types import Node, Problem

LOGIT_BUDGET = 1 << 27  # floats of [B, T, vocab] logits one forward of a causal-LM PRM may make
TOKEN_BUDGET = 1 << 14  # tokens one forward may hold
PROBE = ("What is 1 + 1?", ["1 + 1 = 2.", "The answer is 2."])


class HubPRM(Bindable):
    """A PRM of one hub format: score(problem, nodes) -> the reward of each node's latest
    step; step_rewards(question, steps) -> every step's (the card's list)."""

    name = "prm"

    def __init__(self, model: Any, tokenizer: Any, fmt: HubFormat, *,
                 device: str | torch.device | None = None) -> None:
        self.device = device_or_default(device)
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.fmt = fmt
        self.path_agg = fmt.path_agg
        self.pair = fmt.pair(tokenizer) if fmt.pair is not None else None
        self.rewards = Rewards(fmt.head)
        self.n_params = sum(p.numel() for p in self.model.parameters())
        vocab = int(getattr(model.config, "vocab_size", 1)) if fmt.head == LM_PAIR else 1
        self.batch_tokens = max(1, min(TOKEN_BUDGET, LOGIT_BUDGET // vocab))
        self.pad = int(getattr(tokenizer, "pad_token_id", None) or 0)
        self.load_seconds = 0.0  # set by the loader (rewards.prm.load_prm)
        self.lock = threading.Lock()
        # the format must read a path on this tokenizer (its tags single tokens, its chat
        # template there): a PRMFormatError now, not in the middle of a search
        self.encode(*PROBE)

    def encode(self, question: str, steps: Sequence[str]) -> Encoded:
        return self.fmt.encode(self.tokenizer, question, steps)

    def step_rewards(self, question: str, steps: Sequence[str]) -> list[float]:
        """Every step's reward for one path, as the card lists them."""
        (out,) = self._run([self.encode(question, steps)])
        return out

    def score(self, problem: Problem, nodes: Sequence[Node]) -> list[float]:
        if any(node.step is None for node in nodes):
            raise ValueError("a PRM scores steps; the root has none")
        self.meter.charge_scorer(calls=len(nodes))
        encoded = [self.encode(node.problem.prompt if node.problem else problem.prompt,
                               [n.step.text for n in node.path()[1:] if n.step is not None])
                   for node in nodes]
        return [steps[-1] for steps in self._run(encoded)]

    def _run(self, encoded: list[Encoded]) -> list[list[float]]:
        """Each path's step rewards, from forwards of at most batch_tokens padded tokens."""
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i].ids))
        out: list[list[float]] = [[] for _ in encoded]
        start = 0
        while start < len(order):
            stop = start + 1
            while stop < len(order) and \
                    (stop + 1 - start) * len(encoded[order[stop]].ids) <= self.batch_tokens:
                stop += 1
            rows = [encoded[i] for i in order[start:stop]]
            for i, values in zip(order[start:stop], self._forward(rows)):
                out[i] = values
            start = stop
        return out

    def _forward(self, rows: list[Encoded]) -> list[list[float]]:
        width = max(len(r.ids) for r in rows)
        ids = torch.full((len(rows), width), self.pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for b, r in enumerate(rows):
            ids[b, :len(r.ids)] = torch.tensor(r.ids)
            mask[b, :len(r.ids)] = 1
        if self.session.cancel.is_set():
            raise Interrupted("the search was cancelled")
        tokens = sum(len(r.ids) for r in rows)
        self.meter.charge_scorer(calls=0, tokens=tokens, flops=2.0 * self.n_params * tokens)
        with self.lock, torch.inference_mode():
            reward = self.rewards(self.model, ids.to(self.device), mask.to(self.device),
                                  self.pair).cpu()
        return [reward[b, r.at].tolist() for b, r in enumerate(rows)]
