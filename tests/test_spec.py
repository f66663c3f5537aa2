"""Speculative decoding (search/engines/hf/spec.py) against plain decoding and the model itself.

Greedy: token-identical to the plain engine. Sampling: the sequences' frequencies fit the
model's exact distribution. Children's KV: equal to a full-prefix forward. Each with chain
drafts and with draft trees (search/engines/hf/drafter.py), whose builder and acceptance walks
are also checked by hand. The engines run on each device (tests/devices.py), each on its own
copy of the model; the references run on the CPU model.
"""

from __future__ import annotations

import copy
import itertools
import random
from typing import Any

import pytest
import torch
from devices import host
from helpers import cache_columns, tiny_llama
from scipy import stats as sps

from search.engines.hf import HFEngine, SpecConfig
from search.engines.hf.drafter import Drafter, DraftTree, greedy_path, sampled_path
from search.runtime.sampling import probs
from search.types import Problem

PROMPTS = ("12+12+12+12+12+12+", "ab ab ab ab ab ab a", "7*8=56\n\n7*8=5", "9")


@pytest.fixture(scope="module", params=["sdpa", "eager"])
def model_tok(request):
    """A tiny random Llama per attention kind: sdpa (the lean forward) reads the bool mask,
    eager (transformers' forward: engines() gives it lean=False) the bias."""
    model, tok = tiny_llama(seed=1)
    model.set_attn_implementation(request.param)
    return model, tok


def engines(model, tok, config: SpecConfig | bool = True, device: str = "cpu", **kw):
    """(plain, speculative) engines on `device`, each on its own copy of the model (an engine
    moves and packs its model in place; `model` stays the CPU reference). A model on eager
    attention runs transformers' forward (the lean one would take it as sdpa)."""
    kw.setdefault("lean", model.config._attn_implementation != "eager")
    return (HFEngine(copy.deepcopy(model), tok, chat=False, device=device, **kw),
            HFEngine(copy.deepcopy(model), tok, chat=False, device=device, speculate=config,
                     **kw))


def grow(engine, depth: int, n: int, **kw):
    """Breadth-first: expand every unfinished node of the frontier n times, depth times;
    every child's (tokens, stop reason, logprobs) in order."""
    frontier = [engine.root(Problem(prompt=p)) for p in PROMPTS]
    out = []
    for d in range(depth):
        kids = [k for ks in engine.expand(frontier, n, seed=d, **kw) for k in ks]
        out += [(k.step.token_ids, k.step.stop_reason, k.step.logprobs) for k in kids]
        frontier = [k for k in kids if not k.finished]
    return out


def step_ids(kids) -> list[tuple[int, ...]]:
    return [k.step.token_ids if k.step else () for k in kids]


def assert_same_steps(mine, ref):
    assert [(t, r) for t, r, _ in mine] == [(t, r) for t, r, _ in ref]
    assert max(abs(x - y) for (_, _, a), (_, _, b) in zip(mine, ref) for x, y in zip(a, b)) < 1e-4


# drafts from every source (n-grams down to bigrams, recycled top-k): chains of up to 8
# tokens, and trees of up to 12 nodes (no threshold: the random tiny models' guesses are poor)
CHAIN = SpecConfig(first_draft=4, ngram=(4, 3, 2, 1), recycle_k=8, max_batch_tokens=256,
                   tree=0)
TREE = SpecConfig(ngram=(4, 3, 2, 1), recycle_k=8, max_batch_tokens=256, tree=12, min_prob=0.0)


@pytest.mark.parametrize("config", [CHAIN, TREE], ids=["chain", "tree"])
def test_greedy_is_token_identical_to_plain(model_tok, config, device):
    """Several rows of different prompts and depths, stop strings, EOS and max_tokens:
    the same steps as plain decoding, fewer forwards, the same tokens charged."""
    model, tok = model_tok
    plain, spec = engines(model, tok, config, device)
    kw = dict(stop=("5", "a b"), max_tokens=10, temperature=0.0)
    # "=": a token some greedy paths emit mid-step (and others never)
    plain.eos_ids = spec.eos_ids = frozenset({tok.convert_tokens_to_ids("=")})
    ref = grow(plain, 3, 2, **kw)
    assert_same_steps(grow(spec, 3, 2, **kw), ref)
    assert {r for _, r, _ in ref} >= {"stop", "eos", "max_tokens"}
    s = spec.spec_stats
    assert 0 < s.accepted < s.drafted  # drafts hit and missed
    assert (s.rescued > 0) == bool(config.tree)  # trees: siblings of rejected guesses won
    assert s.emitted == spec.meter.generated_tokens == plain.meter.generated_tokens
    assert spec.meter.forward_passes < plain.meter.forward_passes
    assert spec.meter.prefill_tokens == plain.meter.prefill_tokens
    # without stop strings and EOS: long steps, rows of one node and of several, up to
    # the context length
    plain.eos_ids = spec.eos_ids = frozenset()
    plain.max_length = spec.max_length = 60
    kw = dict(stop=None, max_tokens=30, temperature=0.0)
    ref = grow(plain, 2, 3, **kw)
    assert_same_steps(grow(spec, 2, 3, **kw), ref)
    assert {r for _, r, _ in ref} == {"max_tokens", "length"}
    assert s.squeezes > 0  # rows accepted so differently that rejected columns were reclaimed


