"""The one stop rule (search/engines/hf/decode.py: StopRule) on hand-made cases, and plain and
speculative decoding against a plain full-prefix reference written here: the same tokens and
the same stop reasons, step by step, for rows of one batch stopping for different reasons."""

from __future__ import annotations

import copy

import pytest
import torch

from search.engines.hf import HFEngine, SpecConfig
from search.engines.hf.decode import StopRule
from search.runtime.kvtree import KVTree
from search.types import Problem

EOS = 99
# token id -> text: several characters per token, so a stop string can sit inside one token
# or straddle two
TEXT = {1: "a", 2: "b", 3: "x\n", 4: "\ny", 5: "q\n\nr", 6: "=", 7: "12", EOS: "</s>"}


def text_of(ids) -> str:
    return "".join(TEXT[i] for i in ids)


def rule(stop=("\n\n",), max_tokens=8, max_length=100, text=text_of) -> StopRule:
    return StopRule(frozenset({EOS}), tuple(stop), max_tokens, max_length, text)


def test_stop_rule_hand_cases():
    r = rule()
    assert r.span == 4  # the longest stop string's characters + 2 tokens
    assert r.reason([1], 10, 1) is None
    assert r.reason([1, 2, EOS], 10, 3) == "eos"
    assert r.reason([5], 10, 1) == "stop"  # the stop string inside one token
    assert r.reason([1, 3], 10, 2) is None  # "a" "x\n": half of it
    assert r.reason([1, 3, 4], 10, 3) == "stop"  # "x\n" "\ny": across two tokens
    assert r.reason([1] * 7 + [2], 10, 8) == "max_tokens"
    assert r.reason([1, 2], 98, 2) == "length"  # the path reaches max_length
    # one rule, one order: EOS, a stop string, the context, max_tokens
    assert r.reason([3, 4, EOS], 98, 8) == "eos"
    assert r.reason([3, 4], 98, 8) == "stop"
    assert r.reason([1, 2], 98, 8) == "length"
    # only the step's last `span` tokens are read: a stop string that ended earlier ended
    # the step then
    assert r.reason([5, 1, 1, 1, 1], 10, 5) is None
    assert rule(stop=("2=",)).reason([7, 6], 10, 2) == "stop"  # "12" "=" holds "2="
    assert rule(stop=("a", "=")).reason([2, 6], 10, 2) == "stop"  # any of the strings


def test_without_stop_strings_nothing_is_decoded():
    def refuse(ids):
        raise AssertionError("decoded without stop strings")

    r = rule(stop=(), text=refuse)
    assert r.span == 2
    assert r.reason([5, 3, 4], 10, 3) is None
    assert r.reason([5, EOS], 10, 2) == "eos"
    assert r.reason([5], 10, 8) == "max_tokens"


# -- the decoding loops against a full-prefix reference -------------------------------------
REFERENCE: dict[tuple, tuple[tuple[int, ...], str]] = {}  # the same rows for every kind


def reference_step(model, tok, ids, *, stop, max_tokens, max_length, eos):
    """Greedy, one full forward over the whole path per token (no cache), the stop rule as
    Engine.expand documents it, read on the whole step's text: -> (tokens, reason)."""
    key = (tuple(ids), stop, max_tokens, max_length, eos)
    if key not in REFERENCE:
        REFERENCE[key] = _reference_step(model, tok, ids, stop=stop, max_tokens=max_tokens,
                                         max_length=max_length, eos=eos)
    return REFERENCE[key]


