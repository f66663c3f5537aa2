"""oneDNN-packed linear layers (search.runtime.packed) against plain nn.Linear / F.linear."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from helpers import tiny_llama

from search.engines.hf import HFEngine
from search.runtime import packed
from search.types import Problem

pytestmark = pytest.mark.skipif(not packed.supported(), reason="no oneDNN packed linear here")


@pytest.mark.parametrize("shape", [(576, 1536), (1536, 576), (64, 20), (7, 3)])
@pytest.mark.parametrize("bias", [False, True])
def test_packed_equals_linear(shape, bias):
    gen = torch.Generator().manual_seed(0)
    n_in, n_out = shape
    layer = torch.nn.Linear(n_in, n_out, bias=bias)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(n_out, n_in, generator=gen) / n_in ** 0.5)
    fast = packed.PackedLinear(layer)
    for lead in [(1,), (5,), (2, 3), (4, 1, 2)]:  # any leading shape, like nn.Linear
        x = torch.randn(*lead, n_in, generator=gen)
        with torch.no_grad():
            got, want = fast(x), F.linear(x, layer.weight, layer.bias)
        assert got.shape == want.shape == (*lead, n_out)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    x = torch.randn(6, 2 * n_in, generator=gen)[:, ::2]  # a strided view, not contiguous
    with torch.no_grad():
        torch.testing.assert_close(fast(x), F.linear(x, layer.weight, layer.bias),
                                   rtol=1e-5, atol=1e-5)


def test_rows_do_not_depend_on_how_many_share_the_call():
    """Each row comes out bit-identical whatever the number of rows (1 to 64): the property
    that makes a verification pass's linears compute what one-token decoding computes."""
    gen = torch.Generator().manual_seed(1)
    layer = torch.nn.Linear(576, 1536)
    fast = packed.PackedLinear(layer)
    x = torch.randn(64, 576, generator=gen)
    with torch.no_grad():
        alone = torch.cat([fast(x[i:i + 1]) for i in range(64)])
        for m in (2, 3, 8, 16, 33, 64):
            assert torch.equal(fast(x[:m]), alone[:m]), m


@pytest.mark.parametrize("shape,bias", [((1536, 64), False), ((2048, 16), False),
                                        ((576, 1728), True)])
def test_a_lone_row_equals_the_same_row_among_others(shape, bias):
    """oneDNN computes a single row by another kernel for some weights (more than 1,024 input
    features; a bias at some shapes), its sums ~1e-6 apart: packed_linear runs a lone row as
    two there, so no row depends on how many rows share the call (what lets the engine merge
    searches' forwards), with the residual post-op too."""
    gen = torch.Generator().manual_seed(3)
    layer = torch.nn.Linear(*shape, bias=bias)
    fast = packed.PackedLinear(layer)
    x = torch.randn(5, shape[0], generator=gen)
    res = torch.randn(5, shape[1], generator=gen)
    with torch.no_grad():
        many = fast(x)
        many_res = packed.packed_linear(x, fast.packed, fast.bias, shape[0], res)
        for i in range(5):
            assert torch.equal(fast(x[i:i + 1]), many[i:i + 1])
            assert torch.equal(packed.packed_linear(x[i:i + 1], fast.packed, fast.bias, shape[0],
                                                    res[i:i + 1]), many_res[i:i + 1])


def test_pack_keeps_parameters_and_unpack_restores():
    model, _ = tiny_llama(seed=2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ids = torch.tensor([[3, 4, 5, 6, 7]])
    with torch.no_grad():
        ref = model(ids).logits
        n = packed.pack_linears(model)
        assert n == 2 * 7 + 1 and packed.is_packed(model)  # 7 per layer + lm_head
        torch.testing.assert_close(model(ids).logits, ref, rtol=1e-5, atol=1e-5)
        assert model.state_dict().keys() == before.keys()  # save_pretrained sees the same model
        assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())
        assert packed.pack_linears(model) == 0  # already packed: nothing left to pack
        assert packed.unpack_linears(model) == n and not packed.is_packed(model)
        assert torch.equal(model(ids).logits, ref)  # the very same nn.Linear computation


