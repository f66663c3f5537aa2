"""The cache of one batched forward over a search tree's paths (a node's segment, its own
tokens' KV, is kvpool.Segment: in a pool's blocks on the CPU kernel, else one tensor).

A forward over a batch of rows (one path each) runs over one SlabCache: a preallocated
[L, 2, B, H, P + room, D] buffer. Each row holds what is copied of its path, left-padded
with zeros (not garbage: masked attention stays free of NaNs) to a common length P, then
the forward's new tokens: each forward writes its K/V in place at the next free columns
(several query tokens per row in one forward: prefill, forced continuations, draft tokens
to verify) and attends over views of the valid prefix, with a ready-made 4D mask (a view
for one-token steps). Rows that leave a decode loop are swapped out (one row copy each).

What of a path is read where it lives instead (`parts`, chosen by batch_cache):
- on transformers' forward: the leading segments common to every row, if they hold at
  least `share_prefix` tokens, as one shared prefix that sdpa_gqa attends (cascade
  attention: its keys read once for all rows, never copied per row);
- on the lean forward off the CPU's kernel (`tree`): every segment of at least
  `share_prefix` tokens, and the shorter segments every row reads (concatenated once) if
  their tokens times the rows reach `share_prefix`. Each part is attended once for all the
  rows that read it (their queries stacked) and merged with the rest by log-sum-exp
  (attention.merge_parts). Shorter segments read by fewer rows are copied: a part costs an
  attention call per layer and forward, a copy its columns once per batch cache.
On the CPU's kernel the paths are in a KV pool's blocks (kvpool), each row's read through
its block table (paged.PagedCache), its new columns in blocks of its own; the kernel reads
no slab.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from search.runtime import attention
from search.runtime.kvpool import Pool
from search.runtime.transfer import upload


@dataclass(frozen=True)
class KVLayout:
    """What a batch cache must hold for one model: sizes, dtype (the weights', or `of`'s
    dtype: HFConfig.kv_dtype), device, mask form. mask: "bool" (sdpa) or "additive" (eager)
    for a 4D mask built here, "2d" to hand a [B, T] padding mask to transformers to build."""

    layers: int
    kv_heads: int
    head_dim: int
    dtype: torch.dtype
    device: torch.device
    mask: str = "bool"
    cascade: bool = False  # the attention takes a shared prefix (attention.sdpa_gqa)

    @staticmethod
    def of(model: Any, device: torch.device, dtype: torch.dtype | None = None) -> KVLayout:
        cfg = model.config
        cfg = cfg.get_text_config(decoder=True) if hasattr(cfg, "get_text_config") else cfg
        heads = cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
        impl = getattr(cfg, "_attn_implementation", None) or "eager"
        sliding = "sliding_attention" in (getattr(cfg, "layer_types", None) or ()) or bool(
            getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True))
        mask = "2d" if sliding else {"sdpa": "bool", attention.NAME: "bool",
                                     "eager": "additive"}.get(impl, "2d")
        return KVLayout(cfg.num_hidden_layers, getattr(cfg, "num_key_value_heads", None) or heads,
                        head_dim, dtype or next(model.parameters()).dtype, device, mask,
                        cascade=impl == attention.NAME and mask == "bool")


def batch_cache(paths: Sequence[Sequence[torch.Tensor]], room: int, layout: KVLayout, *,
                share_prefix: int = 0, tree: bool = False) -> SlabCache:
    """A SlabCache of these rows' paths (each its segments' kv, root first) with room for
    `room` more columns: the parts read where they live (see the module doc; tree: the
    lean forward's rule, else a common prefix only; share_prefix 0: none) and the rest
    copied in, left-padded."""
    if not (share_prefix and layout.cascade and paths):
        return SlabCache.from_paths(paths, room, layout)
    k = 0  # how many leading segments every path shares (the same tensors: the same nodes)
    while all(k < len(p) and p[k] is paths[0][k] for p in paths):
        k += 1
    # segments of >= `own` tokens are parts of their own (the tree rule); of those every row
    # reads, the others are one part (concatenated once, not per row) where it pays
    own = share_prefix if tree else math.inf
    common = [kv for kv in paths[0][:k] if 0 < kv.shape[3] < own]
    n = sum(kv.shape[3] for kv in common)
    pays = n * len(paths) >= share_prefix if tree else n >= share_prefix and len(paths) > 1
    parts = [common[0] if len(common) == 1 else torch.cat(common, dim=3)] if pays else []
    reads: list[list[int]] = [[0] if pays else [] for _ in paths]
    held = {id(kv) for kv in common} if pays else set()  # what that part holds
    index: dict[int, int] = {}
    rest: list[list[torch.Tensor]] = [[] for _ in paths]
    for b, path in enumerate(paths):
        for kv in path:
            if kv.shape[3] >= own:
                k = index.setdefault(id(kv), len(parts))
                if k == len(parts):
                    parts.append(kv)
                reads[b].append(k)
            elif kv.shape[3] and id(kv) not in held:
                rest[b].append(kv)
    return SlabCache.from_paths(rest, room, layout, parts, reads)


# -- in place ----------------------------------------------------------------------------
class _SlabLayer(CacheLayerMixin):
    """One layer's view of the slab: keys/values [rows, H, capacity, D] (what transformers'
    generic Cache code reads too); n columns written.

    shared: the layer's shared-prefix (keys, values), each [H, S, D], or None. The keys
    `update` returns carry it as an attribute (`shared_kv`), which is how the attention
    function of the same layer finds it: transformers passes update's tensors straight on.
    """

    keys: torch.Tensor  # (the mixin's are Optional: here they always exist)
    values: torch.Tensor

    def __init__(self, k: torch.Tensor, v: torch.Tensor, n: int,
                 shared: tuple[torch.Tensor, torch.Tensor] | None = None,
                 lean_only: bool = False) -> None:
        super().__init__()
        self.n, self.lean_only = n, lean_only
        self.shared = shared
        self.keys, self.values = k, v
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        pass  # allocated up front by SlabCache

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        end = self.n + key_states.shape[2]
        if self.lean_only:
            raise RuntimeError("this slab cache's rows read parts that are not one prefix "
                               "common to all (batch_cache(tree=True)): the lean forward "
                               "reads them, transformers' attention cannot")
        if end > self.keys.shape[2] or key_states.shape[0] != self.keys.shape[0]:
            raise RuntimeError(f"slab cache of {self.keys.shape[0]} rows x "
                               f"{self.keys.shape[2]} columns cannot take "
                               f"{tuple(key_states.shape)} after {self.n} columns")
        self.keys[:, :, self.n:end].copy_(key_states)
        self.values[:, :, self.n:end].copy_(value_states)
        self.n = end
        keys = self.keys[:, :, :end]
        if self.shared is not None:
            keys.shared_kv = self.shared  # type: ignore[attr-defined]  # see the class doc
        return keys, self.values[:, :, :end]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.n + query_length, 0

    def get_seq_length(self) -> int:
        return self.n

    def get_max_length(self) -> int:
        return self.keys.shape[2]


class SlabCache(Cache):
    """A preallocated batch cache written in place: buf [L, 2, B, H, capacity, D].

    valid [B, capacity]: which columns a row attends to (False on its left padding). Slots
    [0, rows) are the live rows; `keep` moves survivors into the first slots.
    parts: segments [L, 2, H, S_k, D] read where they live, before the row's columns;
    row_parts[slot]: the parts that row reads. `prefix`: the one part, where every row reads
    it (a shared prefix: transformers' forward attends it too); columns and `length` count
    the slab alone. pool, table, own_table: None here; a paged cache's (paged.PagedCache:
    its rows' paths and own columns in a KV pool's blocks).
    """

    pool: Pool | None = None
    table: torch.Tensor | None = None
    own_table: torch.Tensor | None = None

    def __init__(self, buf: torch.Tensor, valid: torch.Tensor, length: int, mask: str,
                 parts: Sequence[torch.Tensor] = (),
                 row_parts: Sequence[Sequence[int]] = ()) -> None:
        self.buf, self.valid, self.rows, self.mask_kind = buf, valid, buf.shape[2], mask
        self.start = length  # columns given at creation (the rows' cached paths)
        self.parts = list(parts)
        self.row_parts = [list(r) for r in row_parts] or [[] for _ in range(self.rows)]
        one = len(self.parts) == 1 and all(r == [0] for r in self.row_parts)
        self.prefix = self.parts[0] if one else None
        self.shared = 0 if self.prefix is None else self.prefix.shape[3]
        self._readers: list[tuple[int, torch.Tensor | None]] | None = None
        self._n = length  # columns written (the layers' own counts once they exist)
        self._views: list[_SlabLayer] | None = None
        super().__init__(layers=[])
        if mask == "additive":  # eager attention adds the mask to its scores
            self.bias = torch.empty(valid.shape, dtype=buf.dtype, device=buf.device)
            self.sync_bias(valid.shape[0], 0)

    @property
    def layers(self) -> list[_SlabLayer]:  # type: ignore[override]
        """transformers' per-layer views of the slab (its forward writes through them),
        made when first asked for: the lean forward reads `buf` and needs none."""
        if self._views is None:
            buf, prefix, k = self.buf, self.prefix, self.rows
            lean_only = bool(self.parts) and prefix is None
            self._views = [_SlabLayer(buf[i, 0, :k], buf[i, 1, :k], self._n,
                                      None if prefix is None else (prefix[i, 0], prefix[i, 1]),
                                      lean_only)
                           for i in range(buf.shape[0])]
        return self._views

    @layers.setter
    def layers(self, value: Any) -> None:  # (Cache.__init__ sets it: the views come lazily)
        pass

    def sync_bias(self, rows: int, start: int) -> None:
        """Eager attention reads the additive bias: rebuild it from `valid` for the first
        `rows` slots, columns `start` on (0 where valid, the dtype's min where not)."""
        if self.mask_kind == "additive":
            v = self.valid[:rows, start:]
            self.bias[:rows, start:] = torch.zeros_like(v, dtype=self.bias.dtype).masked_fill(
                ~v, torch.finfo(self.bias.dtype).min)

    @staticmethod
    def from_paths(paths: Sequence[Sequence[torch.Tensor]], room: int, layout: KVLayout,
                   parts: Sequence[torch.Tensor] = (),
                   row_parts: Sequence[Sequence[int]] = ()) -> SlabCache:
        """Every row's segments copied in, left-padded, `room` columns after them; parts
        and row_parts as the class's (what the rows read where it lives)."""
        if parts and (layout.mask != "bool" or not layout.cascade):
            raise ValueError("parts read in place need the cascade attention (sdpa_gqa)")
        lengths = [sum(kv.shape[3] for kv in p) for p in paths]
        P, B = max(lengths, default=0), len(paths)
        # empty, not zeros: columns past P are written before any forward reads them
        buf = torch.empty(layout.layers, 2, B, layout.kv_heads, P + room, layout.head_dim,
                          dtype=layout.dtype, device=layout.device)
        pads = upload([P - n for n in lengths], layout.device)
        valid = torch.arange(P + room, device=layout.device) >= pads[:, None]  # [B, P + room]
        into: list[torch.Tensor] = []  # every row's segments, copied by one call
        segments: list[torch.Tensor] = []
        for b, (path, n) in enumerate(zip(paths, lengths)):
            if n < P:
                buf[:, :, b, :, :P - n].zero_()
            if path:  # (the views of its segments' columns, made by one call)
                into += buf[:, :, b, :, P - n:P].split([kv.shape[3] for kv in path], dim=3)
                segments += path
        if into:
            torch.ops.aten._foreach_copy_(into, segments)
        return SlabCache(buf, valid, P, layout.mask, parts, row_parts)

    def readers(self) -> list[tuple[int, torch.Tensor | None]]:
        """Per part some live row reads: (its index in parts, the live slots reading it
        [k] long, None where every live row does), in parts' order."""
        if self._readers is None:
            slots: list[list[int]] = [[] for _ in self.parts]
            for b in range(self.rows):
                for k in self.row_parts[b]:
                    slots[k].append(b)
            self._readers = [(k, None if len(s) == self.rows else upload(s, self.buf.device))
                             for k, s in enumerate(slots) if s]
        return self._readers

    def kept(self, slot: int, start: int, stop: int) -> torch.Tensor:
        """One row's columns [L, 2, H, stop - start, D] for a segment that outlives the
        cache: where they are if the slab holds nothing else (no path copied in, no room
        left: a view pins no other bytes; valid since no keep() moves rows after a feed),
        else a copy (take)."""
        if self.start == 0 and stop - start == self.capacity:
            return self.buf[:, :, slot, :, start:stop]
        return self.take(slot, start, stop)

    @property
    def length(self) -> int:
        return self._n if self._views is None else self._views[0].n

    @property
    def capacity(self) -> int:
        return self.buf.shape[4]

    def _room_for(self, q: int) -> None:
        """Refuse a forward of q more tokens per row that the slab has no columns left for."""
        if self.length + q > self.capacity:
            raise RuntimeError(f"slab cache of {self.capacity} columns cannot take {q} more "
                               f"tokens after {self.length}")

    def attention_mask(self, q: int) -> torch.Tensor:
        """The mask for q new tokens per row at columns [length, length + q): a
        [rows, 1, q, length + q] 4D mask (bool or additive), or a [rows, length + q] 2D one."""
        n, r = self.length, self.rows
        self._room_for(q)
        if self.mask_kind == "2d":
            return self.valid[:r, :n + q]
        base = (self.valid if self.mask_kind == "bool" else self.bias)[:r, None, None, :n + q]
        if q == 1:
            return base  # a view: nothing allocated per decoded token
        future = torch.ones(q, n + q, dtype=torch.bool, device=self.buf.device).triu_(n + 1)
        if self.mask_kind == "bool":
            return base & ~future
        return base.masked_fill(future, torch.finfo(self.buf.dtype).min)

    def columns(self, q: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Views of the live rows over every layer for a forward of q tokens per row: new
        [L, 2, rows, H, q, D] (columns [length, length + q), where its keys and values go)
        and seen [L, 2, rows, H, length + q, D] (what its attention reads). The forward
        writes every layer's new columns, then calls advance(q)."""
        n, end = self.length, self.length + q
        self._room_for(q)
        live = self.buf[:, :, :self.rows]
        return live[:, :, :, :, n:end], live[:, :, :, :, :end]

    def advance(self, q: int) -> None:
        """Count q more columns as written in every layer (after a forward wrote them)."""
        self._n = self.length + q
        for layer in self._views or ():
            layer.n = self._n

    def rewind(self, length: int) -> None:
        """Forget every column from `length` on (e.g. rejected draft tokens): the next
        forward writes there. The rows' cached paths cannot be rewound."""
        if not self.start <= length <= self.length:
            raise ValueError(f"cannot rewind a slab cache of {self.length} columns to "
                             f"{length} (its first {self.start} hold the cached paths)")
        self._n = length
        for layer in self._views or ():
            layer.n = length

    def columns_of(self, slot: int, start: int, stop: int) -> Any:
        """Row `slot`'s columns start .. stop for a child's segment: a view of them (the
        caller copies it), or in a paged cache the row's blocks, given up (paged.py)."""
        return self.buf[:, :, slot, :, start:stop]

    def gather(self, slot: int, cols: Sequence[int]) -> torch.Tensor:
        """A copy of row `slot`'s columns `cols`, in order: [L, 2, H, len(cols), D]."""
        return self.buf[:, :, slot].index_select(3, upload(list(cols), self.buf.device))

    def move(self, slot: int, cols: Sequence[int], start: int) -> None:
        """Row `slot`'s columns `cols` copied, in order, to its columns from start on."""
        self.buf[:, :, slot, :, start:start + len(cols)] = self.gather(slot, cols)

    def take(self, slot: int, start: int, stop: int) -> torch.Tensor:
        """A fresh [L, 2, H, stop - start, D] copy of one row's columns."""
        L, two, _, H, _, D = self.buf.shape
        out = self.buf.new_empty(L, two, H, stop - start, D)
        out[:, :, :, :stop - start].copy_(self.buf[:, :, slot, :, start:stop])
        return out

    def keep(self, slots: Sequence[int]) -> list[int]:
        """Keep the rows in `slots`; returns `order`: new slot i holds old slot order[i].

        Each dead slot below len(slots) is filled by a survivor from above it (one row copy
        of the written columns); the survivors' relative order is not preserved."""
        k, n = len(slots), self.length
        alive = set(slots)
        holes = [s for s in range(k) if s not in alive]
        movers = [s for s in slots if s >= k]
        order = list(range(k))
        for h, m in zip(holes, movers):
            self.buf[:, :, h, :, :n].copy_(self.buf[:, :, m, :, :n])
            self.valid[h].copy_(self.valid[m])
            if self.mask_kind == "additive":
                self.bias[h].copy_(self.bias[m])
            order[h] = m
            self.row_parts[h] = self.row_parts[m]
        self.rows = k
        self._readers = None
        for i, layer in enumerate(self._views or ()):
            layer.keys, layer.values = self.buf[i, 0, :k], self.buf[i, 1, :k]
        return order
