"""search.runtime.lean against transformers' own forward of the same model."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from helpers import tiny_llama, written
from kernel_mark import needs_kernel

from search.runtime import attention, lean, packed, scripted
from search.runtime.kv import KVLayout, SlabCache, batch_cache
from search.runtime.kvpool import Blocks, Pool, Segment
from search.runtime.paged import PagedCache
from search.runtime.passes import cache_arg


def family(arch: str):
    """A tiny random Mistral (no sliding window), Qwen2 (random q/k/v biases) or Qwen3
    (random q and k norm weights): the Llama-family blocks the lean forward also runs."""
    from transformers import (
        MistralConfig,
        MistralForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
        Qwen3Config,
        Qwen3ForCausalLM,
    )

    llama, tok = tiny_llama()
    kw: dict[str, Any] = dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
              tie_word_embeddings=False)
    torch.manual_seed(0)
    if arch == "mistral":
        return MistralForCausalLM(MistralConfig(**kw, sliding_window=None)).eval(), tok
    if arch == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(**kw, use_sliding_window=False)).eval()
        for name, weight in model.named_parameters():
            if name.endswith(("q_norm.weight", "k_norm.weight")):
                torch.nn.init.normal_(weight, mean=1.0, std=0.5)
        return model, tok
    model = Qwen2ForCausalLM(Qwen2Config(**kw, use_sliding_window=False)).eval()
    for m in model.modules():
        if isinstance(m, torch.nn.Linear) and m.bias is not None:
            torch.nn.init.normal_(m.bias, std=0.2)
    return model, tok


def prepared(seed: int = 0, arch: str = "llama", **kw):
    """A tiny Llama (or Llama-family model) as the engine runs it: sdpa_gqa attention, packed
    (fused) linears."""
    model, tok = tiny_llama(seed=seed, **kw) if arch == "llama" else family(arch)
    attention.use_sdpa_gqa(model)
    packed.pack_linears(model)
    return model, tok


def caches(model, rows: int, lengths: list[int], shared: int, room: int):
    """Two identical slab caches of random paths: rows share their first `shared` columns
    (held once as the prefix when shared > 0), then each has its own length."""
    layout = KVLayout.of(model, torch.device("cpu"))
    gen = torch.Generator().manual_seed(1)
    shape = (layout.layers, 2, layout.kv_heads)
    common = [torch.randn(*shape, shared, layout.head_dim, generator=gen)] if shared else []
    paths = [common + [torch.randn(*shape, n, layout.head_dim, generator=gen)] for n in lengths]
    out = [batch_cache(paths, room, layout, share_prefix=1 if shared else 0) for _ in range(2)]
    assert all(isinstance(c, SlabCache) and c.shared == shared for c in out)
    return out


def slab(model, rows: int, lengths: list[int], shared: int, room: int) -> SlabCache:
    """One of `caches`' two slab caches."""
    cache = caches(model, rows, lengths, shared, room)[0]
    assert isinstance(cache, SlabCache)
    return cache


def kernel_cache(model, lengths: list[int], shared: int, room: int) -> SlabCache:
    """A batch cache as the CPU kernel reads it, of random paths in a KV pool's blocks (a
    paged cache: every row's table names the shared prefix's blocks, if any, then its own)."""
    layout = KVLayout.of(model, torch.device("cpu"))
    pool = Pool(layout.layers, layout.kv_heads, layout.head_dim, layout.dtype, layout.device)
    gen = torch.Generator().manual_seed(1)

    def blocks(n: int) -> Blocks:  # n random columns in the pool
        seg = Segment.of(torch.randn(layout.layers, 2, layout.kv_heads, n, layout.head_dim,
                                     generator=gen), pool)
        assert seg.blocks is not None
        return seg.blocks

    common, own = blocks(shared), [blocks(n) for n in lengths]
    return PagedCache([common.table(shared) + b.table(n) for b, n in zip(own, lengths)], room,
                      layout, pool, [common, *own])


def tree_mask(cache, q: int) -> torch.Tensor:
    """The cache's mask for q new tokens with a draft tree's ancestry over them: token i sees
    itself and (here) every even-numbered token before it."""
    mask = cache.attention_mask(q).clone()
    n = cache.length
    for i in range(q):
        for j in range(i):
            mask[:, :, i, n + j] = j % 2 == 0
    return mask


