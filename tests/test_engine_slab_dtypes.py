"""The in-place KV path (kv.SlabCache) and bf16 weights, against plain references.

References: a plain full-prefix forward (no cache) for tokens and logprobs; the
DynamicCache path the slab replaced (same seed, same samples); an fp32 engine for bf16.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch.overrides import TorchFunctionMode

from search.engines.hf import HFEngine
from search.runtime import kv as kvmod
from search.runtime.dtypes import weight_dtype as _dtype
from search.runtime.passes import cache_arg
from search.types import Node, Problem, Step

PROMPTS = ("1+2=", "123*45-6789=", "7 7", "90-1=a b 5")


def plain_greedy(model, ids: list[int], new: int) -> tuple[list[int], list[float]]:
    """Greedy tokens and their logprobs, one full forward over the whole prefix per token."""
    ids = list(ids)
    toks, lps = [], []
    with torch.no_grad():
        for _ in range(new):
            lp = model(torch.tensor([ids])).logits[0, -1].float().log_softmax(-1)
            t = int(lp.argmax())
            toks.append(t)
            lps.append(lp[t].item())
            ids.append(t)
    return toks, lps


def full_logprobs(model, ids: list[int], start: int) -> list[float]:
    with torch.no_grad():
        lp = model(torch.tensor([ids])).logits[0].float().log_softmax(-1)
    return [lp[i - 1, ids[i]].item() for i in range(start, len(ids))]


def step(node: Node) -> Step:
    assert node.step is not None
    return node.step


def tree_nodes(eng):
    """Nodes of different prompt lengths and depths (one with a two-step path)."""
    roots = [eng.root(Problem(prompt=p)) for p in PROMPTS]
    (a1,) = eng.extend([roots[0]], ["77"])
    ((a2,),) = eng.expand([a1], 1, stop=None, max_tokens=6, temperature=0)
    (b1,) = eng.extend([roots[1]], ["9 9 ab"])
    return [roots[0], a2, b1, roots[2], roots[3]]


def test_inplace_greedy_multistep_multirow_matches_full_forward(tiny_engine, tiny_model):
    """Rows of different lengths decoded together for several steps, rows stopping at
    different tokens (stop string), each token and logprob equal to plain forwards."""
    model, _ = tiny_model
    eng = tiny_engine
    eng.eos_ids = frozenset()
    frontier = tree_nodes(eng)
    stops = set()
    for _ in range(3):
        kids = [k for (k,) in eng.expand(frontier, 1, stop=("5",), max_tokens=9, temperature=0)]
        for node, kid in zip(frontier, kids):
            want, lps = plain_greedy(model, node.token_ids(), len(kid.step.token_ids))
            assert list(kid.step.token_ids) == want
            assert max(abs(x - y) for x, y in zip(kid.step.logprobs, lps)) < 1e-4
            stops.add(len(kid.step.token_ids))
        frontier = kids
    assert len(stops) > 1  # rows left the batch at different tokens (compaction ran)


def test_tree_attention_samples_what_the_copied_paths_sample(tiny_model):
    """Same seed: rows reading their paths' segments where they live (tree attention,
    share_prefix=4: the steps too) and rows with their paths copied in (share_prefix=0)
    sample the same tokens, and every logprob matches a full forward."""
    model, tok = tiny_model
    engines = [HFEngine(copy.deepcopy(model), tok, chat=False, device="cpu", share_prefix=n)
               for n in (4, 0)]
    runs = []
    for eng in engines:
        eng.eos_ids = frozenset()  # every child stays expandable
        nodes = tree_nodes(eng)
        kids = eng.expand(nodes, 3, stop=("5", "a"), max_tokens=10, seed=7)
        grand = eng.expand([k for ks in kids for k in ks][:6], 2, stop=None, max_tokens=5,
                           seed=8)
        runs.append([(k.token_ids(), step(k).logprobs) for ks in kids + grand for k in ks])
    (new, old) = runs
    assert [ids for ids, _ in new] == [ids for ids, _ in old]
    for ids, lps in new:
        ref = full_logprobs(model, list(ids), len(ids) - len(lps))
        assert max(abs(x - y) for x, y in zip(lps, ref)) < 1e-4


class BigCats(TorchFunctionMode):
    """Records the sizes of concatenations as large as `limit` elements."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit, self.seen = limit, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in (torch.cat, torch.concat, torch.concatenate) and out.numel() >= self.limit:
            self.seen.append(tuple(out.shape))
        return out


