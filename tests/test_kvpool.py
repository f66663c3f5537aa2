"""The KV pool (search.runtime.kvpool): blocks handed out and taken back, a node's columns
written across blocks and read back, a prompt's blocks shared with the partial one copied;
the kernel's block-table reads (bit for bit what the same columns in other blocks give, and
a plain float64 softmax); an engine's blocks back in the pool when its searches end."""

from __future__ import annotations

import gc

import pytest
import torch
from kernel_mark import needs_kernel
from test_kernel import L, call, make_pass, noisy, own_blocks, reference

from search.runtime.kv import KVLayout
from search.runtime.kvpool import BLOCK, Blocks, Pool, Segment, tables
from search.runtime.paged import PagedCache

KV, D = 2, 4


def pool(chunk_blocks: int = 8) -> Pool:
    p = Pool(L, KV, D, torch.float32, torch.device("cpu"))
    p.C = chunk_blocks  # (small chunks: several in a test)
    return p


def cols(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(L, 2, KV, n, D, generator=torch.Generator().manual_seed(seed))


def test_columns_written_across_blocks_read_back_in_order():
    p = pool()
    b = Blocks(p)
    first, more = cols(21), cols(30, seed=1)
    b.write(0, first)
    b.write(21, more)  # into the second block's free columns, then two new blocks
    assert len(b.ids) == -(-51 // BLOCK) == 4 and len(set(b.ids)) == 4
    assert torch.equal(b.gather(51), torch.cat([first, more], dim=3))
    assert b.table(51) == [(g, f) for g, f in zip(b.ids, (16, 16, 16, 3))]
    assert b.table(16) == [(b.ids[0], 16)] and b.nbytes(17) == 2 * p.block_bytes


def test_a_prompts_head_shares_its_whole_blocks_and_copies_the_partial_one():
    p = pool()
    base = Segment.of(cols(40), p)
    assert base.blocks is not None
    head = base.head(37)  # 2 whole blocks shared, 5 columns of the third copied
    assert head.blocks is not None and head.n == 37
    assert head.blocks.ids[:2] == base.blocks.ids[:2] and head.blocks.ids[2] != base.blocks.ids[2]
    grown = head.extended(cols(10, seed=2))  # written after its 37: into its own block
    assert torch.equal(grown.columns, torch.cat([cols(40)[:, :, :, :37], cols(10, seed=2)], 3))
    assert torch.equal(base.columns, cols(40))  # the cached prompt's columns untouched
    with pytest.raises(RuntimeError, match="shared"):
        head.blocks.write(20, cols(1))


def test_blocks_go_back_to_the_pool_when_nothing_holds_them():
    p = pool(chunk_blocks=4)
    base = Segment.of(cols(40), p)  # 3 blocks
    head = base.head(32)  # 2 shared, none of its own yet
    grown = head.extended(cols(20))  # 2 of its own
    assert p.used == 5 and len(p.chunks) == 2  # a chunk added when the first ran out
    del base  # the head keeps the base's blocks alive
    gc.collect()
    assert p.used == 5
    del head, grown
    gc.collect()
    assert p.used == 0
    again = Blocks(p)
    again.write(0, cols(8 * BLOCK))  # freed blocks handed out again: no chunk added
    assert len(p.chunks) == 2 and sorted(again.ids) == list(range(8))


def test_a_segment_off_the_pool_keeps_its_tensor():
    new = cols(5)
    seg = Segment.of(new, None)
    assert seg.kv is new and seg.blocks is None
    room = Segment.of(new, None, spare=1)
    assert room.buf is not None and room.buf.shape[3] == 6 and torch.equal(room.columns, new)
    assert torch.equal(room.extended(cols(1, 3)).columns, torch.cat([new, cols(1, 3)], 3))


def paged_cache(p: Pool, rows: int, room: int, holds=()) -> PagedCache:
    lay = KVLayout(L, KV, D, torch.float32, torch.device("cpu"))
    return PagedCache([[] for _ in range(rows)], room, lay, p, holds)


def test_a_paged_caches_rows_take_blocks_as_they_fill_and_give_them_to_their_children():
    p = pool()
    cache = paged_cache(p, 3, 40)
    cache._room_for(20)  # (a forward of 20 tokens a row: two blocks each)
    own = cache.own_table
    assert own is not None and own.shape == (3, 2) and p.used == 6
    cache.advance(20)
    child = cache.kept(1, 0, 5)  # five columns: its first block kept, the second back
    assert child.ids == own[1, :1].tolist() and child.n == 5 and p.used == 5
    with pytest.raises(RuntimeError, match="give up"):
        cache.kept(1, 0, 5)
    order = cache.keep([0, 2])  # slot 1 filled by slot 2: tables permuted, nothing copied
    assert order == [0, 2] and cache.own_table is not None
    assert cache.own_table.tolist() == own[[0, 2]].tolist()
    cache._room_for(12)  # (within their two blocks: none taken)
    assert cache.own_table.shape == (2, 2) and p.used == 5
    cache.advance(12)
    cache._room_for(1)  # (past 32 columns: a third block for each live row)
    assert cache.own_table.shape == (2, 3) and p.used == 7
    with pytest.raises(RuntimeError, match="cannot take"):
        cache._room_for(9)


def test_a_paged_cache_holds_the_blocks_its_paths_are_in():
    p = pool()
    seg = Segment.of(cols(20), p)
    assert seg.blocks is not None
    cache = paged_cache(p, 1, 4, holds=[seg.blocks])
    del seg
    gc.collect()
    assert p.used == 2  # (its tables name them by number: they stay while it does)
    del cache
    gc.collect()
    assert p.used == 0


# -- the kernel's block tables -----------------------------------------------------------------
def paged_setup(seed=0, H=6, KV=2, d=40, blocks=40, C=16):
    """Passes without parts, and per slot a block table into a pool of chunks of C blocks:
    blocks picked at random (shared between slots, as a prompt's), each filled in part or
    whole."""
    gen = torch.Generator().manual_seed(seed)
    passes = [make_pass(gen, 3, 1, 10, KV, d, [], [[], [0, 1], list(range(10))]),
              make_pass(gen, 2, 3, 6, KV, d, [], [[2], []]),
              make_pass(gen, 4, 1, 19, KV, d, [], [[], [], [5], [0, 1]])]
    chunks = [torch.randn(C, L, 2, KV, BLOCK, d, generator=gen) for _ in range(-(-blocks // C))]
    rows = []
    for p in passes:
        table = []
        for _ in range(p["B"]):
            k = int(torch.randint(0, 6, (), generator=gen))  # 0 .. 5 blocks (0: none)
            ids = torch.randperm(blocks, generator=gen)[:k].tolist()
            table.append([(g, int(torch.randint(1, BLOCK + 1, (), generator=gen))) for g in ids])
        rows.append(tables(table))
    N = sum(p["B"] * p["q"] for p in passes)
    return torch.randn(N, H + KV, d, generator=gen), passes, chunks, rows


def as_parts(passes, chunks, rows):
    """The same reads as parts: each table entry a part [L, 2, KV, fill, d] read by its slot
    (test_kernel's call writes them into blocks of its own: each part one block)."""
    C = chunks[0].shape[0]
    return [{**p, "parts": [(chunks[g // C][g % C, :, :, :, :f], [b])
                            for b in range(p["B"]) for g, f in t[b].tolist() if g >= 0]}
            for p, t in zip(passes, rows)]


def paged(qk, H, KV, passes, chunks, rows):
    """The kernel over the tables into `chunks`, the rows' own columns in blocks after them
    (in chunks of the same size added to the pool)."""
    C = chunks[0].shape[0]
    own, owns = own_blocks(passes, len(chunks) * C, noisy(chunks[0].dtype))
    own += [torch.zeros_like(own[0])] * (-len(own) % C)
    more = list(torch.stack(own).split(C))
    return torch.ops.tts.attend(qk, H, KV, 0.125, 1, [p["B"] for p in passes],
                                [p["q"] for p in passes], [p["n"] for p in passes],
                                [p["mask"] for p in passes], chunks + more, rows, owns)


@needs_kernel
@pytest.mark.parametrize("H,KV,d", [(6, 2, 40), (4, 4, 32), (9, 3, 12), (2, 1, 5)])
def test_a_block_table_reads_its_blocks_columns_in_order_wherever_they_are(H, KV, d):
    """Random tables over shared blocks filled in part: bit for bit what the same columns
    read from blocks laid out another way give, and a plain float64 softmax."""
    for seed in range(3):
        qk, passes, chunks, rows = paged_setup(seed, H, KV, d)
        got = paged(qk, H, KV, passes, chunks, rows)
        parts = as_parts(passes, chunks, rows)
        assert torch.equal(got, call(qk, H, KV, 0.125, parts))
        torch.testing.assert_close(got, reference(qk, H, KV, 0.125, parts), rtol=1e-5, atol=1e-5)


@needs_kernel
def test_a_fill_or_a_block_outside_the_pool_is_refused():
    qk, passes, chunks, rows = paged_setup()
    bad = [t.clone() for t in rows]
    bad[0][0, 0] = torch.tensor([0, BLOCK + 1])
    with pytest.raises(RuntimeError, match="outside"):
        paged(qk, 6, 2, passes, chunks, bad)
    bad[0][0, 0] = torch.tensor([10**6, 1])  # (past the pool, its rows' own blocks too)
    with pytest.raises(RuntimeError, match="outside"):
        paged(qk, 6, 2, passes, chunks, bad)
    with pytest.raises(RuntimeError, match="one rows, q, n, mask, block table"):
        paged(qk, 6, 2, passes, chunks, rows[:1])


@needs_kernel
def test_an_engines_blocks_go_back_when_its_searches_end(tiny_model):
    """Only the prompt cache's entries hold blocks once the searches are over."""
    import copy

    import search
    from search.engines.hf import HFEngine
    from search.types import Problem

    model, tok = tiny_model
    eng = HFEngine(copy.deepcopy(model), tok, chat=False, device="cpu")
    assert eng.kv.pool is not None
    for seed in range(2):
        search.solve(Problem(prompt="12+34="), "beam", engine=eng, seed=seed, n=4, m=2,
                     step_tokens=5, max_depth=3, progress=False)
    gc.collect()
    held = {g for key in eng.kv.prompts._entries
            for g in eng.kv.prompts._entries[key][0].blocks.ids}  # type: ignore[union-attr]
    assert eng.kv.pool.used == len(held) > 0