def _reference_step(model, tok, ids, *, stop, max_tokens, max_length, eos):
    step: list[int] = []
    while True:
        with torch.no_grad():
            logits = model(torch.tensor([ids + step])).logits[0, -1]
        step.append(int(logits.argmax()))
        text = tok.decode(step, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if step[-1] in eos:
            return tuple(step), "eos"
        if any(s in text for s in stop or ()):
            return tuple(step), "stop"
        if len(ids) + len(step) >= max_length:
            return tuple(step), "length"
        if len(step) >= max_tokens:
            return tuple(step), "max_tokens"


PROMPTS = ("12+12+12+12+", "ab ab ab a", "7*8=56\n\n7*8=5", "9")
# per case: stop strings, the EOS ids (as characters), max_tokens, max_length
CASES = [(("5", "a b"), "=", 10, None), (None, "", 30, 48), (("\n\n", "+1"), "*", 12, 40)]
KINDS = {"plain": False,
         "chain": SpecConfig(first_draft=4, ngram=(4, 3, 2, 1), max_batch_tokens=256, tree=0),
         "tree": SpecConfig(ngram=(4, 3, 2, 1), max_batch_tokens=256, tree=12, min_prob=0.0)}


@pytest.mark.parametrize("kind", list(KINDS))
def test_plain_and_speculative_decoding_match_a_full_prefix_reference(tiny_model, kind, device):
    """Rows of different prompts and depths expanded together (3 steps deep, 2 samples a
    node at temperature 0): every child's tokens and stop reason equal the reference's."""
    model, tok = tiny_model
    seen: set[str] = set()
    for stop, eos_chars, max_tokens, max_length in CASES:
        eng = HFEngine(copy.deepcopy(model), tok, chat=False, device=device,
                       speculate=KINDS[kind], max_length=max_length)
        eng.eos_ids = eos = frozenset(tok.convert_tokens_to_ids(c) for c in eos_chars)
        frontier = [eng.root(Problem(prompt=p)) for p in PROMPTS]
        for _ in range(3):
            kids = eng.expand(frontier, 2, stop=stop, max_tokens=max_tokens, temperature=0)
            for node, pair in zip(frontier, kids):
                want = reference_step(model, tok, node.token_ids(), stop=stop, eos=eos,
                                      max_tokens=max_tokens, max_length=eng.max_length)
                for kid in pair:
                    assert kid.step is not None and (kid.step.token_ids, kid.step.stop_reason) == want, \
                        (kind, stop)
                    seen.add(want[1])
            frontier = [pair[0] for pair in kids if not pair[0].finished]
            if not frontier:
                break
        if KINDS[kind]:
            assert eng.spec_stats.accepted > 0  # the drafts were used, not bypassed
    assert seen == {"eos", "stop", "length", "max_tokens"}  # every reason was met


def test_both_loops_stop_through_the_one_rule(tiny_model, monkeypatch, device):
    """Plain and speculative decoding ask StopRule.reason about every token they keep."""
    model, tok = tiny_model
    asked: list[int] = []
    reason = StopRule.reason

    def spy(self, window, start, size):
        asked.append(size)
        return reason(self, window, start, size)

    monkeypatch.setattr(StopRule, "reason", spy)
    for speculate in (False, True):
        asked.clear()
        eng = HFEngine(copy.deepcopy(model), tok, chat=False, device=device, speculate=speculate)
        eng.eos_ids = frozenset()
        (kid,) = eng.expand([eng.root(Problem(prompt="12+12+12+"))], 1, stop=None,
                            max_tokens=9, temperature=0)[0]
        assert kid.step is not None and kid.step.stop_reason == "max_tokens"
        assert asked == list(range(1, 10))  # once per kept token, in order


def test_one_loop_mixes_passes_with_and_without_drafts(tiny_model, monkeypatch, device):
    """Speculation gives way while the batch is wide (max_batch_tokens) and drafts as rows
    retire: one expand runs one-token passes and draft passes, and every child still equals
    the full-prefix reference."""
    model, tok = tiny_model
    widths: list[int] = []
    pass_for = KVTree.pass_for

    def spy(self, ids, *args, **kwargs):
        widths.append(int(ids.shape[1]))
        return pass_for(self, ids, *args, **kwargs)

    monkeypatch.setattr(KVTree, "pass_for", spy)
    config = SpecConfig(ngram=(4, 3, 2, 1), max_batch_tokens=12, tree=4, min_prob=0.0)
    eng = HFEngine(copy.deepcopy(model), tok, chat=False, device=device, speculate=config)
    eng.eos_ids = eos = frozenset({tok.convert_tokens_to_ids("=")})
    roots = [eng.root(Problem(prompt=p)) for p in PROMPTS]
    eng.kv.ensure(roots, eng.session)
    widths.clear()
    kids = eng.expand(roots, 2, stop=("5",), max_tokens=16, temperature=0)
    assert 1 in widths and max(widths) > 1  # plain passes and verifications in one call
    for root, pair in zip(roots, kids):
        want = reference_step(model, tok, root.token_ids(), stop=("5",), eos=eos,
                              max_tokens=16, max_length=eng.max_length)
        assert [(k.step.token_ids, k.step.stop_reason) for k in pair] == [want, want]


def reference_samples(model, prompts, *, tokens, temperature, seed):
    """Sampling as the engine documents it, on full forwards of transformers' model: every
    row draws one uniform (float64) per token from one generator seeded `seed`, rows in
    order, and takes the token where u x total falls in the cumulative sums of
    softmax(logits / temperature)."""
    gen = torch.Generator().manual_seed(seed)
    rows = [list(p) for p in prompts]
    out: list[list[int]] = [[] for _ in rows]
    for _ in range(tokens):
        u = torch.rand(len(rows), 1, generator=gen, dtype=torch.float64)
        for b, ids in enumerate(rows):
            with torch.no_grad():
                logits = model(torch.tensor([ids + out[b]])).logits[0, -1].float()
            cdf = torch.softmax(logits / temperature, -1).double().cumsum(-1)
            out[b].append(int(torch.searchsorted(cdf, u[b:b + 1] * cdf[-1:], right=True)))
    return [tuple(t) for t in out]


@pytest.mark.parametrize("speculate", [False, SpecConfig(max_batch_tokens=0)],
                         ids=["plain", "spec-gives-way"])
def test_sampled_children_equal_a_full_prefix_reference_with_the_same_draws(
        tiny_model, speculate, device):
    """Sampled steps of rows of different prompts: the children's tokens are those of the
    reference drawing the same uniforms, with and without speculation (drafting that never
    fits the batch leaves every pass a plain one), and both give the same logprobs."""
    model, tok = tiny_model
    eng = HFEngine(copy.deepcopy(model), tok, chat=False, device=device, speculate=speculate)
    eng.eos_ids = frozenset()
    roots = [eng.root(Problem(prompt=p)) for p in PROMPTS]
    kids = [k for ks in eng.expand(roots, 2, stop=None, max_tokens=6, temperature=0.9, seed=5)
            for k in ks]
    want = reference_samples(model, [r.token_ids() for r in roots for _ in range(2)],
                             tokens=6, temperature=0.9, seed=5)
    assert [k.step.token_ids for k in kids] == want
    for kid in kids:  # the model's own logprobs of the drawn tokens
        ids = kid.token_ids()
        with torch.no_grad():
            lp = model(torch.tensor([ids])).logits[0].float().log_softmax(-1)
        start = kid.parent.n_tokens
        ref = [lp[j - 1, ids[j]].item() for j in range(start, len(ids))]
        assert max(abs(a - b) for a, b in zip(kid.step.logprobs, ref)) < 1e-4
