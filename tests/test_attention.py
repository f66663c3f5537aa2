"""sdpa_gqa (search.engines.attention) against transformers' own sdpa attention."""

from __future__ import annotations

import pytest
import torch

from search.engines.attention import sdpa_gqa, use_sdpa_gqa
from search.testing import tiny_llama


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
