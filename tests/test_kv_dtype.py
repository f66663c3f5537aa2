"""A KV cache in float16 beside fp32 weights (HFConfig.kv_dtype): the kernel reads fp16 keys
and values exactly as their fp32 widening, the write rounds as torch does, the engine's
layer-0 KV is the fp32 engine's rounded, its tokens' logprobs stay within fp16's rounding of
a plain forward, merged searches give what each gives alone, and what cannot read fp16 KV
is refused."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import dump
from kernel_mark import needs_kernel
from test_kernel import (
    assert_alone_as_together,
    call,
    in_blocks,
    setup,
    with_columns,
    write_setup,
    written,
)

import search
from search.engines.hf import HFConfig, HFEngine
from search.types import Problem

PROMPTS = ("1+2=", "123*45-6789=", "7 7")


def halved(passes):
    """The Passes with their slabs and parts rounded to float16."""
    return [dict(p, slab=p["slab"].half(), parts=[(kv.half(), who) for kv, who in p["parts"]])
            for p in passes]


def widened(passes):
    return [dict(p, slab=p["slab"].float(), parts=[(kv.float(), who) for kv, who in p["parts"]])
            for p in passes]


@needs_kernel
@pytest.mark.parametrize("H,KV,d", [(4, 4, 32), (6, 2, 32), (9, 3, 12), (2, 1, 5), (10, 2, 40),
                                    (8, 1, 20)])
def test_fp16_keys_and_values_read_as_their_fp32_widening_bit_for_bit(H, KV, d):
    """Every path of the kernel (8-wide blocks, the scalar tails of d) on fp16 pool blocks
    gives the bits of the same values stored as fp32."""
    qk, passes = setup(seed=3, H=H, KV=KV, d=d)
    half = halved(passes)
    assert torch.equal(call(qk, H, KV, 0.17, half), call(qk, H, KV, 0.17, widened(half)))


@needs_kernel
def test_an_fp16_tokens_bits_do_not_depend_on_the_other_passes_in_its_call():
    qk, passes = setup(seed=4)
    assert_alone_as_together(qk, halved(passes))


@needs_kernel
def test_pool_chunks_of_mixed_dtypes_are_refused():
    qk, passes = setup(seed=5)
    chunks, rows, owns = in_blocks(passes)
    mixed = [chunks[0], chunks[0].half()]
    with pytest.raises(RuntimeError, match="pool chunks must be"):
        torch.ops.tts.attend(qk, 4, 4, 0.17, 1, [p["B"] for p in passes],
                             [p["q"] for p in passes], [p["n"] for p in passes],
                             [p["mask"] for p in passes], mixed, rows, owns)


@needs_kernel
def test_write_rounds_into_fp16_blocks_as_torch_does_and_writes_nothing_else():
    k, v, rows, q, n, pool, owns, before = write_setup(dtype=torch.float16)
    want = with_columns(pool[0], owns, written(k, v, rows, q, n, before, torch.Tensor.half))
    torch.ops.tts.write(k, v, 1, rows, q, n, pool, owns)
    assert torch.equal(pool[0], want)


def test_kv_dtype_names_and_the_pairs_refused():
    assert HFConfig(kv_dtype="fp16").kv_dtype == "fp16"
    assert HFConfig(kv_dtype="float32").kv_dtype == "float32"  # the weights' own: no change
    for bad, match in [("bfloat16", "float16 beside fp32"), ("int8", "floating torch dtype"),
                       ("nonsense", "floating torch dtype")]:
        with pytest.raises(ValueError, match=match):
            HFConfig(kv_dtype=bad)
    with pytest.raises(ValueError, match="float16 beside fp32"):
        HFConfig(kv_dtype="float16", dtype="bfloat16")


def test_an_engine_that_cannot_read_fp16_kv_refuses_it(tiny_model):
    model, tok = tiny_model
    with pytest.raises(ValueError, match="lean=False"):
        HFEngine(copy.deepcopy(model), tok, chat=False, device="cpu", kv_dtype="float16",
                 lean=False)
    # weights loaded in bf16 (the config's dtype left to the model): not fp32 beside fp16
    bf16 = copy.deepcopy(model).to(torch.bfloat16)
    with pytest.raises(ValueError, match="beside fp32 weights"):
        HFEngine(bf16, tok, chat=False, device="cpu", kv_dtype="float16")
    same = HFEngine(copy.deepcopy(model), tok, chat=False, device="cpu", kv_dtype="float32")
    assert same.kv.layout.dtype is torch.float32  # the weights' own: nothing changes


def plain_logprobs(model, ids: list[int], start: int) -> list[float]:
    with torch.no_grad():
        lp = model(torch.tensor([ids])).logits[0].float().log_softmax(-1)
    return [lp[i - 1, ids[i]].item() for i in range(start, len(ids))]


@needs_kernel
def test_fp16_kv_engine_against_the_fp32_engine_and_a_plain_forward(tiny_model):
    model, tok = tiny_model
    fp32 = HFEngine(copy.deepcopy(model), tok, chat=False, device="cpu")
    fp16 = HFEngine(copy.deepcopy(model), tok, chat=False, device="cpu", kv_dtype="float16")
    assert fp16.kv.layout.dtype is torch.float16 and fp32.kv.layout.dtype is torch.float32
    assert 2 * fp16.kv.column_bytes == fp32.kv.column_bytes
    runs = {}
    for name, eng in (("fp32", fp32), ("fp16", fp16)):
        eng.eos_ids = frozenset()
        roots = [eng.root(Problem(prompt=p)) for p in PROMPTS]
        kids = [k for ks in eng.expand(roots, 2, stop=None, max_tokens=8, temperature=1.0,
                                       seed=5) for k in ks]
        runs[name] = roots, kids
    (roots32, _), (roots16, kids16) = runs["fp32"], runs["fp16"]
    for r32, r16 in zip(roots32, roots16):  # layer 0 reads no attention: the fp32 KV, rounded
        kv32, kv16 = fp32.kv.get(r32), fp16.kv.get(r16)
        assert kv32 is not None and kv16 is not None and kv16.columns.dtype is torch.float16
        assert torch.equal(kv16.columns[0], kv32.columns[0].half())
    diffs = []
    for kid in kids16:
        ids, n = kid.token_ids(), len(kid.step.token_ids)
        plain = plain_logprobs(model, ids, len(ids) - n)
        diffs += [abs(a - b) for a, b in zip(kid.step.logprobs, plain)]
    assert max(diffs) < 2e-2  # within fp16's rounding of the keys and values
    assert max(diffs) > 0  # (and the KV was rounded: not the fp32 path)


@needs_kernel
def test_fp16_kv_searches_merged_give_what_each_gives_alone(tiny_model):
    model, tok = tiny_model
    eng = HFEngine(copy.deepcopy(model), tok, chat=False, device="cpu", kv_dtype="float16")
    probs = [Problem(prompt=p) for p in PROMPTS]
    budget = search.Budget(tokens=60)
    alone = [dump(search.solve(p, "beam", budget, engine=eng, seed=s, n=4, m=2,
                               step_tokens=6)) for p in probs for s in (0, 1)]
    many = search.solve_many(probs, "beam", budget, engine=eng, seeds=(0, 1), concurrency=6,
                             n=4, m=2, step_tokens=6)
    assert [dump(r) for r in many] == alone