def test_engine_packs_by_default_and_matches_the_unpacked_engine():
    model, tok = tiny_llama(seed=1)
    fast = HFEngine(copy.deepcopy(model), tok, chat=False, device="cpu")
    slow = HFEngine(model, tok, chat=False, device="cpu", pack=False)
    assert fast.packed and not slow.packed and not packed.is_packed(model)
    problem = Problem(prompt="12+34=")
    for temperature in (0.0, 1.0):
        a, b = (e.expand([e.root(problem)], 4, stop=None, max_tokens=12,
                         temperature=temperature, seed=5)[0] for e in (fast, slow))
        steps = [(x.step, y.step) for x, y in zip(a, b) if x.step and y.step]
        assert len(steps) == 4
        for x, y in steps:
            assert x.token_ids == y.token_ids
            assert max(abs(p - q) for p, q in zip(x.logprobs, y.logprobs)) < 1e-4


def test_pack_true_where_it_cannot_run_is_an_error():
    model, tok = tiny_llama(seed=1)
    with pytest.raises(ValueError, match="pack=True"):
        HFEngine(model, tok, chat=False, device="cpu", dtype=torch.bfloat16, pack=True)
    model, tok = tiny_llama(seed=1)
    bf16 = HFEngine(model, tok, chat=False, device="cpu", dtype=torch.bfloat16)
    assert not bf16.packed  # fp32 only: bf16 linears stay as they are


def test_int8_packs_the_linears_it_leaves_in_fp32():
    model, tok = tiny_llama(seed=1)
    eng = HFEngine(model, tok, chat=False, device="cpu", dtype="int8")
    kinds = {name.rsplit(".", 1)[-1]: type(mod).__name__ for name, mod in model.named_modules()}
    assert kinds["down_proj"] == "PackedLinear" and kinds["up_proj"] != "PackedLinear"
    assert eng.packed


def test_sibling_projections_share_one_gemm_and_compute_what_they_did():
    """q/k/v and gate/up run as one GEMM per block: the same logits as separate packed
    linears, the same state_dict, and a sibling called with another input (or twice)
    computes its own output, never a stale one."""
    model, _ = tiny_llama(seed=3)
    keys = model.state_dict().keys()
    ids = torch.tensor([[3, 4, 5, 6, 7], [7, 6, 5, 4, 3]])
    with torch.no_grad():
        packed.pack_linears(model, fuse=False)
        separate = model(ids).logits
        packed.unpack_linears(model)
        assert packed.pack_linears(model) == 2 * 7 + 1
        attn, mlp = model.model.layers[0].self_attn, model.model.layers[0].mlp
        assert all(type(getattr(attn, n)) is packed.FusedLinear for n in ("q_proj", "k_proj",
                                                                            "v_proj"))
        assert type(mlp.gate_proj) is packed.FusedLinear
        assert type(mlp.down_proj) is packed.PackedLinear and type(attn.o_proj) is packed.PackedLinear
        torch.testing.assert_close(model(ids).logits, separate, rtol=1e-6, atol=1e-6)
        assert model.state_dict().keys() == keys
        gen = torch.Generator().manual_seed(0)
        x, y = (torch.randn(2, 3, 64, generator=gen) for _ in range(2))
        want = {n: F.linear(x, getattr(attn, n).weight) for n in ("q_proj", "k_proj", "v_proj")}
        torch.testing.assert_close(attn.q_proj(x), want["q_proj"])
        torch.testing.assert_close(attn.k_proj(y), F.linear(y, attn.k_proj.weight))  # out of turn
        torch.testing.assert_close(attn.k_proj(x), want["k_proj"])
        torch.testing.assert_close(attn.k_proj(x), want["k_proj"])  # twice
        torch.testing.assert_close(attn.v_proj(x), want["v_proj"])
        assert attn.q_proj.fused.x is None or attn.q_proj.fused.x is x
        assert packed.unpack_linears(model) == 2 * 7 + 1 and not packed.is_packed(model)
        assert all(type(getattr(attn, n)) is torch.nn.Linear for n in ("q_proj", "k_proj"))


class ToyAttention(torch.nn.Module):
    """Siblings with and without biases (as Qwen2's q/k/v have them)."""

    def __init__(self) -> None:
        super().__init__()
        self.q_proj, self.v_proj = torch.nn.Linear(24, 16), torch.nn.Linear(24, 8)
        self.k_proj = torch.nn.Linear(24, 8, bias=False)


def test_fused_siblings_with_biases():
    torch.manual_seed(0)
    block = ToyAttention()
    x = torch.randn(5, 24)
    with torch.no_grad():
        want = [F.linear(x, m.weight, m.bias) for m in (block.q_proj, block.k_proj, block.v_proj)]
        assert packed.pack_linears(block) == 3 and type(block.k_proj) is packed.FusedLinear
        got = [block.q_proj(x), block.k_proj(x), block.v_proj(x)]
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