@pytest.mark.parametrize("tree", [0, 10], ids=["chain", "tree"])
def test_children_kv_and_features_equal_a_full_forward(model_tok, tree, device):
    """Sampled children (rows accepting different counts; with trees, paths through later
    siblings leave holes in the cache rows): each segment holds exactly the KV a plain
    forward over the whole path computes, logprobs and the logits of a further expansion
    match, and keep_hidden features are the hidden states of that forward."""
    model, tok = model_tok
    _, spec = engines(model, tok, SpecConfig(max_draft=6, first_draft=3, recycle_k=4,
                                             max_batch_tokens=512, tree=tree, min_prob=0.0),
                      device, keep_hidden=True)
    kids = []
    frontier = [spec.root(Problem(prompt=p)) for p in PROMPTS]
    for d in range(2):
        new = [k for ks in spec.expand(frontier, 3, stop=("5",), max_tokens=16,
                                       temperature=0.8, seed=d) for k in ks]
        kids += new
        frontier = [k for k in new if not k.finished]
    assert spec.spec_stats.accepted > 0
    assert (spec.spec_stats.rescued > 0) == bool(tree)
    live = [k for k in kids if not k.finished]
    spec.next_logprobs(live, [0])  # completes each child: feeds its last token after the segment
    for kid in kids:
        ids = kid.token_ids()
        with torch.no_grad():
            full = model(torch.tensor([ids]), use_cache=True, output_hidden_states=True)
        start, n = kid.parent.n_tokens, len(kid.step.token_ids)
        seg = spec.kv.get(kid)
        assert seg is not None
        assert torch.allclose(host(seg.columns), cache_columns(full.past_key_values, start, start + seg.n),
                              atol=1e-4)
        lp = full.logits[0].float().log_softmax(-1)
        ref_lps = [lp[j - 1, ids[j]].item() for j in range(start, start + n)]
        assert max(abs(a - b) for a, b in zip(kid.step.logprobs, ref_lps)) < 1e-4
        hid = full.hidden_states[-1][0]
        assert torch.allclose(host(spec.step_features[kid]), hid[len(ids) - 2], atol=1e-4)
        if not kid.finished:
            assert seg.n == n and seg.logits is not None
            assert torch.allclose(host(seg.logits).log_softmax(-1), lp[-1], atol=1e-4)


