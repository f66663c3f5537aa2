"""KV tensors for a search tree: a node's segment, and the cache of one batched forward.

Each node's segment holds the keys/values of its own tokens as one tensor of shape
[L, 2, H, T, D] (layers, key|value, kv-heads, tokens, head dim). The cache of a path is the
concatenation of its nodes' segments along T, so a child never recomputes its ancestors.

A batch of paths is left-padded with zeros to a common length P and masked; zeros (not
garbage) in the padding keep masked attention free of NaNs. Two batch caches implement the
same small interface (`BatchKV`) for the engine's loops:
  SlabCache     one preallocated [L, 2, B, H, P + room, D] buffer: each forward writes its
                tokens' K/V in place at the next free columns and attends over views of the
                valid prefix, with a ready-made 4D mask (a view for one-token steps). Rows
                that leave a decode loop are swapped out (one row copy each), never regrown.
  GrowingCache  the transformers DynamicCache it replaces (torch.cat per token and layer),
                kept for comparison (`inplace=False`, reports/bench/engine.py; growing.py).
Both take several query tokens per row in one forward (prefill, forced continuations, and
later draft tokens to verify), writing them at columns [length, length + q).

Tree mode (SlabCache.over, the lean forward's): the slab holds only the rows' new columns
(no padding, nothing of a path copied in) and each row attends first to its path's segments
where they live, a segment read by several rows once for all of them (attention.tree_attend).

Shared prefix (cascade attention, the other forwards): when every row's path starts with
the same segments (the prompt of a best-of-N, a beam search's or a particle filter's batch)
and they hold at least `share_prefix` tokens, the slab holds only each row's own suffix and
the prefix stays one tensor, never copied per row: attention.sdpa_gqa attends to [prefix ||
row suffix] with the prefix's keys read once for all rows (one GEMM), not once per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from search.runtime import attention
from search.runtime.growing import GrowingCache
from search.runtime.transfer import upload


@dataclass
class Segment:
    """A node's cached tokens: kv covers its first `n` own tokens.

    logits: next-token logits after the node's whole path, present once the node is
    complete (every own token cached). Generated children start one token short: the last
    sampled token is fed only if and when the node is expanded.
    """

    kv: torch.Tensor  # [L, 2, H, n, D]: the first n columns of `buf` where it has one
    n: int
    logits: torch.Tensor | None = None  # [V] float32
    hidden: torch.Tensor | None = None  # [hidden size]: final layer at the last token, if kept
    # [L, 2, H, capacity, D]: where kv lives, with columns to spare after it (a generated
    # child's room for its last token, fed when it is expanded); None: kv is all there is
    buf: torch.Tensor | None = None

    @staticmethod
    def spare(buf: torch.Tensor, n: int) -> Segment:
        """A segment of buf's first n columns, the rest its room to grow in place."""
        return Segment(kv=buf[:, :, :, :n], n=n, buf=buf)

    def extended(self, new: torch.Tensor) -> torch.Tensor:
        """kv with new [L, 2, H, w, D] after it: written in place (only the new columns
        copied) where buf has room, else one concatenated tensor."""
        end = self.n + new.shape[3]
        if self.buf is not None and end <= self.buf.shape[3]:
            self.buf[:, :, :, self.n:end].copy_(new)
            return self.buf[:, :, :, :end]
        return new if self.n == 0 else torch.cat([self.kv, new], dim=3)


