"""A model's KV in blocks of BLOCK tokens, where the CPU attention kernel reads it.

A Pool's storage is chunks [C, L, 2, KV, BLOCK, D] (blocks, layers, key|value, kv-heads, a
block's tokens, head dim), added as blocks are wanted and never moved or resized: a forward
in another lane reads the chunks it was handed while blocks are handed out. Block g is row
g % C of chunk g // C (the kernel's addressing: kernel.py, a Pass's block table).

A node's own columns start a block (Blocks), so siblings never share a partial block and a
block is written only by the node whose columns it holds (after those already there). A
prompt that begins with a cached prompt's whole blocks holds those blocks (its `base`, kept
alive by it) and a copy of their partial next block (copy on write). A Blocks' own blocks go
back to the pool when it is collected (no segment holds it: the store dropped its node, its
search ended, the prompt cache let it go): no caller frees a block.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from dataclasses import dataclass
from typing import Any

import torch

BLOCK = 16  # tokens a block (PromptCache's prefix blocks too)


class Pool:
    """Blocks of one model's KV (module doc): `alloc` hands out free ones, adding a chunk
    where none is free; `release` takes them back (from any thread, a finalizer's too)."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype,
                 device: torch.device, chunk_bytes: int = 16 << 20) -> None:
        self.shape = (layers, 2, kv_heads, BLOCK, head_dim)
        self.dtype, self.device = dtype, device
        self.block_bytes = layers * 2 * kv_heads * BLOCK * head_dim * dtype.itemsize
        self.C = max(8, chunk_bytes // self.block_bytes)  # blocks a chunk
        self.chunks: list[torch.Tensor] = []
        self._free: list[int] = []  # last out first: blocks just freed are warm in the caches
        self._freed: deque[int] = deque()  # (appended by finalizers: taken under the lock)
        self._lock = threading.Lock()

    def alloc(self, k: int) -> list[int]:
        """k free block ids (chunks added where fewer are free)."""
        with self._lock:
            while self._freed:
                self._free.append(self._freed.popleft())
            while len(self._free) < k:
                first = len(self.chunks) * self.C
                # (empty: a block's columns are written before any forward reads them)
                self.chunks.append(torch.empty(self.C, *self.shape, dtype=self.dtype,
                                               device=self.device))
                self._free.extend(range(first + self.C - 1, first - 1, -1))
            out = self._free[len(self._free) - k:][::-1]
            del self._free[len(self._free) - k:]
            return out

    def release(self, ids: list[int]) -> None:
        self._freed.extend(ids)

    def block(self, g: int) -> torch.Tensor:
        """Block g's storage [L, 2, KV, BLOCK, D]."""
        return self.chunks[g // self.C][g % self.C]

    @property
    def used(self) -> int:
        """Blocks handed out and not yet taken back."""
        with self._lock:
            return len(self.chunks) * self.C - len(self._free) - len(self._freed)


class Blocks:
    """One node's columns in a pool: `ids`, its blocks in column order (BLOCK columns each,
    the last filled as far as its segment's n). base, m: a cached prompt's Blocks whose first
    m columns this node's begin with (its whole blocks shared, the partial one copied)."""

    def __init__(self, pool: Pool, base: Blocks | None = None, m: int = 0) -> None:
        self.pool, self.base = pool, base if m else None
        self._own: list[int] = []  # the blocks this one hands back when collected
        weakref.finalize(self, pool.release, self._own)
        whole, part = divmod(m, BLOCK)
        self.ids: list[int] = [] if base is None else base.ids[:whole]
        self.shared = len(self.ids)  # blocks of base's: never written here
        self.n = m  # columns held
        if part:
            assert base is not None
            self._grow(1)
            pool.block(self.ids[-1])[:, :, :, :part].copy_(pool.block(base.ids[whole])[:, :, :, :part])

    def _grow(self, k: int) -> None:
        new = self.pool.alloc(k)
        self.ids += new
        self._own += new

    def reserve(self, blocks: int) -> None:
        """Hold at least `blocks` blocks (a batch cache's row, before a forward writes them)."""
        if blocks > len(self.ids):
            self._grow(blocks - len(self.ids))

    def trim(self, n: int) -> Blocks:
        """Keep the blocks of the first n columns, the rest back to the pool -> self."""
        keep = max(-(-n // BLOCK), self.shared)
        self.pool.release(self.ids[keep:])
        gone = set(self.ids[keep:])
        self._own[:] = [g for g in self._own if g not in gone]
        del self.ids[keep:]
        self.n = n
        return self

    def write(self, start: int, kv: torch.Tensor) -> None:
        """kv [L, 2, KV, w, D] as columns start .. start + w (start: the columns held so far;
        blocks added as needed)."""
        end = start + kv.shape[3]
        if start < self.shared * BLOCK:
            raise RuntimeError(f"columns from {start} are in blocks shared with a cached prompt")
        if (more := -(-end // BLOCK) - len(self.ids)) > 0:
            self._grow(more)
        dst, src = [], []
        for j in range(start // BLOCK, -(-end // BLOCK)):
            a, b = max(start, j * BLOCK), min(end, (j + 1) * BLOCK)
            dst.append(self.pool.block(self.ids[j])[:, :, :, a - j * BLOCK:b - j * BLOCK])
            src.append(kv[:, :, :, a - start:b - start])
        if dst:
            torch.ops.aten._foreach_copy_(dst, src)
        self.n = max(self.n, end)

    def copy_in(self, start: int, parts: list[tuple[Blocks, int]]) -> int:
        """The first m columns of each (blocks, m) of parts (of this pool), copied block by
        block, one after another from column start on -> the column after them."""
        for src, m in parts:
            for g, f in src.table(m):
                self.write(start, self.pool.block(g)[:, :, :, :f])
                start += f
        return start

    def table(self, n: int) -> list[tuple[int, int]]:
        """The first n columns as the kernel's table entries: (block id, columns it fills)."""
        return [(self.ids[j], min(BLOCK, n - j * BLOCK)) for j in range(-(-n // BLOCK))]

    def gather(self, n: int) -> torch.Tensor:
        """A copy of the first n columns [L, 2, KV, n, D] (tests, and readers off the kernel)."""
        if not n:
            return torch.empty(*self.pool.shape[:3], 0, self.pool.shape[4],
                               dtype=self.pool.dtype, device=self.pool.device)
        return torch.cat([self.pool.block(g)[:, :, :, :f] for g, f in self.table(n)], dim=3)

    def nbytes(self, n: int) -> int:
        return -(-n // BLOCK) * self.pool.block_bytes


def tables(rows: list[list[tuple[int, int]]]) -> torch.Tensor:
    """Rows' table entries -> the kernel's block table [rows, E, 2] int64 (E: the longest;
    shorter rows end with id -1)."""
    E = max(map(len, rows), default=0)
    return torch.tensor([r + [(-1, 0)] * (E - len(r)) for r in rows],
                        dtype=torch.long).view(len(rows), E, 2)


@dataclass
class Segment:
    """A node's cached tokens: its first `n` own tokens' KV, in `kv` (off the pool) or in a
    pool's `blocks` (kvpool: where the CPU kernel reads paths through block tables).

    logits: next-token logits after the node's whole path, present once the node is
    complete (every own token cached). Generated children start one token short: the last
    sampled token is fed only if and when the node is expanded.
    """

    kv: torch.Tensor | None  # [L, 2, H, n, D]: the first n columns of `buf` where it has one
    n: int
    logits: torch.Tensor | None = None  # [V] float32
    hidden: torch.Tensor | None = None  # [hidden size]: final layer at the last token, if kept
    # [L, 2, H, capacity, D]: where kv lives, with columns to spare after it (a generated
    # child's room for its last token, fed when it is expanded); None: kv is all there is
    buf: torch.Tensor | None = None
    blocks: Blocks | None = None  # in place of kv, buf

    @staticmethod
    def of(new: torch.Tensor | Blocks, pool: Pool | None, spare: int | None = None, **out: Any
           ) -> Segment:
        """A segment of the columns new [L, 2, H, w, D] (out: logits, hidden): written into
        blocks of `pool`; else new itself (spare None: the caller's to keep) or a copy with
        `spare` columns to grow in place. new a Blocks (a batch cache row's, given up): its
        columns, where they are."""
        if isinstance(new, Blocks):
            return Segment(kv=None, n=new.n, blocks=new, **out)
        w = new.shape[3]
        if pool is not None:
            blocks = Blocks(pool)
            blocks.write(0, new)
            return Segment(kv=None, n=w, blocks=blocks, **out)
        if spare is None:
            return Segment(kv=new, n=w, **out)
        buf = new.new_empty(*new.shape[:3], w + spare, new.shape[4])
        buf[:, :, :, :w].copy_(new)
        return Segment(kv=buf[:, :, :, :w], n=w, buf=buf, **out)

    def extended(self, new: torch.Tensor | Blocks, **out: Any) -> Segment:
        """This segment with new [L, 2, H, w, D] (or a Blocks' columns) after its n columns
        (out: logits, hidden): written in place (only the new columns copied) into its
        blocks, or into buf where it has room, else one concatenated tensor."""
        if isinstance(new, Blocks):  # (block by block: no copy of them made on the way)
            if self.blocks is None:
                new = new.gather(new.n)
            else:
                n = self.blocks.copy_in(self.n, [(new, new.n)])
                return Segment(kv=None, n=n, blocks=self.blocks, **out)
        end = self.n + new.shape[3]
        if self.blocks is not None:
            self.blocks.write(self.n, new)
            return Segment(kv=None, n=end, blocks=self.blocks, **out)
        if self.buf is not None and end <= self.buf.shape[3]:
            self.buf[:, :, :, self.n:end].copy_(new)
            return Segment(kv=self.buf[:, :, :, :end], n=end, buf=self.buf, **out)
        kv = new if self.n == 0 or self.kv is None else torch.cat([self.kv, new], dim=3)
        return Segment(kv=kv, n=end, **out)

    def head(self, m: int, **out: Any) -> Segment:
        """A segment of this one's first m columns (out: logits, hidden): its blocks shared
        (the partial last one copied), or a view of its kv."""
        if self.blocks is not None:
            return Segment(kv=None, n=m, blocks=Blocks(self.blocks.pool, self.blocks, m), **out)
        assert self.kv is not None
        return Segment(kv=self.kv[:, :, :, :m], n=m, **out)

    @property
    def columns(self) -> torch.Tensor:
        """Its KV [L, 2, H, n, D]: kv, or a copy gathered from its blocks."""
        if self.blocks is not None:
            return self.blocks.gather(self.n)
        assert self.kv is not None
        return self.kv

    @property
    def nbytes(self) -> int:
        """Memory it holds: its KV (with its spare room, or its blocks) and its output."""
        if self.blocks is not None:
            kv = self.blocks.nbytes(self.n)
        else:
            kv = (self.buf if self.buf is not None else self.kv).nbytes  # type: ignore[union-attr]
        return kv + sum(t.nbytes for t in (self.logits, self.hidden) if t is not None)
