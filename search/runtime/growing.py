"""The batch cache the in-place slab cache replaces (kv.SlabCache, `inplace=False`):
transformers' DynamicCache with the engine's BatchKV interface, over the rows' paths stacked
left-padded (stack_left_padded)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DynamicCache


class GrowingCache(DynamicCache):
    """transformers' DynamicCache with the BatchKV interface: every forward concatenates
    its K/V (and the mask) onto the whole cache."""

    prefix: torch.Tensor | None = None  # never a shared prefix: every row holds its path
    shared = 0

    def __init__(self, stacked: torch.Tensor | None, valid: torch.Tensor) -> None:
        super().__init__(ddp_cache_data=None if stacked is None else
                         [(stacked[i, 0], stacked[i, 1]) for i in range(stacked.shape[0])])
        self.valid = valid  # [B, length] 0/1

    @staticmethod
    def of(paths: Sequence[Sequence[torch.Tensor]], device: torch.device) -> GrowingCache:
        """The rows' paths (their segments' kv [L, 2, H, n_i, D], in order) concatenated and
        stacked left-padded."""
        kvs = [None if not p else p[0] if len(p) == 1 else torch.cat(list(p), dim=3)
               for p in paths]
        stacked, mask = stack_left_padded(kvs)
        return GrowingCache(stacked, mask.to(device))

    @property
    def length(self) -> int:
        return self.get_seq_length()

    def attention_mask(self, q: int) -> torch.Tensor:
        grow = self.length + q - self.valid.shape[1]
        if grow > 0:
            self.valid = torch.cat([self.valid, self.valid.new_ones(self.valid.shape[0], grow)],
                                   dim=1)
        return self.valid[:, :self.length + q]

    def take(self, slot: int, start: int, stop: int, spare: int = 0) -> torch.Tensor:
        """A copy of one row's columns (no spare columns: a segment here grows by copy)."""
        return torch.stack([torch.stack((layer.keys[slot, :, start:stop],  # type: ignore[index]
                                         layer.values[slot, :, start:stop]))  # type: ignore[index]
                            for layer in self.layers]).clone()

    def keep(self, slots: Sequence[int]) -> list[int]:
        idx = torch.as_tensor(list(slots), dtype=torch.long, device=self.valid.device)
        self.batch_select_indices(idx)
        self.valid = self.valid[idx]
        return list(slots)


def stack_left_padded(kvs: Sequence[torch.Tensor | None], like: torch.Tensor | None = None
                      ) -> tuple[torch.Tensor | None, torch.Tensor]:
    """Stack per-row caches [L,2,H,P_i,D] into [L,2,B,H,P,D], zero-left-padded, and a
    [B, P] 0/1 attention mask. Rows given as None have nothing cached (P_i = 0)."""
    lengths = [0 if kv is None else kv.shape[3] for kv in kvs]
    P = max(lengths)
    ref = next((kv for kv in kvs if kv is not None), like)
    if P == 0 or ref is None:
        return None, torch.ones(len(kvs), 0, dtype=torch.long,
                                device=None if ref is None else ref.device)
    L, two, H, _, D = ref.shape
    out = ref.new_zeros(L, two, len(kvs), H, P, D)
    mask = torch.zeros(len(kvs), P, dtype=torch.long, device=ref.device)
    for b, (kv, n) in enumerate(zip(kvs, lengths)):
        if kv is not None and n:
            out[:, :, b, :, P - n:] = kv
            mask[b, P - n:] = 1
    return out, mask