@dataclass(frozen=True)
class KVLayout:
    """What a batch cache must hold for one model: sizes, dtype, device, mask form. mask:
    "bool" (sdpa) or "additive" (eager) for a 4D mask built here, "2d" to hand a [B, T]
    padding mask to transformers to build (other attention kinds, sliding-window layers)."""

    layers: int
    kv_heads: int
    head_dim: int
    dtype: torch.dtype
    device: torch.device
    mask: str = "bool"
    cascade: bool = False  # the attention takes a shared prefix (attention.sdpa_gqa)

    @staticmethod
    def of(model: Any, device: torch.device) -> KVLayout:
        cfg = model.config
        cfg = cfg.get_text_config(decoder=True) if hasattr(cfg, "get_text_config") else cfg
        heads = cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
        impl = getattr(cfg, "_attn_implementation", None) or "eager"
        sliding = "sliding_attention" in (getattr(cfg, "layer_types", None) or ()) or bool(
            getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True))
        mask = "2d" if sliding else {"sdpa": "bool", attention.NAME: "bool",
                                     "eager": "additive"}.get(impl, "2d")
        dtype = next(model.parameters()).dtype
        return KVLayout(cfg.num_hidden_layers, getattr(cfg, "num_key_value_heads", None) or heads,
                        head_dim, dtype, device, mask,
                        cascade=impl == attention.NAME and mask == "bool")


class BatchKV(Protocol):
    """The batch cache interface the engine's loops use (both classes are transformers
    Caches, passed to the model as past_key_values)."""

    @property
    def length(self) -> int: ...  # columns written so far (padding included)

    def attention_mask(self, q: int) -> torch.Tensor: ...

    def take(self, slot: int, start: int, stop: int, spare: int = 0) -> torch.Tensor: ...

    def keep(self, slots: Sequence[int]) -> list[int]: ...


def batch_cache(paths: Sequence[Sequence[torch.Tensor]], room: int, layout: KVLayout, *,
                inplace: bool = True, share_prefix: int = 0) -> SlabCache | GrowingCache:
    """A batch cache holding each row's path (its segments' kv, in order), left-padded,
    with room for `room` more columns. share_prefix > 0 (in place, cascade layouts, >= 2 rows):
    leading segments common to every row, if they hold >= share_prefix tokens, stay one shared
    prefix tensor (SlabCache.prefix) instead of a copy per row."""
    if inplace:
        k = common_parts(paths) if share_prefix and len(paths) > 1 and layout.cascade else 0
        shared = list(paths[0][:k])
        if not k or sum(kv.shape[3] for kv in shared) < share_prefix:
            return SlabCache.from_paths(paths, room, layout)
        prefix = shared[0] if k == 1 else torch.cat(shared, dim=3)
        return SlabCache.from_paths([p[k:] for p in paths], room, layout, prefix=prefix)
    return GrowingCache.of(paths, layout.device)


def common_parts(paths: Sequence[Sequence[torch.Tensor]]) -> int:
    """How many leading segments every path shares (the same tensors: the same nodes)."""
    k = 0
    for parts in zip(*paths):
        if any(kv is not parts[0] for kv in parts[1:]):
            break
        k += 1
    return k


# -- in place ----------------------------------------------------------------------------
class _SlabLayer(CacheLayerMixin):
    """One layer's view of the slab: k/v [rows, H, capacity, D]; n columns written.

    shared: the layer's shared-prefix (keys, values), each [H, S, D], or None. The keys
    `update` returns carry it as an attribute (`shared_kv`), which is how the attention
    function of the same layer finds it: transformers passes update's tensors straight on.
    """

    is_sliding = False

    def __init__(self, k: torch.Tensor, v: torch.Tensor, n: int,
                 shared: tuple[torch.Tensor, torch.Tensor] | None = None,
                 tree: bool = False) -> None:
        super().__init__()
        self.n, self.tree = n, tree
        self.shared = shared
        self.view(k, v)
        self.is_initialized = True

    def view(self, k: torch.Tensor, v: torch.Tensor) -> None:
        self.k, self.v = k, v
        self.keys, self.values = k, v  # what generic Cache code reads

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        pass  # allocated up front by SlabCache

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        end = self.n + key_states.shape[2]
        if self.tree:
            raise RuntimeError("a tree-mode slab cache (SlabCache.over) is read by the lean "
                               "forward only: transformers' attention cannot see its parts")
        if end > self.k.shape[2] or key_states.shape[0] != self.k.shape[0]:
            raise RuntimeError(f"slab cache of {self.k.shape[0]} rows x {self.k.shape[2]} "
                               f"columns cannot take {tuple(key_states.shape)} after "
                               f"{self.n} columns")
        self.k[:, :, self.n:end].copy_(key_states)
        self.v[:, :, self.n:end].copy_(value_states)
        self.n = end
        keys = self.k[:, :, :end]
        if self.shared is not None:
            keys.shared_kv = self.shared  # type: ignore[attr-defined]  # see the class doc
        return keys, self.v[:, :, :end]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.n + query_length, 0

    def get_seq_length(self) -> int:
        return self.n

    def get_max_length(self) -> int:
        return self.k.shape[2]