@pytest.mark.parametrize("tree", [0, 6], ids=["chain", "tree"])
@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.8)])
def test_sampled_sequences_follow_the_models_distribution(temperature, top_p, tree, device):
    """Over a two-letter vocabulary (6 tokens with the specials), the first three tokens of
    6000 sampled steps, speculative and plain, each against the exact distribution from
    full forwards: chi-square over the 216 sequences (cells expected < 5 pooled, cells
    outside the top-p nucleus never drawn). Trees of 6 nodes, 2 deep: up to 4 candidates
    at a node, so acceptances, rescues and residual draws after several rejections."""
    model, tok = tiny_llama("ab", seed=3)
    plain, spec = engines(model, tok, SpecConfig(max_draft=2, first_draft=2, recycle_k=4,
                                                 ngram=(3, 2, 1), max_batch_tokens=10**6,
                                                 tree=tree, min_prob=0.0), device)
    prompt = "abbabbabbab"
    V = len(tok)
    root_ids = plain.root(Problem(prompt=prompt)).prompt_ids
    seqs = list(itertools.product(range(V), repeat=3))
    with torch.no_grad():  # p(t1) p(t2 | t1) p(t3 | t1 t2) for every t1 t2 t3
        x = torch.tensor([[*root_ids, a, b] for a, b in itertools.product(range(V), repeat=2)])
        p = probs(model(x).logits[:, -3:].float(), temperature, top_p)  # [V*V, 3, V]
    exact = torch.tensor([float(p[a * V + b, 0, a] * p[a * V + b, 1, b] * p[a * V + b, 2, c])
                          for a, b, c in seqs])
    index = {s: i for i, s in enumerate(seqs)}
    for eng in (plain, spec):
        eng.eos_ids = frozenset()  # every step runs to max_tokens
        root = eng.root(Problem(prompt=prompt))
        counts = torch.zeros(len(seqs))
        for seed in range(6):
            for kid in eng.expand([root], 1000, stop=None, max_tokens=4,
                                  temperature=temperature, top_p=top_p, seed=seed)[0]:
                counts[index[step_ids([kid])[0][:3]]] += 1
        expected = exact * counts.sum() / exact.sum()
        assert counts[expected == 0].sum() == 0  # nothing outside the top-p nucleus
        small = (expected < 5) & (expected > 0)
        obs, exp = counts[expected >= 5], expected[expected >= 5]
        if small.any():
            obs = torch.cat([obs, counts[small].sum()[None]])
            exp = torch.cat([exp, expected[small].sum()[None]])
        assert sps.chisquare(obs.numpy(), exp.numpy()).pvalue > 1e-3, eng.spec
    s = spec.spec_stats
    assert 0 < s.accepted < s.drafted
    assert (s.rescued > 0) == bool(tree)


@pytest.mark.parametrize("tree", [0, 8], ids=["chain", "tree"])
def test_drafts_stop_when_the_batch_is_compute_bound(tiny_model, tree, device):
    """max_batch_tokens caps rows x (k + 1) per pass: 8 rows at a cap of 8 never draft,
    2 rows draft up to 3 tokens (tree nodes); the outputs stay plain decoding's."""
    model, tok = tiny_model
    config = SpecConfig(first_draft=4, max_batch_tokens=8, tree=tree, min_prob=0.0,
                        recycle_k=4 if tree else 0)
    plain, spec = engines(model, tok, config, device)
    kw: dict[str, Any] = dict(stop=None, max_tokens=20, temperature=0.0)
    root = plain.root(Problem(prompt="12+12+12+12+"))
    ref = plain.expand([root], 8, **kw)[0]
    sroot = spec.root(Problem(prompt="12+12+12+12+"))
    got = spec.expand([sroot], 8, **kw)[0]
    assert step_ids(got) == step_ids(ref)
    s = spec.spec_stats
    assert s.drafted == 0 and s.passes > 0 and s.widest == 8
    got = spec.expand([sroot], 2, **kw)[0]
    assert step_ids(got) == step_ids(ref[:2])
    assert s.drafted > 0 and s.widest == 8


def test_drafter_longest_suffix_then_recycled():
    d = Drafter(SpecConfig(ngram=(3, 2, 1)))
    d.add([], [1, 2, 3, 4, 1, 2, 5])
    # context ...1 2: both 3 and 5 followed "1 2"; the 3-gram "4 1 2" says 5
    assert d.draft([4, 1, 2], 3) == [5]  # nothing ever followed 5: the chain stops
    assert d.draft([1, 2, 3], 3) == [4, 1, 2]
    d.recycle([5], [[9, 8]])  # the model's top-2 after token 5
    assert d.draft([4, 1, 2], 2) == [5, 9]
    assert d.draft([7], 0) == []
    bad: dict[str, Any]
    for bad in ({"max_draft": 0}, {"first_draft": 9}, {"ngram": ()}, {"recycle_k": -1},
                {"tree": -1}, {"min_prob": 1.0}):
        with pytest.raises(ValueError):
            SpecConfig(**bad)


def hand_drafter() -> Drafter:
    """Counts over 1 2 3 1 2 4 2 3 (contexts of 2 and 1 tokens), the model's top-2 after 3
    recycled as (5, 1); Witten-Bell weight 1, recycled prior 0.5, 0.2 by rank."""
    d = Drafter(SpecConfig(ngram=(2, 1), recycle_k=2))
    d.wb, d.prior = 1.0, (0.5, 0.2)
    d.add([], [1, 2, 3, 1, 2, 4, 2, 3])
    d.recycle([3], [[5, 1]])
    return d


