"""KV tensors for a search tree: a node's segment, and batching paths for one forward.

Each node's segment holds the keys/values of its own tokens as one tensor of shape
[L, 2, H, T, D] (layers, key|value, kv-heads, tokens, head dim). The cache of a path is the
concatenation of its nodes' segments along T, so a child never recomputes its ancestors.
A batch of paths is left-padded with zeros to a common length P and masked; zeros (not
garbage) in the padding keep masked attention free of NaNs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache


@dataclass
class Segment:
    """A node's cached tokens: kv covers its first `n` own tokens.

    logits: next-token logits after the node's whole path, present once the node is
    complete (every own token cached). Generated children start one token short: the last
    sampled token is fed only if and when the node is expanded.
    """

    kv: torch.Tensor  # [L, 2, H, n, D]
    n: int
    logits: torch.Tensor | None = None  # [V] float32
    hidden: torch.Tensor | None = None  # [hidden size]: final layer at the last token, if kept


def stack_left_padded(kvs: Sequence[torch.Tensor | None], like: torch.Tensor | None = None
                      ) -> tuple[torch.Tensor | None, torch.Tensor]:
    """Stack per-row caches [L,2,H,P_i,D] into [L,2,B,H,P,D], zero-left-padded, and a
    [B, P] 0/1 attention mask. Rows given as None have nothing cached (P_i = 0)."""
    lengths = [0 if kv is None else kv.shape[3] for kv in kvs]
    P = max(lengths)
    ref = next((kv for kv in kvs if kv is not None), like)
    if P == 0 or ref is None:
        return None, torch.ones(len(kvs), 0, dtype=torch.long)
    L, two, H, _, D = ref.shape
    out = ref.new_zeros(L, two, len(kvs), H, P, D)
    mask = torch.zeros(len(kvs), P, dtype=torch.long, device=ref.device)
    for b, (kv, n) in enumerate(zip(kvs, lengths)):
        if kv is not None and n:
            out[:, :, b, :, P - n:] = kv
            mask[b, P - n:] = 1
    return out, mask


def to_cache(stacked: torch.Tensor | None) -> DynamicCache:
    """[L,2,B,H,P,D] -> a transformers DynamicCache (empty when nothing is cached)."""
    if stacked is None:
        return DynamicCache()
    return DynamicCache(ddp_cache_data=[(stacked[i, 0], stacked[i, 1])
                                        for i in range(stacked.shape[0])])


def rows_from_cache(cache: DynamicCache, rows: Sequence[int], start: int, stop: int
                    ) -> list[torch.Tensor]:
    """Per row, a fresh [L,2,H,stop-start,D] copy of cache columns [start, stop)."""
    kvs: list[tuple[torch.Tensor, torch.Tensor]] = [(layer.keys, layer.values)  # type: ignore[attr-defined]
                                                    for layer in cache.layers]
    idx = torch.as_tensor(list(rows), dtype=torch.long, device=kvs[0][0].device)
    # [L, 2, R, H, T, D] in one gather per layer, then split by row
    block = torch.stack([torch.stack((k.index_select(0, idx)[:, :, start:stop],
                                      v.index_select(0, idx)[:, :, start:stop]))
                         for k, v in kvs])
    return [block[:, :, r].clone() for r in range(len(rows))]