class SlabCache(Cache):
    """A preallocated batch cache written in place: buf [L, 2, B, H, capacity, D].

    valid [B, capacity]: which columns a row attends to (False on its left padding). Slots
    [0, rows) are the live rows; `keep` moves survivors into the first slots.
    prefix [L, 2, H, S, D] or None: S positions every row attends to before its columns
    (shared, never copied per row); columns and `length` count the slab alone.
    """

    def __init__(self, buf: torch.Tensor, valid: torch.Tensor, length: int, mask: str,
                 prefix: torch.Tensor | None = None,
                 tree: tuple[list[torch.Tensor], list[list[int]]] | None = None) -> None:
        self.buf, self.valid, self.rows, self.mask_kind = buf, valid, buf.shape[2], mask
        self.start = length  # columns given at creation (the rows' cached paths)
        self.prefix = prefix
        self.shared = 0 if prefix is None else prefix.shape[3]
        # tree mode (SlabCache.over): the slab holds only the rows' new columns; each row
        # first attends to its path's segments where they live, parts[k] [L, 2, H, S_k, D],
        # row_parts[slot] the parts it reads in path order (attention.tree_attend)
        self.parts, self.row_parts = tree if tree is not None else ([], [])
        self._readers: list[tuple[int, torch.Tensor | None]] | None = None
        self.slabs = [_SlabLayer(buf[i, 0], buf[i, 1], length,
                                 None if prefix is None else (prefix[i, 0], prefix[i, 1]),
                                 bool(self.parts))
                      for i in range(buf.shape[0])]
        super().__init__(layers=list(self.slabs))
        if mask == "additive":  # eager attention adds the mask to its scores
            self.bias = torch.empty(valid.shape, dtype=buf.dtype, device=buf.device)
            self.sync_bias(valid.shape[0], 0)

    def sync_bias(self, rows: int, start: int) -> None:
        """Eager attention reads the additive bias: rebuild it from `valid` for the first
        `rows` slots, columns `start` on (0 where valid, the dtype's min where not)."""
        if self.mask_kind == "additive":
            v = self.valid[:rows, start:]
            self.bias[:rows, start:] = torch.zeros_like(v, dtype=self.bias.dtype).masked_fill(
                ~v, torch.finfo(self.bias.dtype).min)

    @staticmethod
    def from_paths(paths: Sequence[Sequence[torch.Tensor]], room: int, layout: KVLayout,
                   prefix: torch.Tensor | None = None) -> SlabCache:
        if prefix is not None and (layout.mask != "bool" or not layout.cascade):
            raise ValueError("a shared prefix needs the cascade attention (sdpa_gqa)")
        lengths = [sum(kv.shape[3] for kv in p) for p in paths]
        P, B = max(lengths, default=0), len(paths)
        # empty, not zeros: columns past P are written before any forward reads them
        buf = torch.empty(layout.layers, 2, B, layout.kv_heads, P + room, layout.head_dim,
                          dtype=layout.dtype, device=layout.device)
        pads = upload([P - n for n in lengths], layout.device)
        valid = torch.arange(P + room, device=layout.device) >= pads[:, None]  # [B, P + room]
        into, segments = [], []  # every row's segments, copied by one call
        for b, (parts, n) in enumerate(zip(paths, lengths)):
            if n < P:
                buf[:, :, b, :, :P - n].zero_()
            col = P - n
            for kv in parts:
                into.append(buf[:, :, b, :, col:col + kv.shape[3]])
                segments.append(kv)
                col += kv.shape[3]
        if into:
            torch.ops.aten._foreach_copy_(into, segments)
        return SlabCache(buf, valid, P, layout.mask, prefix)

    @staticmethod
    def over(paths: Sequence[Sequence[torch.Tensor]], room: int, layout: KVLayout) -> SlabCache:
        """Tree mode: a slab of `room` columns per row for its new tokens only, nothing of
        the paths copied; each path's segments (its nodes' kv [L, 2, H, n_i, D], root first;
        one tensor read by several rows is one part) stay where they live and are attended
        there (the lean forward's attention.tree_attend)."""
        if layout.mask != "bool" or not layout.cascade:
            raise ValueError("a tree-mode cache needs the cascade attention (sdpa_gqa)")
        index: dict[int, int] = {}
        parts: list[torch.Tensor] = []
        row_parts: list[list[int]] = []
        for path in paths:
            mine = []
            for kv in path:
                if kv.shape[3]:
                    k = index.setdefault(id(kv), len(parts))
                    if k == len(parts):
                        parts.append(kv)
                    mine.append(k)
            row_parts.append(mine)
        buf = torch.empty(layout.layers, 2, len(paths), layout.kv_heads, room, layout.head_dim,
                          dtype=layout.dtype, device=layout.device)
        valid = torch.ones(len(paths), room, dtype=torch.bool, device=layout.device)
        return SlabCache(buf, valid, 0, layout.mask, tree=(parts, row_parts))

    @property
    def tree(self) -> bool:
        """Whether the rows' paths are read where they live (SlabCache.over)."""
        return bool(self.parts)

    def readers(self) -> list[tuple[int, torch.Tensor | None]]:
        """Per part some live row reads: (its index in parts, the live slots reading it
        [k] long, None where every live row does), in parts' order (a row's parts come in
        its path's order: a node's part first appears no later than its descendants')."""
        if not self.parts:
            return []
        if self._readers is None:
            slots: list[list[int]] = [[] for _ in self.parts]
            for b in range(self.rows):
                for k in self.row_parts[b]:
                    slots[k].append(b)
            self._readers = [(k, None if len(s) == self.rows else upload(s, self.buf.device))
                             for k, s in enumerate(slots) if s]
        return self._readers

    def view(self, slot: int, start: int, stop: int) -> torch.Tensor:
        """One row's columns [L, 2, H, stop - start, D] where they are (no copy: valid while
        no keep() moves rows, e.g. a prefill's new columns)."""
        return self.buf[:, :, slot, :, start:stop]

    @property
    def length(self) -> int:
        return self.slabs[0].n

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
        for layer in self.slabs:
            layer.n += q

    def rewind(self, length: int) -> None:
        """Forget every column from `length` on (e.g. rejected draft tokens): the next
        forward writes there. The rows' cached paths cannot be rewound."""
        if not self.start <= length <= self.length:
            raise ValueError(f"cannot rewind a slab cache of {self.length} columns to "
                             f"{length} (its first {self.start} hold the cached paths)")
        for layer in self.slabs:
            layer.n = length

    def take(self, slot: int, start: int, stop: int, spare: int = 0) -> torch.Tensor:
        """A fresh [L, 2, H, stop - start + spare, D] copy of one row's columns, `spare`
        columns left unwritten after them (room to grow in place: Segment.spare)."""
        if not spare:
            return self.buf[:, :, slot, :, start:stop].clone()
        L, two, _, H, _, D = self.buf.shape
        out = self.buf.new_empty(L, two, H, stop - start + spare, D)
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
            if self.row_parts:
                self.row_parts[h] = self.row_parts[m]
        self.rows = k
        self._readers = None
        for i, layer in enumerate(self.slabs):
            layer.view(self.buf[i, 0, :k], self.buf[i, 1, :k])
        return order
