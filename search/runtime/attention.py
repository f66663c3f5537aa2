"""Grouped-query attention without copying the cache: transformers' SDPA, minus repeat_kv.

With grouped-query attention (SmolLM2: 9 query heads share 3 key/value heads) transformers'
"sdpa" path runs one query token per row on the key/value heads directly, but for several
query tokens under a mask (a verification pass of speculative decoding, q = 1 + draft) it
first copies every layer's cache `heads / kv_heads` times over (`repeat_kv`). torch's SDPA
takes the grouping itself (`enable_gqa=True`, masks included on CPU since torch 2.5), so
"sdpa_gqa" hands it the cache as is, with no copy per group. Everything else (one query token, no mask,
anything transformers special-cases) goes to transformers' own function unchanged.

Cascade attention over a shared prefix (kv.SlabCache.prefix: the keys carry it as
`shared_kv`): every row attends to [prefix || its own columns]. The prefix's scores come
from one GEMM per key/value head with all rows' queries stacked (rows x heads-per-group x q
query vectors against S keys), so its keys and values are read once, not once per row; the
row part runs over the row's own columns under its mask; the two are merged by their
log-sum-exps. The idea of Hydragen (J. Juravsky et al., arXiv:2402.05099) and FlashInfer's
cascade kernels. A shared prefix is one case of `tree_attend`: parts each read by some of
the rows (all of them, for a prefix) are attended one call a part and merged by log-sum-exp
(merge_parts: the lean forward's kv.batch_cache(tree=True) too). The lean forward on the CPU
in fp32 runs none of these: one kernel call a layer (search.runtime.kernel).
"""

from __future__ import annotations

from collections.abc import Sequence
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

    shared = getattr(key, "shared_kv", None)
    if shared is not None:
        if dropout or kwargs.get("softcap") is not None or kwargs.get("sliding_window"):
            raise RuntimeError("cascade attention over a shared prefix supports plain causal "
                               "attention only (no dropout, softcap or sliding window)")
        scale = query.shape[-1] ** -0.5 if scaling is None else scaling
        return cascade(query, shared[0], shared[1], key, value, attention_mask, scale), None
    q_len, groups = query.shape[2], query.shape[1] // key.shape[1]
    if q_len == 1 or groups == 1 or attention_mask is None or kwargs.get("position_bias") \
            is not None or kwargs.get("cache") is not None or kwargs.get("softcap") is not None:
        return sdpa_attention_forward(module, query, key, value, attention_mask,
                                      dropout=dropout, scaling=scaling, is_causal=is_causal,
                                      **kwargs)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask,
                                         dropout_p=dropout, scale=scaling, enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