def assert_candidates(got, want):
    """(token, probability) pairs: tokens exactly, probabilities to pytest's default tolerance
    (pytest >= 9 refuses approx over nested tuples)."""
    assert [t for t, _ in got] == [t for t, _ in want]
    assert [p for _, p in got] == pytest.approx([p for _, p in want])


def test_tree_builder_best_first_by_path_probability():
    d = hand_drafter()
    # after "1 2": (1 2) saw 3 and 4 once each (N 2, T 2): 1/4 each, 2/4 passed on; (2) saw
    # 3 twice and 4 once (N 3, T 2): 3 gets 0.5 * 2/5, 4 gets 0.5 * 1/5
    assert_candidates(d.candidates([1, 2]), [(3, 0.45), (4, 0.35)])
    # after "2 3": 1 (1/2 + 1/2 * 1/2 from the counts, 1/4 * 0.2 recycled), 5 (1/4 * 0.5)
    assert_candidates(d.candidates([2, 3]), [(1, 0.8), (5, 0.125)])
    t = d.tree([1, 2], budget=4, depth=2, min_prob=0.1)
    # best first: 3 (.45), then 3's child 1 (.45 * .8 = .36) before the root's second
    # child 4 (.35), then 4's child 2 (.35 * .75); 5 under 3 (.45 * .125) is below 0.1
    assert (t.tokens, t.parents, t.depth) == ([3, 1, 4, 2], [0, 1, 0, 3], [1, 2, 1, 2])
    assert t.prob == pytest.approx([0.45, 0.36, 0.35, 0.2625])
    assert t.children() == [[1, 3], [2], [], [4], []]
    t = d.tree([1, 2], budget=9, depth=2, min_prob=0.05)  # 5 now passes; nothing else left
    assert (t.tokens, t.parents) == ([3, 1, 4, 2, 5], [0, 1, 0, 3, 1])
    t = d.tree([1, 2], budget=9, depth=1)  # one level: the root's candidates
    assert (t.tokens, t.parents) == ([3, 4], [0, 0])
    assert d.tree([1, 2], budget=2, depth=8).tokens == [3, 1]
    assert d.tree([7], budget=4, depth=4).tokens == []  # nothing known after 7
    assert DraftTree.chain([5, 6]).parents == [0, 1]


def test_acceptance_walks():
    t = hand_drafter().tree([1, 2], budget=4, depth=2, min_prob=0.1)  # 3 -> 1, 4 -> 2
    # greedy, from the argmax after each column: 4 at the root rescues the rejected 3
    logits = torch.zeros(5, 10)
    logits[torch.arange(5), torch.tensor([4, 9, 9, 2, 7])] = 1.0
    assert greedy_path(t, logits.argmax(-1).tolist()) == [0, 3, 4]  # emits 4 2, then 7
    assert greedy_path(t, [3, 1, 6, 0, 0]) == [0, 1, 2]
    assert greedy_path(t, [5, 1, 6, 0, 0]) == [0]
    # sampled: 3 rejected (u 0.6 >= p 0.5); 4 accepted with p(4) / (1 - p(3)) = 0.5 > u 0.4;
    # 2 under 4 rejected (u 0.5 >= 0.1)
    px, u = [0.5, 0.9, 0.25, 0.1], [0.6, 0.0, 0.4, 0.5]
    assert sampled_path(t, px, u) == [0, 3]
    assert sampled_path(t, px, [0.1, 0.95, 0.4, 0.5]) == [0, 1]  # 1 under 3: 0.95 >= 0.9
    assert sampled_path(t, px, [0.1, 0.5, 0.4, 0.5]) == [0, 1, 2]


def test_multi_candidate_acceptance_is_lossless():
    """Children 1, 2 of the root then the residual: the next token is p's, over 40000
    draws (each frequency within 4.5 standard errors)."""
    p = [0.1, 0.5, 0.3, 0.1]
    t = DraftTree([1, 2], [0, 0], [1, 1], [1.0, 1.0])
    rng, counts, n = random.Random(0), [0] * 4, 40000
    for _ in range(n):
        path = sampled_path(t, [p[1], p[2]], [rng.random(), rng.random()])
        token = t.tokens[path[-1] - 1] if len(path) > 1 else rng.choices([0, 3], [p[0], p[3]])[0]
        counts[token] += 1
    for c, x in zip(counts, p):
        assert abs(c / n - x) < 4.5 * (x * (1 - x) / n) ** 0.5