@pytest.mark.parametrize("arch", ["llama", "mistral", "qwen2", "qwen3"])
@pytest.mark.parametrize("shared", [0, 7])
@pytest.mark.parametrize("q,keep,tree", [(1, 1, False), (3, 0, False), (4, 4, True),
                                         (2, 1, False)])
def test_matches_transformers_on_slab_batches(shared, q, keep, tree, arch):
    """Logits, final hidden states and the KV columns written: the lean forward equals the
    model's own forward over an identical cache (rows of different lengths: left padding;
    with and without a shared prefix; one and several query tokens; a tree mask), for Llama
    and the Mistral, Qwen2 and Qwen3 blocks."""
    model, _ = prepared(arch=arch)
    fast = lean.LeanLlama(model)
    mine, ref = caches(model, 3, [5, 2, 4], shared, room=q)
    assert isinstance(mine, SlabCache) and isinstance(ref, SlabCache)
    ids = torch.randint(0, model.config.vocab_size, (3, q))
    past = torch.tensor([[shared + 5], [shared + 2], [shared + 4]])
    pos = past + torch.arange(q)
    masks = [tree_mask(c, q) if tree else c.attention_mask(q) for c in (mine, ref)]
    got = fast(input_ids=ids, attention_mask=masks[0], position_ids=pos, past_key_values=mine,
               use_cache=True, logits_to_keep=keep, output_hidden_states=True)
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=masks[1], position_ids=pos,
                     use_cache=True, logits_to_keep=keep, output_hidden_states=True,
                     **{cache_arg(type(model)): ref})
    kept = q if keep == 0 else keep
    assert isinstance(got, lean.Output) and got.logits.shape == (3, kept, model.config.vocab_size)
    torch.testing.assert_close(got.logits, want.logits, rtol=1e-5, atol=1e-5)
    assert got.hidden_states is not None
    torch.testing.assert_close(got.hidden_states[-1], want.hidden_states[-1][:, q - kept:],
                               rtol=1e-5, atol=1e-5)
    assert mine.length == ref.length == 5 + q
    # (Qwen3's keys: 128-wide heads, normed and scaled by weights up to ~2.5: larger roundings)
    torch.testing.assert_close(mine.buf, ref.buf, rtol=1e-5, atol=4e-6 if arch == "qwen3" else 1e-6)


def test_rotary_table_grows_past_its_first_size(monkeypatch):
    """Positions beyond the first rotary table rebuild it longer, from the model's module."""
    monkeypatch.setattr(lean, "TABLE_MIN", 8)
    model, _ = prepared()
    fast = lean.LeanLlama(model)
    assert fast.rope[0].shape[0] == fast.rope[1].shape[0] == 8
    mine, ref = caches(model, 2, [3, 3], 0, room=2)
    ids = torch.tensor([[5, 6], [7, 8]])
    pos = torch.tensor([[40, 41], [90, 91]])  # positions need not follow the columns
    got = fast(input_ids=ids, attention_mask=mine.attention_mask(2), position_ids=pos,
               past_key_values=mine, logits_to_keep=0)
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=ref.attention_mask(2), position_ids=pos,
                     logits_to_keep=0, **{cache_arg(type(model)): ref})
    assert fast.rope[0].shape[0] == fast.rope[1].shape[0] >= 92
    torch.testing.assert_close(got.logits, want.logits, rtol=1e-5, atol=1e-5)


def test_anything_else_goes_to_the_model():
    """A cache that is not a slab (transformers' DynamicCache) or no cache at all: the model's
    own forward runs, with every argument passed on."""
    model, _ = prepared()
    fast = lean.LeanLlama(model)
    ids = torch.tensor([[1, 2, 3, 4]])
    out = fast(input_ids=ids, attention_mask=torch.ones_like(ids),
               position_ids=torch.arange(4)[None], use_cache=True)
    assert not isinstance(out, lean.Output) and out.past_key_values is not None
    with torch.no_grad():
        torch.testing.assert_close(out.logits, model(input_ids=ids).logits)


