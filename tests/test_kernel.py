"""The CPU attention kernel (search.runtime.kernel, attend.cpp) against a plain float64
softmax over the columns each query token sees (parts of a path, each read by some slots,
handed to it in a KV pool's blocks through block tables, then a slot's own columns under its
mask, in blocks of its own), and a token's bits whatever else shares its call and however
many threads split it; its writes; its refusals; the build's fallback."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from kernel_mark import needs_kernel

from search.runtime import kernel
from search.runtime.kvpool import BLOCK, tables

pytestmark = needs_kernel
L = 3  # layers of a pool; every call below reads layer 1


def make_pass(gen, B, q, n, KV, d, parts, hide) -> dict[str, Any]:
    """A Pass of B rows, q query tokens each after n columns of their own, given as a slab
    [L, 2, B + 2, KV, n + q + 5, d] (what in_blocks writes into the rows' own blocks); its
    mask: causal over its own q tokens, the columns hide[b] hides of row b unseen; parts:
    (S, readers or None) -> ([L, 2, KV, S, d], readers: the slots that read it, None every
    slot)."""
    slab = torch.randn(L, 2, B + 2, KV, n + q + 5, d, generator=gen)
    mask = torch.ones(B, 1, q, n + q, dtype=torch.bool)
    mask[:, :, :, n:] = torch.ones(q, q, dtype=torch.bool).tril()
    for b, cols in enumerate(hide):
        mask[b, :, :, cols] = False
    ps = [(torch.randn(L, 2, KV, S, d, generator=gen), who) for S, who in parts]
    return dict(B=B, q=q, n=n, slab=slab, mask=mask, parts=ps)


def noisy(dtype: torch.dtype, seed: int = 9):
    """A maker of blocks [L, 2, KV, BLOCK, d] of random columns (what the kernel must not read
    past a block's fill) from columns [L, 2, KV, f, d] (f <= BLOCK; none: all noise)."""
    gen = torch.Generator().manual_seed(seed)

    def block(cols: torch.Tensor) -> torch.Tensor:
        out = torch.randn(L, 2, cols.shape[2], BLOCK, cols.shape[4], generator=gen).to(dtype)
        out[:, :, :, :cols.shape[3]] = cols
        return out
    return block


def own_blocks(passes, first: int, block) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each row's own columns (its slab's, all of them) in blocks of its own numbered from
    `first` on -> (the blocks, an own-block table [B, R] a Pass)."""
    blocks, owns = [], []
    for p in passes:
        slab = p["slab"]
        ids = []
        for b in range(p["B"]):
            ids.append([first + len(blocks) + j for j in range(-(-slab.shape[4] // BLOCK))])
            blocks += [block(slab[:, :, b, :, c:c + BLOCK]) for c in range(0, slab.shape[4], BLOCK)]
        owns.append(torch.tensor(ids, dtype=torch.long).view(p["B"], -1))
    return blocks, owns


def in_blocks(passes) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
    """The Passes' parts, then their rows' own columns, written into a KV pool's blocks of
    BLOCK columns (a part's last block filled in part, the rest of it noise the kernel must
    not read) -> (the pool's one chunk [C, L, 2, KV, BLOCK, d] of the first slab's dtype, the
    kernel's KV dtype; a block table per Pass: each slot the blocks of the parts it reads, in
    order; an own-block table per Pass)."""
    block = noisy(passes[0]["slab"].dtype)
    blocks = [block(passes[0]["slab"][:, :, 0, :, :0])]  # (a block no table names)
    rows = []
    for p in passes:
        held = []  # per part its blocks' (id, fill)
        for kv, _ in p["parts"]:
            mine = []
            for c in range(0, kv.shape[3], BLOCK):
                mine.append((len(blocks), min(BLOCK, kv.shape[3] - c)))
                blocks.append(block(kv[:, :, :, c:c + BLOCK]))
            held.append(mine)
        rows.append(tables([[e for (_, who), mine in zip(p["parts"], held)
                             if who is None or b in who for e in mine] for b in range(p["B"])]))
    own, owns = own_blocks(passes, len(blocks), block)
    return [torch.stack(blocks + own)], rows, owns


def call(qk, H, KV, scale, passes):
    """The kernel's call over the Passes, their parts and own columns read from a pool's
    blocks (in_blocks)."""
    chunks, rows, owns = in_blocks(passes)
    return torch.ops.tts.attend(qk, H, KV, scale, 1, [p["B"] for p in passes],
                                [p["q"] for p in passes], [p["n"] for p in passes],
                                [p["mask"] for p in passes], chunks, rows, owns)


def reference(qk, H, KV, scale, passes):
    """Row by row, head by head: softmax over [the parts the slot reads || its seen columns]."""
    out, r, g = [], 0, H // KV
    for p in passes:
        for b in range(p["B"]):
            for t in range(p["q"]):
                heads = []
                for h in range(H):
                    c = h // g
                    read = [kv[1, :, c] for kv, who in p["parts"] if who is None or b in who]
                    seen = p["mask"][b, 0, t]
                    own = p["slab"][1, :, b, c, :p["n"] + p["q"]][:, seen]
                    kv = torch.cat(read + [own], 1).double()  # [2, columns, d]
                    w = torch.softmax(kv[0] @ qk[r, h].double() * scale, 0)
                    heads.append(w @ kv[1])
                out.append(torch.cat(heads))
                r += 1
    return torch.stack(out).float()


def setup(seed=0, H=4, KV=4, d=32):
    """Decode Passes (q = 1) over a shared prefix, none, and parts read by some slots (several
    blocks each, the last filled in part); a verification-like Pass (q = 3) over two parts."""
    gen = torch.Generator().manual_seed(seed)
    passes = [make_pass(gen, 3, 1, 10, KV, d, [(17, None)], [[], [0, 1, 2, 3], list(range(10))]),
              make_pass(gen, 2, 1, 4, KV, d, [], [[0], []]),
              make_pass(gen, 4, 1, 19, KV, d, [(9, None), (30, [1, 3])], [[], [], [5], [0, 1]]),
              make_pass(gen, 2, 3, 6, KV, d, [(5, None), (8, [0])], [[2], []])]
    N = sum(p["B"] * p["q"] for p in passes)
    return torch.randn(N, H + KV, d, generator=gen), passes


@pytest.mark.parametrize("H,KV,d", [(4, 4, 32), (6, 2, 32), (9, 3, 12), (2, 1, 5), (10, 2, 40),
                                    (8, 1, 20), (12, 4, 64)])
def test_matches_a_plain_softmax_over_the_parts_and_the_seen_columns(H, KV, d):
    """Grouped heads, head dims a vector does not divide, hidden columns, causal tokens."""
    qk, passes = setup(H=H, KV=KV, d=d)
    got = call(qk, H, KV, 0.17, passes)
    torch.testing.assert_close(got, reference(qk, H, KV, 0.17, passes), atol=2e-5, rtol=2e-5)


def ungrouped(qk, H, KV, passes):
    """The same call with each query head given its own copy of its group's keys and values
    (KV = H): qk's key heads and every slab and part repeated per query head."""
    g = H // KV
    qk = torch.cat([qk[:, :H], qk[:, H:].repeat_interleave(g, 1)], 1)
    return qk, [dict(p, slab=p["slab"].repeat_interleave(g, 3),
                     parts=[(kv.repeat_interleave(g, 2), who) for kv, who in p["parts"]])
                for p in passes]


@pytest.mark.parametrize("H,KV,d", [(6, 2, 32), (9, 3, 12), (10, 2, 40), (8, 1, 20),
                                    (12, 4, 64)])
def test_a_group_of_heads_read_together_gets_the_bits_each_head_gets_alone(H, KV, d):
    """Keys and values read once for the query heads that share them: each head's output is
    bit for bit what it is when every head reads its own copy (each head's sums in the same
    order)."""
    qk, passes = setup(H=H, KV=KV, d=d)
    own_qk, own = ungrouped(qk, H, KV, passes)
    assert torch.equal(call(qk, H, KV, 0.17, passes), call(own_qk, H, H, 0.17, own))


def assert_alone_as_together(qk, passes):
    """Each Pass called alone gives its rows' bits of the call of them all."""
    together = call(qk, 4, 4, 0.17, passes)
    at = 0
    for p in passes:
        rows = p["B"] * p["q"]
        assert torch.equal(call(qk[at:at + rows], 4, 4, 0.17, [p]), together[at:at + rows])
        at += rows


def test_a_tokens_bits_do_not_depend_on_the_other_passes_in_its_call():
    assert_alone_as_together(*setup())


def test_a_tokens_bits_do_not_depend_on_the_thread_count():
    """Enough work that two threads split the rows: the same bits as one thread."""
    gen = torch.Generator().manual_seed(1)
    passes = [make_pass(gen, 48, 1, 300, 4, 64, [(200, None)], []) for _ in range(3)]
    qk = torch.randn(144, 8, 64, generator=gen)
    before = torch.get_num_threads()
    try:
        outs = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            outs.append(call(qk, 4, 4, 0.125, passes))
    finally:
        torch.set_num_threads(before)
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("bad,match", [
    (lambda qk, p: (qk.double(), p), "qk must be"),
    (lambda qk, p: (qk[:-1], p), "qk has"),
    (lambda qk, p: (qk, [dict(p[0], mask=p[0]["mask"][..., :-1])] + p[1:]), "mask 0 must be"),
    (lambda qk, p: (qk, [dict(p[0], n=500)] + p[1:]), "own blocks of Pass 0 must be"),
    (lambda qk, p: (qk, [dict(p[0], mask=torch.zeros_like(p[0]["mask"]), parts=[])] + p[1:]),
     "sees no column"),
])
def test_inputs_it_cannot_read_are_refused(bad, match):
    qk, passes = setup()
    qk, passes = bad(qk, passes)
    with pytest.raises(RuntimeError, match=match):
        call(qk, 4, 4, 0.17, passes)


def write_setup(KV=3, d=12, dtype=torch.float32):
    """Three Passes (2, 1, 4 rows; 1, 3, 2 tokens a row after 4, 0, 7 columns), their rows'
    columns in own blocks of one pool chunk (own_blocks; the slabs they were made of kept as
    `before`), and the new keys and values as strided views of one q|k|v-like tensor (as the
    forward hands them)."""
    gen = torch.Generator().manual_seed(2)
    rows, q, n = [2, 1, 4], [1, 3, 2], [4, 0, 7]
    passes = [dict(B=B, slab=torch.randn(L, 2, B, KV, c + t + 2, d, generator=gen).to(dtype))
              for B, t, c in zip(rows, q, n)]
    blocks, owns = own_blocks(passes, 0, noisy(dtype))
    N = sum(B * t for B, t in zip(rows, q))
    both = torch.randn(N, 5 * KV * d, generator=gen)  # [N, (3 KV) d] then noise after
    k = both[:, : KV * d].view(N, KV, d)
    v = both[:, 2 * KV * d: 3 * KV * d].view(N, KV, d)
    before = [p["slab"] for p in passes]
    return k, v, rows, q, n, [torch.stack(blocks)], owns, before


def with_columns(chunk: torch.Tensor, owns, slabs) -> torch.Tensor:
    """A copy of the pool chunk with each row's own blocks holding its slab's columns
    (slabs [L, 2, B, KV, T, d] a Pass), the rest of its blocks as they were."""
    out = chunk.clone()
    for own, slab in zip(owns, slabs):
        for b, row in enumerate(own.tolist()):
            for j, g in enumerate(row):
                cols = slab[:, :, b, :, j * BLOCK:(j + 1) * BLOCK]
                out[g, :, :, :, :cols.shape[3]] = cols
    return out


def written(k, v, rows, q, n, before, cast=lambda t: t) -> list[torch.Tensor]:
    """The plain way: each token's keys and values put in its row's column, one at a time."""
    want = [s.clone() for s in before]
    r = 0
    for s, B, t, c in zip(want, rows, q, n):
        for b in range(B):
            for j in range(t):
                s[1, 0, b, :, c + j] = cast(k[r])
                s[1, 1, b, :, c + j] = cast(v[r])
                r += 1
    return want


def test_write_puts_each_tokens_keys_and_values_in_its_own_column_and_nothing_else():
    k, v, rows, q, n, pool, owns, before = write_setup()
    want = with_columns(pool[0], owns, written(k, v, rows, q, n, before))
    torch.ops.tts.write(k, v, 1, rows, q, n, pool, owns)
    assert torch.equal(pool[0], want)  # (every layer, and the blocks' columns past the rows')


@pytest.mark.parametrize("bad,match", [
    (lambda k, v, rows, q, n, o: (k.double(), v, rows, q, n, o), "k and v must be"),
    (lambda k, v, rows, q, n, o: (k, v[:-1], rows, q, n, o), "k and v must be"),
    (lambda k, v, rows, q, n, o: (k[:-1], v[:-1], rows, q, n, o), "k has"),
    (lambda k, v, rows, q, n, o: (k, v, rows, q, [4, 0, 20], o), "own blocks of Pass 2 must"),
    (lambda k, v, rows, q, n, o: (k, v, rows, q, n, [o[0], o[1], o[2] + 99]), "outside the pool"),
    (lambda k, v, rows, q, n, o: (k, v, rows, q[:2], n, o), "one rows, q, n and own-block"),
])
def test_write_refuses_what_does_not_fit(bad, match):
    k, v, rows, q, n, pool, owns, _ = write_setup()
    k, v, rows, q, n, owns = bad(k, v, rows, q, n, owns)
    with pytest.raises(RuntimeError, match=match):
        torch.ops.tts.write(k, v, 1, rows, q, n, pool, owns)


def test_a_failed_build_warns_and_the_forward_takes_the_fallback(monkeypatch):
    """No compiler (the build raises): `serves` says no, with a warning that says why; and
    TTS_ATTEND_KERNEL=0 turns it off without trying."""
    from torch.utils import cpp_extension

    def fail(*args, **kwargs):
        raise RuntimeError("no g++ here")

    monkeypatch.setattr(cpp_extension, "load", fail)
    monkeypatch.setattr(kernel, "_built", [])
    with pytest.warns(RuntimeWarning, match="no g\\+\\+ here.*each Pass attends alone"):
        assert not kernel.serves(torch.zeros(1))
    monkeypatch.setattr(kernel, "_built", [])
    monkeypatch.setenv("TTS_ATTEND_KERNEL", "0")
    assert not kernel.available()