def decode_calls(eng, nodes, max_tokens):
    """(cache, buffer address, length, big cats) for every one-token forward of an expand."""
    calls = []
    layout = kvmod.KVLayout.of(eng.model, eng.device)
    # one layer's K for one row over the shortest cached path: any concatenation of the
    # cache is at least this big, while the model's own small cats (rotary) are far smaller
    limit = layout.kv_heads * layout.head_dim * min(n.n_tokens for n in nodes)
    spy = BigCats(limit)

    forward = eng.forward  # the model, or the lean forward standing in for it

    def hooked(**kwargs):
        if kwargs["input_ids"].shape[1] == 1:
            cache = kwargs["past_key_values"]
            buf = getattr(cache, "buf", None)
            calls.append((cache, None if buf is None else buf.data_ptr(), cache.length,
                          len(spy.seen)))
        return forward(**kwargs)

    eng.kv.forward = hooked
    try:
        with spy:
            eng.expand(nodes, 2, stop=None, max_tokens=max_tokens, seed=1)
    finally:
        eng.kv.forward = forward
    return calls, spy.seen


def test_decode_writes_in_place_without_concatenating_the_cache(tiny_model):
    model, tok = tiny_model
    eng = HFEngine(copy.deepcopy(model), tok, chat=False, device="cpu")
    eng.eos_ids = frozenset()
    nodes = [eng.root(Problem(prompt="12345678+" * 3)), eng.root(Problem(prompt="9-8=" * 5))]
    eng.kv.ensure(nodes, eng.session)
    calls, cats = decode_calls(eng, nodes, max_tokens=12)
    assert len(calls) == 11  # 12 sampled tokens, the last one never fed
    assert all(isinstance(c[0], kvmod.SlabCache) and c[0] is calls[0][0] for c in calls)
    assert len({c[1] for c in calls}) == 1  # one buffer, never reallocated
    assert [c[2] for c in calls] == [calls[0][2] + j for j in range(11)]
    assert cats == []
    # the detector works: a cache concatenated at every token and layer (as transformers'
    # DynamicCache grows) is seen each time
    layout = kvmod.KVLayout.of(eng.model, eng.device)
    spy = BigCats(layout.kv_heads * layout.head_dim * 2)
    with spy:
        k = torch.zeros(1, layout.kv_heads, 2, layout.head_dim)
        for _ in range(11 * model.config.num_hidden_layers):
            k = torch.cat([k, torch.zeros(1, layout.kv_heads, 1, layout.head_dim)], dim=2)
    assert len(spy.seen) == 11 * model.config.num_hidden_layers


def test_multi_token_forward_and_rewind_match_single_steps(tiny_engine, tiny_model):
    """Several tokens per row in one forward (how drafts get verified) equal the same
    tokens fed one per forward, through the engine's forward over its batch cache (the
    rows' paths read where they live); rewinding drops them exactly. The reference: a plain
    full forward of each whole sequence."""
    model, _ = tiny_model
    eng = tiny_engine
    nodes = tree_nodes(eng)[:3]
    eng.kv.ensure(nodes, eng.session)
    paths = [eng.kv.path_parts(n) for n in nodes]
    drafts = torch.tensor([[5, 6, 7], [8, 9, 10], [11, 5, 6]])
    pos = torch.tensor([n.n_tokens for n in nodes])[:, None]

    def forward(cache, ids, at):
        with torch.no_grad():
            out = eng.forward(input_ids=ids, attention_mask=cache.attention_mask(ids.shape[1]),
                        position_ids=pos + at + torch.arange(ids.shape[1]),
                        use_cache=True, **{cache_arg(type(eng.forward)): cache})
        return out.logits.float()

    slab = eng.kv.batch(paths, 6)
    P = slab.length
    together = forward(slab, drafts, 0)
    one_by_one = eng.kv.batch(paths, 6)
    single = torch.cat([forward(one_by_one, drafts[:, i:i + 1], i) for i in range(3)], dim=1)
    assert torch.allclose(together, single, atol=1e-4)
    for node, row, ids in zip(nodes, together, drafts.tolist()):
        with torch.no_grad():
            ref = model(torch.tensor([node.token_ids() + ids])).logits[0, -3:].float()
        assert torch.allclose(row, ref, atol=1e-4)
    slab.rewind(P + 1)  # keep the first draft token, drop two
    again = forward(slab, drafts[:, 1:], 1)
    assert torch.allclose(again, together[:, 1:], atol=1e-4)
    with pytest.raises(ValueError, match="rewind"):
        slab.rewind(P - 1)


def test_full_slab_raises_instead_of_growing(tiny_engine, tiny_model):
    model, _ = tiny_model
    eng = tiny_engine
    root = eng.root(Problem(prompt="1+1="))
    eng.kv.ensure([root], eng.session)
    slab = eng.kv.batch([eng.kv.path_parts(root)], 2)
    ids = torch.tensor([[5, 6, 7]])
    with pytest.raises(RuntimeError, match="cannot take"), torch.no_grad():
        model(input_ids=ids, attention_mask=slab.attention_mask(3),
              position_ids=torch.arange(3)[None] + root.n_tokens, use_cache=True,
              **{cache_arg(type(model)): slab})


def test_dtype_names():
    assert _dtype("bf16") is torch.bfloat16 and _dtype("float32") is torch.float32
    assert _dtype(None) is None and _dtype(torch.float16) is torch.float16
    for bad in ("int8", "nonsense", "long"):
        with pytest.raises(ValueError, match="dtype"):
            _dtype(bad)