def test_says_why_it_cannot_run_a_model():
    model, _ = tiny_llama()
    assert "attention" in (lean.why_not(model) or "")  # transformers' sdpa, not sdpa_gqa
    attention.use_sdpa_gqa(model)
    assert lean.why_not(model) is None  # packed linears or not
    half = copy.deepcopy(model).to(torch.bfloat16)
    assert lean.why_not(half) is None  # bf16 and fp16 run too (tests/test_gpu_lean.py)
    double = copy.deepcopy(model).to(torch.float64)
    assert "float64" in (lean.why_not(double) or "")
    assert lean.lean_forward(double) is None
    with pytest.raises(ValueError, match="float64"):
        lean.LeanLlama(double)
    other = copy.deepcopy(model)
    other.config.model_type = "gpt2"
    assert "Llama" in (lean.why_not(other) or "")
    windowed, _ = family("mistral")
    windowed.config.sliding_window = 16
    attention.use_sdpa_gqa(windowed)
    assert "sliding" in (lean.why_not(windowed) or "")


def test_any_attention_is_taken_where_the_lean_forward_runs():
    """take_attention: sdpa, eager and flex models switch to sdpa_gqa where the lean forward
    runs them; an eager model it cannot run keeps eager (its reason said), and lean=False
    leaves eager alone."""
    for impl in ("sdpa", "eager", "flex_attention"):
        model, _ = tiny_llama()
        model.set_attn_implementation(impl)
        assert lean.take_attention(model) is None
        assert model.config._attn_implementation == attention.NAME
    model.set_attn_implementation("eager")
    assert lean.take_attention(model, lean=False) == "lean=False"
    assert model.config._attn_implementation == "eager"
    windowed, _ = family("mistral")
    windowed.config.sliding_window = 16
    windowed.set_attn_implementation("eager")
    assert "sliding" in (lean.take_attention(windowed) or "")
    assert windowed.config._attn_implementation == "eager"
    assert lean.lean_forward(windowed) is None


def test_engine_runs_qwen3_on_it_and_decodes_as_transformers_does():
    """A Qwen3 model (its q and k heads RMS-normed before rotary) runs the lean forward in
    the engine, and greedy steps and their logprobs are those of transformers' forward."""
    from search.engines.hf import HFEngine
    from search.types import Problem

    model, tok = family("qwen3")
    engines = [HFEngine(copy.deepcopy(model), tok, chat=False, device="cpu", lean=flag)
               for flag in (True, False)]
    assert isinstance(engines[0].forward, lean.LeanLlama) and engines[0].forward_note is None
    outs = []
    for e in engines:
        root = e.root(Problem(prompt="12+34=56 and 7*8="))
        kids = e.expand([root], 2, stop=None, max_tokens=12, temperature=0)[0]
        kids = [k for ks in e.expand(kids, 1, stop=None, max_tokens=6, temperature=0)
                for k in ks]
        outs.append([(k.step.token_ids, k.step.logprobs) for k in kids if k.step is not None])
    assert len(outs[0]) == 2
    for (toks, lps), (ref_toks, ref_lps) in zip(*outs, strict=True):
        assert toks == ref_toks
        assert max(abs(a - b) for a, b in zip(lps, ref_lps)) < 1e-4


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_engine_with_and_without_it_decodes_the_same(tiny_model, device, impl):
    """The engine's decode, prefill and speculation paths through the lean forward give the
    tokens and logprobs of transformers' forward (lean=False), greedy and sampled, whichever
    attention the model was given: a model on eager attention runs the lean forward too,
    checked against transformers' eager forward."""
    from search.engines.hf import HFEngine
    from search.types import Problem

    model, tok = tiny_model
    copies = [copy.deepcopy(model) for _ in range(2)]
    for m in copies:
        m.set_attn_implementation(impl)
    engines = [HFEngine(m, tok, chat=False, device=device, lean=flag, share_prefix=1)
               for m, flag in zip(copies, (True, False))]
    assert isinstance(engines[0].forward, lean.LeanLlama)
    assert engines[1].forward is engines[1].model
    assert engines[1].model.config._attn_implementation == ("eager" if impl == "eager"
                                                            else attention.NAME)
    outs = []
    for e in engines:
        root = e.root(Problem(prompt="12+34=56 and 7*8="))
        greedy = e.expand([root], 3, stop=None, max_tokens=12, temperature=0)[0]
        sampled = e.expand([root], 4, stop=None, max_tokens=10, temperature=0.8, seed=3)[0]
        outs.append([(k.step.token_ids, k.step.logprobs) for k in greedy + sampled
                     if k.step is not None])
    for (toks, lps), (ref_toks, ref_lps) in zip(*outs, strict=True):
        assert toks == ref_toks
        assert max(abs(a - b) for a, b in zip(lps, ref_lps)) < 1e-4


