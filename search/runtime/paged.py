"""A batch cache whose rows live in a KV pool's blocks, for the CPU attention kernel.

Each row reads its path through its block table (kvpool.tables: the blocks of its nodes'
segments) and holds its own columns, the call's new tokens, in blocks of its own
(`own_table` [rows, R]: column c in block own_table[row][c // BLOCK]), which the kernel's
write puts every forward's new keys and values into and its attention reads, under the
row's mask. So a row that stops gives its blocks to its child (`kept`: nothing copied, the
blocks past its columns back to the pool), rows leave a decode loop by a permutation of
their tables, and a row's blocks are taken as its columns grow (a block each BLOCK tokens).
The slab tensor is a placeholder of no columns (its dtype and rows are what the kernel
reads of it); transformers' forward cannot read such a cache.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from search.runtime.kv import KVLayout, SlabCache
from search.runtime.kvpool import BLOCK, Blocks, Pool, tables


class PagedCache(SlabCache):
    """Rows whose paths are `paths` (each its table entries: Blocks.table) in `pool`, with
    `room` columns of their own each (see the module doc). holds: the Blocks of those paths,
    kept alive while the cache is (its tables name their blocks by number only)."""

    pool: Pool
    table: torch.Tensor  # [rows, E, 2]: kvpool.tables of the rows' paths
    own_table: torch.Tensor  # [rows, R]: each row's own blocks

    def __init__(self, paths: Sequence[Sequence[tuple[int, int]]], room: int, layout: KVLayout,
                 pool: Pool, holds: Sequence[Blocks] = ()) -> None:
        B = len(paths)
        buf = torch.empty(layout.layers, 2, B, layout.kv_heads, 0, layout.head_dim,
                          dtype=layout.dtype, device=layout.device)
        valid = torch.ones(B, room, dtype=torch.bool, device=layout.device)
        super().__init__(buf, valid, 0, layout.mask)
        self.pool, self.table = pool, tables([list(p) for p in paths])
        self.room, self.holds = room, list(holds)
        self.owners: list[Blocks | None] = [Blocks(pool) for _ in range(B)]
        self.own_table = torch.empty(B, 0, dtype=torch.long)

    @property
    def capacity(self) -> int:
        return self.room

    @property
    def layers(self) -> list:  # type: ignore[override]
        raise RuntimeError("a paged batch cache is read by the CPU attention kernel only")

    @layers.setter
    def layers(self, value: object) -> None:  # (Cache.__init__ sets it)
        pass

    def _room_for(self, q: int) -> None:
        """Refuse q more tokens a row past the room; else give every live row the blocks
        its columns up to length + q take."""
        super()._room_for(q)
        need = -(-(self.length + q) // BLOCK)
        if need > self.own_table.shape[1]:
            rows = [o for o in self.owners[:self.rows] if o is not None]
            if len(rows) != self.rows:
                raise RuntimeError("a paged batch cache's row was given up and is still live")
            for o in rows:
                o.reserve(need)
            self.own_table = torch.tensor([o.ids[:need] for o in rows], dtype=torch.long)

    def kept(self, slot: int, start: int, stop: int) -> Blocks:  # type: ignore[override]
        """Row `slot`'s first `stop` columns as Blocks (its own: the cache gives them up, the
        blocks past them back to the pool). start: 0 (a row's columns begin its blocks)."""
        owner = self.owners[slot]
        if start != 0 or owner is None:
            raise RuntimeError(f"cannot give up columns {start}..{stop} of row {slot}")
        self.owners[slot] = None
        return owner.trim(stop)

    columns_of = kept  # (a child's step: its row's blocks)

    def gather(self, slot: int, cols: Sequence[int]) -> torch.Tensor:
        """A copy of row `slot`'s own columns `cols`, in order: [L, 2, KV, len(cols), D]."""
        owner = self.owners[slot]
        assert owner is not None
        pool = owner.pool
        return torch.stack([pool.block(owner.ids[c // BLOCK])[:, :, :, c % BLOCK]
                            for c in cols], dim=3)

    def move(self, slot: int, cols: Sequence[int], start: int) -> None:
        """Row `slot`'s own columns `cols` copied, in order, to its columns from start on."""
        owner = self.owners[slot]
        assert owner is not None
        owner.write(start, self.gather(slot, cols))

    def keep(self, slots: Sequence[int]) -> list[int]:
        order = super().keep(slots)  # (the placeholder slab: no columns moved)
        self.owners = [self.owners[o] for o in order]
        self.table = self.table[order].contiguous()
        self.own_table = self.own_table[order].contiguous()
        return order


def block_tables(caches: Sequence[SlabCache]
                 ) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
    """The kernel's pool chunks, a block table a Pass and an own-block table a Pass (every
    Pass's cache a PagedCache, all of one pool)."""
    paged = [c for c in caches if isinstance(c, PagedCache)]
    if len(paged) != len(caches) or len({id(c.pool) for c in paged}) != 1:
        raise RuntimeError("the Passes of a forward on the kernel must read one KV pool")
    return list(paged[0].pool.chunks), [c.table for c in paged], [c.own_table for c in paged]
