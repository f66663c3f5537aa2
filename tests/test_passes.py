"""How a tick's Passes are grouped into forwards (search.runtime.passes.run_passes): per model,
in order, in chunks of at most `limit` tokens; a Pass that cannot merge runs alone."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import torch

from search.runtime.passes import Pass, run_passes


class Model:
    """A forward that merges: it records the Passes of each call and answers each with its
    own index (so the outputs can be traced back to their Passes)."""

    merges = True

    def __init__(self, merges: bool = True) -> None:
        self.merges = merges
        self.calls: list[list[int]] = []

    def handles(self, cache: Any, mask: Any) -> bool:
        return True

    def forward_many(self, passes: list[Pass]) -> list[int]:
        self.calls.append([p.cache.index for p in passes])
        return [p.cache.index for p in passes]

    def __call__(self, **kwargs: Any) -> int:
        index = kwargs["past_key_values"].index
        self.calls.append([index])
        return index


def a_pass(model: Model, index: int, tokens: int) -> Pass:
    ids = torch.zeros(1, tokens, dtype=torch.long)
    return Pass(model, ids, ids, SimpleNamespace(index=index, length=0), None, keep=None)


def greedy_chunks(sizes: list[int], limit: int) -> list[list[int]]:
    """The reference: indices in order, a new chunk where the next would pass the limit."""
    chunks: list[list[int]] = []
    total = 0
    for i, n in enumerate(sizes):
        if chunks and chunks[-1] and total + n <= limit:
            chunks[-1].append(i)
            total += n
        else:
            chunks.append([i])
            total = n
    return chunks


def test_passes_merge_per_model_in_chunks_of_at_most_limit_tokens_in_order():
    rng = random.Random(0)
    for _ in range(50):
        a, b, alone = Model(), Model(), Model(merges=False)
        limit = rng.randint(4, 40)
        owners = [rng.choice((a, b, alone)) for _ in range(rng.randint(1, 30))]
        sizes = [rng.randint(1, 20) for _ in owners]
        passes = [a_pass(m, i, n) for i, (m, n) in enumerate(zip(owners, sizes))]
        out = run_passes(passes, limit=limit)
        assert out == list(range(len(passes)))  # each Pass gets its own output
        for model in (a, b):
            mine = [i for i, m in enumerate(owners) if m is model]
            expected = [[mine[j] for j in c]
                        for c in greedy_chunks([sizes[i] for i in mine], limit)]
            assert model.calls == expected
        assert alone.calls == [[i] for i, m in enumerate(owners) if m is alone]
