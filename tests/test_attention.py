"""sdpa_gqa (search.runtime.attention) against transformers' own sdpa attention."""

from __future__ import annotations

import pytest
import torch
from helpers import cache_columns, tiny_llama

from search.runtime.attention import sdpa_gqa, use_sdpa_gqa


class Module(torch.nn.Module):
    is_causal = True

    def __init__(self, groups: int) -> None:
        super().__init__()
        self.num_key_value_groups = groups
        self.layer_idx = 0


@pytest.mark.parametrize("rows, q, length", [(1, 5, 40), (16, 2, 290), (4, 9, 64), (3, 1, 20)])
def test_matches_transformers_sdpa_with_a_mask(rows, q, length):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    gen = torch.Generator().manual_seed(rows * q)
    heads, kv_heads, dim = 9, 3, 16
    query = torch.randn(rows, heads, q, dim, generator=gen)
    key, value = (torch.randn(rows, kv_heads, length, dim, generator=gen) for _ in range(2))
    # a causal block over the last q columns, left padding and a hole, as the engine's slab has
    mask = torch.ones(rows, 1, q, length, dtype=torch.bool)
    mask[:, :, :, :3] = False
    mask[0, :, :, length // 2] = False
    mask[:, :, :, length - q:] &= torch.ones(q, q, dtype=torch.bool).tril()
    module = Module(heads // kv_heads)
    got, _ = sdpa_gqa(module, query, key, value, mask, scaling=dim ** -0.5)
    want, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=dim ** -0.5)
    assert got.shape == want.shape == (rows, q, heads, dim)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_model_switch_keeps_the_logits():
    model, _ = tiny_llama(seed=4)
    model.set_attn_implementation("sdpa")
    ids = torch.tensor([[3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6]])
    attention = torch.tensor([[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1]])  # left padding: a mask
    with torch.no_grad():
        ref = model(ids, attention_mask=attention).logits
        assert use_sdpa_gqa(model) and model.config._attn_implementation == "sdpa_gqa"
        torch.testing.assert_close(model(ids, attention_mask=attention).logits, ref,
                                   rtol=1e-5, atol=1e-5)
    model.set_attn_implementation("eager")
    assert not use_sdpa_gqa(model)  # only sdpa models switch


# -- cascade attention over a shared prefix ------------------------------------------------
def slab_mask(rows: int, q: int, length: int) -> torch.Tensor:
    """A mask as the engine's slab has: left padding, a hole, causal over the last q."""
    mask = torch.ones(rows, 1, q, length, dtype=torch.bool)
    mask[1:, :, :, :2] = False
    mask[0, :, :, length // 2] = length // 2 >= length - q  # a hole unless it is a new column
    mask[:, :, :, length - q:] &= torch.ones(q, q, dtype=torch.bool).tril()
    return mask


@pytest.mark.parametrize("rows, q, shared, own", [(16, 1, 40, 1), (4, 3, 25, 12), (2, 6, 7, 9),
                                                  (3, 1, 1, 30)])
def test_cascade_equals_attention_over_a_copy_of_the_prefix_per_row(rows, q, shared, own):
    """Reference: transformers' sdpa (with repeat_kv) over [prefix copied into every row ||
    the row's columns], the prefix visible to every query."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from search.runtime.attention import cascade

    gen = torch.Generator().manual_seed(rows * 100 + q)
    heads, kv_heads, dim = 6, 2, 8
    query = torch.randn(rows, heads, q, dim, generator=gen)
    pk, pv = (torch.randn(kv_heads, shared, dim, generator=gen) for _ in range(2))
    key, value = (torch.randn(rows, kv_heads, own, dim, generator=gen) for _ in range(2))
    mask = slab_mask(rows, q, own)
    full_k = torch.cat([pk.expand(rows, -1, -1, -1), key], 2)
    full_v = torch.cat([pv.expand(rows, -1, -1, -1), value], 2)
    full_mask = torch.cat([torch.ones(rows, 1, q, shared, dtype=torch.bool), mask], 3)
    module = Module(heads // kv_heads)
    want, _ = sdpa_attention_forward(module, query, full_k, full_v, full_mask, scaling=0.3)
    got = cascade(query, pk, pv, key, value, mask, 0.3)
    assert got.shape == (rows, q, heads, dim)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    # no mask: every prefix column and the new columns causally, as a plain causal pass
    causal = torch.ones(q, own, dtype=torch.bool).tril(own - q).expand(rows, 1, q, own)
    torch.testing.assert_close(cascade(query, pk, pv, key, value, None, 0.3),
                               cascade(query, pk, pv, key, value, causal, 0.3))
    # through the attention function: keys that carry the prefix (as the slab's do)
    key.shared_kv = (pk, pv)  # type: ignore[attr-defined]
    got2, _ = sdpa_gqa(module, query, key, value, mask, scaling=0.3)
    torch.testing.assert_close(got2, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError, match="cascade"):
        sdpa_gqa(module, query, key, value, mask, scaling=0.3, softcap=30.0)


def steps(kids) -> list[tuple[int, ...]]:
    return [k.step.token_ids for k in kids if k.step is not None]


def sharing_engines(tiny_model, device="cpu", **kw):
    """The same model behind an engine that never shares (the reference) and one that
    shares (share_prefix=1), recording per batch cache the path tokens its rows read where
    they live, not copied into it (on the lean forward, tree_attention: every path's
    segments, share_prefix=1 reads them all in place, on the CPU kernel through block
    tables; else the common prefix, SlabCache.prefix)."""
    import copy

    from search.engines.hf import HFEngine

    model, tok = tiny_model
    plain = HFEngine(copy.deepcopy(model), tok, chat=False, device=device, share_prefix=0, **kw)
    shared = HFEngine(copy.deepcopy(model), tok, chat=False, device=device, share_prefix=1, **kw)
    seen: list[int] = []
    batch = shared.kv.batch

    def spy(paths, room):
        cache = batch(paths, room)
        assert cache.prefix is not None or not cache.parts or cache.start == 0  # none copied
        blocks = {} if cache.table is None else dict(cache.table.view(-1, 2).tolist())
        seen.append(sum(p.shape[3] for p in cache.parts) +
                    sum(f for g, f in blocks.items() if g >= 0))  # (a block read by many: once)
        return cache

    shared.kv.batch = spy  # type: ignore[method-assign]
    return plain, shared, seen


@pytest.mark.parametrize("tree", [False, True])
def test_engine_rows_sharing_a_prefix_match_full_forwards(tiny_model, device, tree,
                                                          monkeypatch):
    """Rows whose paths share the root and one step (and some a further step of their own)
    decode over one copy of the shared part (tree attention: over every path's segments
    where they live): greedy tokens equal plain generate, logprobs and
    every child's KV segment equal a plain full forward, sampled tokens equal the engine that
    copies the prefix per row (same seed). Without tree attention off the CPU kernel: a
    common prefix is a part only there (the kernel, reading no parts, copies paths whole)."""
    from search.runtime import lean
    from search.types import Problem

    if not tree:
        monkeypatch.setattr(lean, "kernel_serves", lambda x: False)
    model, _ = tiny_model
    plain, eng, seen = sharing_engines(tiny_model, device, tree_attention=tree)
    root = eng.root(Problem(prompt="12+34=56 and 7*8="))
    (a,) = eng.extend([root], ["9 9"])
    ((b,),) = eng.expand([a], 1, stop=None, max_tokens=5, temperature=0)
    nodes = [a, b, a]
    seen.clear()
    kids = [k for ks in eng.expand(nodes, 2, stop=None, max_tokens=9, temperature=0) for k in ks]
    # tree attention: the root and a's and b's steps, each read where it lives by the rows
    # under it; else root + a's step, the prefix common to all six rows, kept once
    assert seen and seen[-1] == (b.n_tokens if tree else a.n_tokens)
    for kid in kids:
        assert kid.parent is not None and kid.step is not None
        ids = kid.token_ids()
        start = kid.parent.n_tokens
        with torch.no_grad():
            full = model(torch.tensor([ids]), use_cache=True)
        lp = full.logits[0].log_softmax(-1)
        assert lp[start - 1:len(ids) - 1].argmax(-1).tolist() == ids[start:]  # greedy
        ref = [lp[i - 1, ids[i]].item() for i in range(start, len(ids))]
        assert max(abs(x - y) for x, y in zip(kid.step.logprobs, ref)) < 1e-4
        seg = eng.kv.get(kid)
        assert seg is not None
        assert torch.allclose(seg.columns.cpu(), cache_columns(full.past_key_values, start, start + seg.n),
                              atol=1e-4)
    # sampling: the same tokens as the engine that copies the prefix into every row
    p_root = plain.root(Problem(prompt="12+34=56 and 7*8="))
    (p_a,) = plain.extend([p_root], ["9 9"])
    mine = eng.expand([a], 5, stop=None, max_tokens=8, temperature=0.9, seed=7)[0]
    ref = plain.expand([p_a], 5, stop=None, max_tokens=8, temperature=0.9, seed=7)[0]
    assert steps(mine) == steps(ref)
    assert seen[-1] == a.n_tokens


def test_speculation_over_a_shared_prefix_is_token_identical(tiny_model, device):
    """Speculative verification passes (several query tokens, rows accepting different
    counts, holes) attend to the shared prefix as well: greedy output equals plain decoding."""
    from search.types import Problem

    plain, eng, seen = sharing_engines(tiny_model, device, speculate=True)
    plain.spec = plain.drafter = None
    prompts = ["12+34=56 and 7*8=", "1 2 3 4 5 6 7 8 9"]
    for prompt in prompts:
        for engine in (plain, eng):
            engine.eos_ids = frozenset()
        got = eng.expand([eng.root(Problem(prompt=prompt))], 3, stop=None, max_tokens=20,
                         temperature=0)[0]
        want = plain.expand([plain.root(Problem(prompt=prompt))], 3, stop=None,
                            max_tokens=20, temperature=0)[0]
        assert steps(got) == steps(want)
    assert eng.spec_stats.verified > 0 and max(seen) >= len(prompts[0])


def test_batch_cache_shares_only_common_leading_segments_of_enough_tokens():
    from search.runtime.kv import KVLayout, batch_cache

    layout = KVLayout(2, 1, 4, torch.float32, torch.device("cpu"), "bool", cascade=True)
    seg = [torch.randn(2, 2, 1, n, 4) for n in (5, 3, 2, 4)]
    paths = [[seg[0], seg[1], seg[2]], [seg[0], seg[1]], [seg[0], seg[1], seg[3]]]
    cache = batch_cache(paths, 3, layout, share_prefix=8)
    assert cache.shared == 8 and cache.length == 4  # the slab holds the suffixes, padded
    assert cache.prefix is not None
    torch.testing.assert_close(cache.prefix, torch.cat(seg[:2], 3))
    torch.testing.assert_close(cache.take(2, 0, 4), seg[3])
    assert cache.valid[1, :4].tolist() == [False] * 4  # row 1 has no suffix: all padding
    assert batch_cache(paths, 3, layout, share_prefix=9).shared == 0  # too short to pay
    assert batch_cache(paths[:1], 3, layout, share_prefix=1).shared == 0  # one row: no sharing
    assert batch_cache([[seg[1]], [seg[0]]], 3, layout, share_prefix=1).shared == 0
    eager = KVLayout(2, 1, 4, torch.float32, torch.device("cpu"), "additive")
    assert batch_cache(paths, 3, eager, share_prefix=1).shared == 0  # eager attention: copies


def test_cascade_keeps_a_bf16_query_in_bf16():
    """bf16 in, bf16 out (the next projection's weights are bf16), close to the fp32 result."""
    from search.runtime import attention

    gen = torch.Generator().manual_seed(5)
    query = torch.randn(3, 6, 2, 8, generator=gen)
    pk, pv = (torch.randn(2, 9, 8, generator=gen) for _ in range(2))
    key, value = (torch.randn(3, 2, 5, 8, generator=gen) for _ in range(2))
    mask = slab_mask(3, 2, 5)
    want = attention.cascade(query, pk, pv, key, value, mask, 0.3)
    q16, pk16, pv16, k16, v16 = (t.bfloat16() for t in (query, pk, pv, key, value))
    got = attention.cascade(q16, pk16, pv16, k16, v16, mask, 0.3)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want, rtol=0.05, atol=0.05)


def test_bf16_engine_decodes_over_a_shared_prefix(tiny_model):
    """bf16 weights and a shared prefix together (the lean forward in bf16, cascade
    attention): rows decode to the end with the prompt held once."""
    from search.types import Problem

    plain, eng, seen = sharing_engines(tiny_model, dtype="bf16")
    eng.eos_ids = frozenset()
    kids = eng.expand([eng.root(Problem(prompt="12+34=56 and 7*8="))], 3, stop=None,
                      max_tokens=6, temperature=0)[0]
    assert [len(k.step.token_ids) for k in kids if k.step is not None] == [6, 6, 6]
    assert seen and max(seen) > 0 and eng.kv.layout.dtype is torch.bfloat16