def cascade(query: torch.Tensor, prefix_k: torch.Tensor, prefix_v: torch.Tensor,
            key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None, scale: float,
            *, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Attention of query (B, H, q, d) over a shared prefix (KV, S, d) then per-row key/value
    (B, KV, T, d) under mask (B, 1, q or 1, T) bool (None: the last q columns causal, the rest
    visible) -> (B, q, H, d). Query head h reads key/value head h // (H / KV), as repeat_kv.
    bias: group_bias(mask, ...) when the caller has it. tree_attend with one part, the
    prefix, that every row reads."""
    B, H, q, _ = query.shape
    if bias is None:
        bias = group_bias(mask, B, H // key.shape[1], q, key.shape[2], query.dtype, query.device)
    return tree_attend(query, key, value, bias, [(prefix_k, prefix_v, None)], scale)


def tree_attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                bias: torch.Tensor | None, parts: Sequence[tuple[torch.Tensor, torch.Tensor,
                                                                 torch.Tensor | None]],
                scale: float) -> torch.Tensor:
    """Attention of query (B, H, q, d) over its row's own columns key/value (B, KV, T, d)
    under bias (B, 1, g*q, T) (group_bias) and the parts it reads where they live -> (B, q,
    H, d) in query's dtype. parts: (keys, values (KV, S, d), the rows reading it [k] long or
    None for all); a part is visible to every query token. A group's query heads are stacked
    as query rows over its key/value head (row j*q + i: head j of the group, token i). One
    lse_attention call per part with its readers' queries stacked (a part's keys read once
    for all of them), merged with the rows' attention over their own columns by merge_parts;
    without parts, plain multi-head SDPA over the stacked queries, which every fused kernel
    takes (no enable_gqa, no repeat_kv)."""
    B, H, q, d = query.shape
    KV = key.shape[1]
    qs = query.reshape(B, KV, H // KV * q, d)  # [B, KV, g*q, d]
    if not parts:
        out = F.scaled_dot_product_attention(qs, key, value, attn_mask=bias, scale=scale)
        return out.reshape(B, H, q, d).transpose(1, 2)
    own, own_lse = lse_attention(qs, key, value, bias, scale)  # [B, KV, gq, d], [B, KV, gq]
    every = torch.arange(B, device=query.device)
    read = []  # per part: its readers' attention over it, its lse, their slots [b] long
    for keys, values, rows in parts:
        who = every if rows is None else rows
        sq = qs.index_select(0, who).transpose(0, 1).reshape(1, KV, -1, d)  # [1, KV, b*gq, d]
        o, lse = lse_attention(sq, keys[None], values[None], None, scale)
        read.append((o.view(KV, who.numel(), -1, d).transpose(0, 1),
                     lse.view(KV, who.numel(), -1).transpose(0, 1), who))
    out = merge_parts(own, own_lse, read)
    return out.to(query.dtype).reshape(B, H, q, d).transpose(1, 2)


def merge_parts(own: torch.Tensor, own_lse: torch.Tensor,
                parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """A row's attention over its own columns (own [B, KV, gq, d], own_lse [B, KV, gq]) and
    over each part it reads (parts: out [b, KV, gq, d] and lse [b, KV, gq] of the part's
    readers, their slots [b] long) -> [B, KV, gq, d] float32: each weighted by
    exp(lse - top), top the row's largest lse."""
    top = own_lse
    for _, lse, rows in parts:
        top = top.index_copy(0, rows, torch.maximum(top.index_select(0, rows), lse))
    w = (own_lse - top).exp_().unsqueeze(-1)
    num, den = own * w, w
    for out, lse, rows in parts:
        wk = (lse - top.index_select(0, rows)).exp_().unsqueeze(-1)
        num, den = num.index_add(0, rows, out * wk), den.index_add(0, rows, wk)
    return num / den


def lse_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  bias: torch.Tensor | None, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """query (B, M, m, d) over key/value (B, M, S, d) (bias additive (B, 1, m, S) or None) ->
    (out (B, M, m, d), its log-sum-exp (B, M, m) float32)."""
    scores = torch.matmul(query, key.transpose(-1, -2)).float() * scale
    if bias is not None:
        scores = scores + bias
    lse = torch.logsumexp(scores, -1)
    p = torch.exp(scores - lse[..., None]).to(value.dtype)
    return torch.matmul(p, value), lse


def group_bias(mask: torch.Tensor | None, rows: int, groups: int, q: int, columns: int,
               dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A (rows, 1, q or 1, columns) bool mask (None: the last q columns causal) as the additive
    bias of a key/value head's stacked queries: (rows, 1, groups * q, columns), row j*q + i
    (head j of the group, query token i) is the mask's row i; 0 where seen, the dtype's
    lowest value where not (finite: a row that sees none of its own columns gets a finite
    log-sum-exp there, far below the prefix's, so its weight in the merge is exactly 0)."""
    if mask is None:
        mask = torch.ones(q, columns, dtype=torch.bool, device=device).tril_(columns - q)[None, None]
    bias = torch.zeros(mask.shape, dtype=dtype, device=device).masked_fill_(~mask, torch.finfo(dtype).min)
    bias = bias.expand(rows, 1, q, columns)[:, :, None].expand(rows, 1, groups, q, columns)
    return bias.reshape(rows, 1, groups * q, columns)


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
