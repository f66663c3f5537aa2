"""Grouped-query attention without copying the cache: transformers' SDPA, minus repeat_kv.

With grouped-query attention (SmolLM2: 9 query heads share 3 key/value heads) transformers'
"sdpa" path runs one query token per row on the key/value heads directly, but for several
query tokens under a mask (a verification pass of speculative decoding, q = 1 + draft) it
first copies every layer's cache `heads / kv_heads` times over (`repeat_kv`). torch's SDPA
takes the grouping itself (`enable_gqa=True`, masks included on CPU since torch 2.5), so
"sdpa_gqa" hands it the cache as is: one SmolLM2 layer at 16 rows x 2 tokens over 290 cached
positions takes ~0.6 ms instead of ~1.8 ms. Everything else (one query token, no mask,
anything transformers special-cases) goes to transformers' own function unchanged.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

NAME = "sdpa_gqa"


def sdpa_gqa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
             value: torch.Tensor, attention_mask: torch.Tensor | None, dropout: float = 0.0,
             scaling: float | None = None, is_causal: bool | None = None, **kwargs: Any
             ) -> tuple[torch.Tensor, None]:
    """query (B, H, q, d), key/value (B, KV, L, d), attention_mask (B, 1, q, L) bool or
    None -> ((B, q, H, d), None), as transformers' attention functions return."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    q_len, groups = query.shape[2], query.shape[1] // key.shape[1]
    if q_len == 1 or groups == 1 or attention_mask is None or kwargs.get("position_bias") \
            is not None or kwargs.get("cache") is not None or kwargs.get("softcap") is not None:
        return sdpa_attention_forward(module, query, key, value, attention_mask,
                                      dropout=dropout, scaling=scaling, is_causal=is_causal,
                                      **kwargs)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask,
                                         dropout_p=dropout, scale=scaling, enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


def use_sdpa_gqa(model: Any) -> bool:
    """Switch a model that runs transformers' "sdpa" attention to "sdpa_gqa" (registered once,
    with sdpa's mask builder); False, and nothing changed, for any other attention."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return False
    AttentionInterface.register(NAME, sdpa_gqa)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)
    model.set_attn_implementation(NAME)
    return True