def greedy_agreement(ref: HFEngine, other: HFEngine, problems, max_tokens: int) -> float:
    """Share of token positions where `other`'s free-running greedy output equals `ref`'s
    (positions past the shorter output count as different)."""
    a = ref.expand([ref.root(p) for p in problems], 1, stop=None, max_tokens=max_tokens,
                   temperature=0)
    b = other.expand([other.root(p) for p in problems], 1, stop=None, max_tokens=max_tokens,
                     temperature=0)
    same = total = 0
    for (x,), (y,) in zip(a, b):
        s, t = step(x).token_ids, step(y).token_ids
        total += max(len(s), len(t))
        same += sum(u == v for u, v in zip(s, t))
    return same / total


def test_bf16_greedy_agrees_with_fp32_on_the_tiny_reasoner():
    from problems import arith

    try:
        fp32 = HFEngine.load("tiny-arith", device="cpu")
        bf16 = HFEngine.load("tiny-arith", device="cpu", dtype="bf16")
    except FileNotFoundError as err:
        pytest.skip(str(err))
    assert next(bf16.model.parameters()).dtype is torch.bfloat16
    assert bf16.kv.layout.dtype is torch.bfloat16
    problems = arith.generate(8, seed=3, difficulty=3)
    share = greedy_agreement(fp32, bf16, problems, max_tokens=60)
    print(f"bf16 greedy agreement with fp32 (tiny-arith, 8 prompts): {share:.3f}")
    assert share >= 0.95


def test_int8_engine_matches_its_own_full_forward_and_keeps_fp32_flops(tiny_model):
    """dtype="int8": linears (all but INT8_SKIP) become dynamically quantised; the KV-sharing
    engine's greedy tokens equal argmax of a plain full-prefix forward of that same quantised
    model, and FLOPs are still counted from the fp32 parameter count."""
    from helpers import tiny_llama

    from search.runtime.dtypes import INT8_SKIP
    from search.runtime.packed import PackedLinear

    model, tok = tiny_llama(seed=1)
    n_fp32 = sum(p.numel() for p in model.parameters())
    eng = HFEngine(model, tok, chat=False, device="cpu", dtype="int8")
    fp32_linear = {name: isinstance(mod, (torch.nn.Linear, PackedLinear))  # left in fp32
                   for name, mod in eng.model.named_modules()
                   if name.endswith(("_proj", "lm_head"))}
    assert fp32_linear and all(kept == name.endswith(INT8_SKIP)
                               for name, kept in fp32_linear.items()), fp32_linear
    assert not all(fp32_linear.values())
    assert eng.n_params == n_fp32
    root = eng.root(Problem(prompt="12+3="))
    (kid,) = eng.expand([root], 1, stop=None, max_tokens=6, temperature=0.0)[0]
    (grand,) = eng.expand([kid], 1, stop=None, max_tokens=4, temperature=0.0)[0]
    ids = grand.token_ids()
    with torch.no_grad():
        logits = eng.model(torch.tensor([ids])).logits[0]
    new = len(ids) - len(root.prompt_ids)
    assert logits[-new - 1:-1].argmax(-1).tolist() == ids[-new:]
    with pytest.raises(ValueError, match="CPU"):
        HFEngine(tiny_llama(seed=1)[0], tok, chat=False, device="meta", dtype="int8")


def test_transformers_views_made_after_rows_left_read_the_kept_rows(tiny_model):
    """A slab's per-layer views (what transformers' own forward writes through) are made on
    its first use: made after `keep` dropped a row, they hold the kept rows, and a token
    fed through them gets the logits of a plain full-prefix forward."""
    model, _ = tiny_model
    rows = [[5, 9, 3, 7, 2], [4, 4, 8], [6, 1, 2, 9]]
    paths = []
    with torch.no_grad():
        for ids in rows:  # each row's KV [L, 2, KV, n, D], from a plain cached forward
            cache = model(torch.tensor([ids]), use_cache=True).past_key_values
            paths.append([torch.stack([torch.stack([la.keys[0], la.values[0]])
                                       for la in cache.layers])])
    layout = kvmod.KVLayout.of(model, torch.device("cpu"))
    slab = kvmod.SlabCache.from_paths(paths, 2, layout)
    assert slab._views is None  # nothing made yet
    order = slab.keep([0, 2])
    kept = [rows[b] for b in order]
    nxt = [[3], [7]]
    pos = torch.tensor([[len(r)] for r in kept])
    with torch.no_grad():
        out = model(torch.tensor(nxt), attention_mask=slab.attention_mask(1), position_ids=pos,
                    use_cache=True, **{cache_arg(type(model)): slab}).logits[:, -1]
        for b, r in enumerate(kept):
            want = model(torch.tensor([r + nxt[b]])).logits[0, -1]
            torch.testing.assert_close(out[b], want, atol=1e-4, rtol=1e-4)
    assert slab.length == 6 and all(la.n == 6 for la in slab.layers)