@pytest.mark.parametrize("shared,q", [(0, 1), (7, 1), (7, 3), (0, 4)])
def test_the_kernel_and_the_per_pass_fallback_compute_the_same_forward(shared, q, monkeypatch):
    """The attention kernel (search.runtime.kernel) against the per-Pass path the forward
    takes without it (attention.cascade over a shared prefix, SDPA without one): the same
    logits to rounding and the same greedy tokens, decoding and prefilling; the same cache
    columns (the keys and values do not depend on attention in the layer that writes them,
    only in the layers after it: to rounding)."""
    model, _ = prepared()
    fast = lean.LeanLlama(model)
    lengths = [5, 2, 4]
    ids = torch.arange(3 * q).view(3, q) % model.config.vocab_size
    pos = torch.tensor(lengths)[:, None] + shared + torch.arange(q)
    got = []
    for kernel in (True, False):
        if not kernel:
            monkeypatch.setattr(lean, "kernel_serves", lambda x: False)
        cache = slab(model, 3, lengths, shared, room=q)
        got.append((fast.forward_slab(ids, pos, cache, cache.attention_mask(q), 0, False), cache))
    (a, ca), (b, cb) = got
    torch.testing.assert_close(a.logits, b.logits, rtol=1e-4, atol=1e-4)
    assert torch.equal(a.logits.argmax(-1), b.logits.argmax(-1))
    torch.testing.assert_close(ca.buf[..., :ca.length, :], cb.buf[..., :cb.length, :],
                               rtol=1e-4, atol=1e-4)


def test_a_pass_whose_rows_are_not_its_caches_is_refused_before_any_write():
    model, _ = prepared()
    fast = lean.LeanLlama(model)
    cache = slab(model, 3, [5, 2, 4], 7, room=1)
    before = cache.buf.clone()
    ids, pos = torch.zeros(2, 1, dtype=torch.long), torch.tensor([[12], [9]])
    with pytest.raises(RuntimeError, match="slab cache of 3 rows"):
        fast.forward_slab(ids, pos, cache, cache.attention_mask(1)[:2], 1, False)
    assert cache.length == 5 and torch.equal(cache.buf, before)


def test_slab_from_paths_holds_each_row_left_padded_with_zeros():
    """SlabCache.from_paths against a plain reference: row b holds its segments end to end,
    right-aligned at column P (the longest path), zeros and invalid columns before them, the
    room after them valid (whatever its contents), for paths of 0, 1 and 3 segments."""
    layout = KVLayout(layers=2, kv_heads=3, head_dim=4, dtype=torch.float32,
                      device=torch.device("cpu"), cascade=True)
    gen = torch.Generator().manual_seed(7)
    seg = lambda n: torch.randn(2, 2, 3, n, 4, generator=gen)  # noqa: E731
    paths = [[seg(3), seg(1), seg(2)], [], [seg(5)], [seg(6)]]
    cache = SlabCache.from_paths(paths, 4, layout)
    P = 6
    assert cache.length == P and cache.capacity == P + 4 and cache.rows == 4
    for b, parts in enumerate(paths):
        n = sum(kv.shape[3] for kv in parts)
        want = torch.cat([torch.zeros(2, 2, 3, P - n, 4)] + list(parts), dim=3)
        assert torch.equal(cache.buf[:, :, b, :, :P], want), b
        assert cache.valid[b].tolist() == [False] * (P - n) + [True] * (n + 4), b


@needs_kernel
@pytest.mark.parametrize("shared,q", [(7, 1), (7, 3), (0, 1), (0, 4)])
def test_logits_do_not_depend_on_the_thread_count(shared, q):
    """A lean forward gives the same bits at one intra-op thread and at two (packed GEMMs,
    norms, element-wise ops and the attention kernel split rows, not sums, across threads),
    over a shared prefix (in a KV pool) and without one, decoding and prefilling."""
    model, _ = prepared()
    fast = lean.LeanLlama(model)
    fast.threads = 0  # each forward on the count set here (not omp.one_thread's)
    before = torch.get_num_threads()
    got = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            lengths = [5 + 3 * i for i in range(16)]  # 16 rows: shapes two threads split
            cache = kernel_cache(model, lengths, shared, room=q)
            ids = torch.arange(16 * q).view(16, q) % model.config.vocab_size
            pos = torch.tensor(lengths)[:, None] + shared + torch.arange(q)
            got.append(fast.forward_slab(ids, pos, cache, cache.attention_mask(q), 0, True))
    finally:
        torch.set_num_threads(before)
    assert torch.equal(got[0].logits, got[1].logits)
    assert got[0].hidden_states is not None and got[1].hidden_states is not None
    assert torch.equal(got[0].hidden_states[-1], got[1].hidden_states[-1])


