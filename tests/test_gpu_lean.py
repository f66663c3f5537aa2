"""The lean forward off the CPU's fp32 path (search/runtime/lean.py): bf16 and fp32, on each
device, against transformers' plain full-prefix forward of the same model; and Passes merged
into one forward against each run alone.

On the CPU the device path is run by turning the CPU attention kernel off (lean.kernel_serves:
what a CUDA forward takes: SDPA per Pass with a group's query heads stacked, a shared prefix
merged by log-sum-exp) and by not packing the linears (bf16, or pack=False). Tolerances, on the
logprobs of the engine's own tokens (teacher forcing: no near-tie can flip a comparison):
fp32 within 1e-4 of transformers in fp32; bf16 within 0.02 of transformers in bf16, and no
further than 2x (+0.005) transformers' own bf16 error from the fp32 forward: the lean forward
loses no more to bf16 than transformers does. (On this project's CPU, the tiny model: 2.4e-7
in fp32; 1.9e-3 from transformers in bf16, 2.4e-3 from fp32 against transformers' 2.1e-3.)
"""

from __future__ import annotations

import copy

import pytest
import torch
from devices import DEVICES, host

from search.engines.hf import HFEngine
from search.runtime import lean
from search.types import Problem

PROMPTS = ("12+34=56 and 7*8=", "9-8=", "1 2 3 4 5 6 7 8 9 a b")
TOL = {torch.float32: 1e-4, torch.bfloat16: 0.02}
CASES = [(d, t, f) for d in DEVICES for t in (torch.float32, torch.bfloat16)
         for f in ((True, False) if d == "cpu" else (False,))
         if not (d == "cpu" and t is torch.float32 and f)]  # (CPU fp32 kernel: test_lean.py)


def full_logprobs(model, ids: list[int], start: int) -> list[float]:
    """One plain forward over the whole path (no cache) -> logprob of ids[i], i >= start."""
    dev = next(model.parameters()).device
    with torch.no_grad():
        lp = model(torch.tensor([ids], device=dev)).logits[0].float().log_softmax(-1).cpu()
    return [lp[i - 1, ids[i]].item() for i in range(start, len(ids))]


def grow(eng: HFEngine) -> list:
    """Forced continuations of different lengths (prefill through the lean forward), then
    sampled and greedy rows over a shared prefix (cascade) and over paths of different
    lengths (left padding), two steps deep: every child made."""
    roots = [eng.root(Problem(prompt=p)) for p in PROMPTS]
    forced = eng.extend(roots, ["77", "9 9 9", "ab"])
    kids = [k for ks in eng.expand(forced[:1], 4, stop=None, max_tokens=6, temperature=0.9,
                                   seed=1) for k in ks]  # one prefix, four rows
    live = [k for k in kids if not k.finished] + forced[1:]
    kids += [k for ks in eng.expand(live, 1, stop=None, max_tokens=5, temperature=0)
             for k in ks]
    return forced + kids


@pytest.mark.parametrize("device,dtype,kernel", CASES,
                         ids=[f"{d}-{str(t)[6:]}-{'kernel' if f else 'sdpa'}" for d, t, f in CASES])
def test_engine_on_the_lean_forward_matches_a_full_prefix_forward(tiny_model, device, dtype,
                                                                 kernel, monkeypatch):
    model, tok = tiny_model
    if not kernel:
        monkeypatch.setattr(lean, "kernel_serves", lambda x: False)
    eng = HFEngine(copy.deepcopy(model), tok, chat=False, device=device, dtype=dtype,
                   pack=False, share_prefix=1)
    assert isinstance(eng.forward, lean.LeanLlama) and eng.forward_note is None
    assert eng.forward.merges == (device != "cpu")  # CPU: unpacked linears are not exact
    ref32 = copy.deepcopy(model)  # fp32 on the CPU: transformers' own forward
    ref = copy.deepcopy(model).to(device=device, dtype=dtype)
    worst = worst_hf = 0.0
    for kid in grow(eng):
        ids, start = kid.token_ids(), kid.parent.n_tokens
        mine = kid.step.logprobs
        want, exact = full_logprobs(ref, ids, start), full_logprobs(ref32, ids, start)
        assert max(abs(a - b) for a, b in zip(mine, want)) < TOL[dtype], kid.step
        worst = max(worst, *(abs(a - b) for a, b in zip(mine, exact)))
        worst_hf = max(worst_hf, *(abs(a - b) for a, b in zip(want, exact)))
    assert worst <= 2 * worst_hf + (0.005 if dtype is torch.bfloat16 else 1e-4), (worst, worst_hf)


def passes(eng: HFEngine) -> list:
    """Passes of every kind (test_concurrency's): decode rows of two trees, rows over a shared
    prefix, a lone row, a two-row prefill of five tokens each, from the engine's own caches."""
    from test_concurrency import _passes

    return _passes(eng)


@pytest.mark.parametrize("device,dtype,kernel", CASES,
                         ids=[f"{d}-{str(t)[6:]}-{'kernel' if f else 'sdpa'}" for d, t, f in CASES])
def test_merged_passes_equal_separate_ones(tiny_model, device, dtype, kernel, monkeypatch):
    """forward_many over Passes of four kinds gives each the logits, hidden states and cache
    columns it gets alone: within the dtype's rounding (the GEMMs see more rows), and bit for
    bit where every projection is packed (CPU fp32: test_concurrency.py)."""
    from test_concurrency import _clone

    model, tok = tiny_model
    if not kernel:
        monkeypatch.setattr(lean, "kernel_serves", lambda x: False)
    eng = HFEngine(copy.deepcopy(model), tok, chat=False, device=device, dtype=dtype,
                   pack=False, share_prefix=4)
    ps = passes(eng)
    alone, together = [_clone(p) for p in ps], [_clone(p) for p in ps]
    with torch.inference_mode():
        want = [p.alone() for p in alone]
        got = eng.forward.forward_many(together)
    rtol, atol = (0.0, 1e-5) if dtype is torch.float32 else (0.02, 0.05)
    for a, b, pa, pb in zip(got, want, together, alone):
        torch.testing.assert_close(host(a.logits).float(), host(b.logits).float(), rtol=rtol, atol=atol)
        if pa.hidden:
            torch.testing.assert_close(host(a.hidden_states[-1]).float(),
                                       host(b.hidden_states[-1]).float(), rtol=rtol, atol=atol)
        n = pa.cache.length
        assert n == pb.cache.length
        torch.testing.assert_close(host(pa.cache.buf[..., :n, :]).float(),
                                   host(pb.cache.buf[..., :n, :]).float(), rtol=rtol, atol=atol)


def test_a_model_it_cannot_run_falls_back_and_says_so(tiny_model):
    """A model the lean forward cannot run (here one not of the Llama family, on eager
    attention): transformers' forward on the model's own attention, a LeanFallback warning
    naming the reason, the reason kept as forward_note; lean=False is a choice, not a
    fallback."""
    model, tok = tiny_model
    other = copy.deepcopy(model)
    other.config.model_type = "gpt2"
    other.set_attn_implementation("eager")
    with pytest.warns(lean.LeanFallback, match="Llama-family"):
        eng = HFEngine(other, tok, chat=False, device="cpu")
    assert eng.forward is eng.model and "Llama-family" in (eng.forward_note or "")
    assert eng.model.config._attn_implementation == "eager"
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", lean.LeanFallback)
        off = HFEngine(copy.deepcopy(model), tok, chat=False, device="cpu", lean=False)
    assert off.forward is off.model and off.forward_note == "lean=False"