@needs_kernel
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shared,q,rows,arch", [(7, 1, 5, "llama"), (7, 3, 5, "llama"),
                                                (0, 1, 5, "llama"), (0, 2, 5, "llama"),
                                                (7, 1, 2, "llama"), (0, 1, 1, "llama"),
                                                (7, 3, 5, "qwen3")])
def test_scripted_pieces_compute_what_their_python_computes(shared, q, rows, threads, arch,
                                                            monkeypatch):
    """The layer's TorchScript pieces (every layer in one call, LAYERS,
    with the attention kernel) give the bits that the same
    functions give run as Python, logits, hidden states and cache columns: decoding and
    prefilling, over a shared prefix (in a KV pool) and without one, a lone row (a GEMM
    that runs it as two) and several."""
    model, _ = prepared(arch=arch)
    fast = lean.LeanLlama(model)
    assert scripted.SCRIPTED and fast.posts  # this torch compiles them; every linear packed
    lengths = [5 + 3 * i for i in range(rows)]
    ids = torch.arange(rows * q).view(rows, q) % model.config.vocab_size
    pos = torch.tensor(lengths)[:, None] + shared + torch.arange(q)
    got, calls = [], []
    layers = scripted.LAYERS
    monkeypatch.setattr(scripted, "LAYERS", lambda *a: calls.append(1) or layers(*a))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for pieces in ("scripted", "python"):
            if pieces == "python":
                for name, fn in (("POST", scripted.post), ("LAYERS", scripted.layers)):
                    monkeypatch.setattr(scripted, name, fn)
            cache = kernel_cache(model, lengths, shared, room=q)
            out = fast.forward_slab(ids, pos, cache, cache.attention_mask(q), 0, True)
            got.append((out, cache))
    finally:
        torch.set_num_threads(before)
    assert len(calls) == 1  # every layer in one call
    (a, ca), (b, cb) = got
    assert torch.equal(a.logits, b.logits)
    assert a.hidden_states is not None and b.hidden_states is not None
    assert torch.equal(a.hidden_states[-1], b.hidden_states[-1])
    assert ca.length == cb.length and torch.equal(written(ca), written(cb))


def test_pieces_that_torchscript_cannot_compile_run_as_python_with_a_warning(monkeypatch):
    """Where torch.jit.script fails (a torch without TorchScript), the pieces are the plain
    functions, and a warning says so, with the reason (the pieces compile once, at import)."""
    def refuse(fn):
        raise RuntimeError("no TorchScript here")

    monkeypatch.setattr(torch.jit, "script", refuse)
    with pytest.warns(RuntimeWarning,
                      match=r"RuntimeError: no TorchScript here\); they run as Python"):
        got = scripted.compiled([scripted.project, scripted.post])
    assert got == [scripted.project, scripted.post]


def test_a_pass_hands_its_cache_by_the_name_the_forward_takes():
    """transformers renamed the forwards' past_key_values to cache: a Pass gives its cache
    by whichever name its forward takes (the old name is deprecated where both are read)."""
    from search.runtime import passes
    from search.runtime.passes import Pass

    class Old:  # a forward from before the rename
        def forward(self, *, input_ids, past_key_values=None, **_):
            return "past_key_values", past_key_values

        __call__ = forward

    class New:
        def forward(self, *, input_ids, cache=None, **_):
            return "cache", cache

        __call__ = forward

    ids = torch.zeros(1, 1, dtype=torch.long)
    for kind, name in ((Old, "past_key_values"), (New, "cache")):
        assert Pass(kind(), ids, ids, "the slab", None, keep=None).alone() == (name, "the slab")
    assert passes.cache_arg(lean.LeanLlama) == "cache"  # (which takes the old name too)
