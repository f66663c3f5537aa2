"""The lean forward's layer, in three pieces that run without the interpreter lock.

With 16 searches on one engine the thread that runs the forwards shares Python's interpreter
lock with the 16 search threads. Every torch op called from Python releases the lock for its
kernel and takes it back after, so a merged forward queued for the lock at every one of the
dozens of small ops a layer (views, splits, one flash pair per Pass) while the searches' own
Python wanted it too. A TorchScript function runs its ops in torch's interpreter, which holds no Python lock: one wait a piece instead of one an op, and
the searches' Python runs on the other core meanwhile. The ops are the very ATen calls the
Python forward makes, on the same tensors, so the bits are the same (tests/test_lean.py
checks them against the same functions run as Python).

A layer is three pieces so that attention can run on one intra-op thread between two pieces
that run on all of them (attention.one_thread: a thread count is a thread's setting that
TorchScript cannot change mid-function):

- `pre`: RMSNorm, the q|k|v GEMM, rotary, every Pass's new keys and values written to its slab
  (a copy_ a Pass); returns the rotated q|k heads;
- `attend`: every Pass's attention on CPU: over a shared prefix cascade's two flash calls and
  their log-sum-exp merge (as attention.cascade and merge_halves; the one-token Passes' queries
  cut from one stacking, their halves merged together), SDPA where a Pass has no prefix;
- `post`: the output projection (+ residual), RMSNorm, the SiLU-gated MLP (+ residual).

The functions are plain Python too: where TorchScript is missing (torch.jit.script is
deprecated since torch 2.10) they run as they are, the same ops under the lock, and a warning
at import says so (`compiled`).
"""

from __future__ import annotations

import warnings
from typing import Any, List, Optional, Tuple  # noqa: UP035 (TorchScript reads the annotations)

import torch

from search.runtime.attention import attend_parts, lse_attention, merge_halves, stack_queries
from search.runtime.packed import gemm_rows

Tensor = torch.Tensor


def pre(x: Tensor, cos: Tensor, sin: Tensor, norm: Tensor, w: Tensor,
        b: Optional[Tensor], lone: bool, eps: float, H: int, KV: int, d: int,  # noqa: UP045
        rows: List[int], q: List[int], slabs: List[Tensor], n: List[int],  # noqa: UP006
        li: int) -> Tensor:
    """x [N, D] (every Pass's tokens, row-major), cos/sin' [N, 1, d] -> the rotated q|k heads
    [N, H + KV, d], each Pass's keys and values written into layer li of its slab (Pass i:
    slabs[i] [L, 2, slots, KV, capacity, d], its first rows[i] slots, q[i] tokens a row at
    columns n[i] on: rotate_and_write); w, b, lone: the q|k|v GEMM's."""
    qkv = gemm_rows(torch.rms_norm(x, [x.shape[1]], norm, eps), w, b, None, lone)
    qk, kv = rotate(qkv, cos, sin, H, KV, d)
    parts = kv.split([rows[i] * q[i] for i in range(len(q))])
    for i in range(len(q)):  # (copy_ into a view of the input: TorchScript keeps the write)
        new = slabs[i][li, :, :rows[i], :, n[i]:n[i] + q[i]].permute(1, 3, 0, 2, 4)
        new.copy_(parts[i].view(new.shape))
    return qk


def rotate_and_write(qkv: Tensor, cos: Tensor, sin: Tensor, H: int, KV: int, d: int,
                     sizes: List[int], new: List[Tensor]) -> Tensor:  # noqa: UP006
    """qkv [N, (H + 2 KV) d] -> the rotated q|k heads [N, H + KV, d] (rotary on q and k at
    once: x*cos + roll(x, d/2)*sin'); Pass i's keys and values (its sizes[i] tokens) are
    written into new[i] ([B, q, 2, KV, d], a view of its slab) by one _foreach_copy_."""
    qk, kv = rotate(qkv, cos, sin, H, KV, d)
    parts = kv.split(sizes)
    torch.ops.aten._foreach_copy_(new, [parts[i].view(new[i].shape) for i in range(len(new))])
    return qk


def rotate(qkv: Tensor, cos: Tensor, sin: Tensor, H: int, KV: int, d: int
           ) -> Tuple[Tensor, Tensor]:  # noqa: UP006
    """qkv [N, (H + 2 KV) d] -> the rotated q|k heads [N, H + KV, d] and the new keys and
    values [N, 2 KV, d]."""
    N = qkv.shape[0]
    qk = qkv[:, : (H + KV) * d].view(N, H + KV, d)
    qk = torch.addcmul(qk * cos, qk.roll(d // 2, -1), sin)
    return qk, torch.cat((qk[:, H:], qkv[:, (H + KV) * d:].view(N, KV, d)), 1)


def attend(qk: Tensor, H: int, KV: int, d: int, scale: float, rows: List[int],  # noqa: UP006
           q: List[int], slabs: List[Tensor], n: List[int], li: int,  # noqa: UP006
           bias: List[Tensor], parts: List[List[Tensor]],  # noqa: UP006
           readers: List[List[Tensor]]) -> Tensor:  # noqa: UP006
    """Every Pass's attention in layer li on CPU -> [N, H d], the Passes' rows in order. Pass i
    has rows[i] rows of q[i] query tokens (qk: the rotated q|k heads [N, H + KV, d]), its
    keys/values [B, KV, T, d]: layer li's first rows[i] slots and n[i] + q[i] columns of
    slabs[i] ([L, 2, slots, KV, capacity, d]), bias[i] (its mask, additive), and the parts its
    rows read where they live, parts[i][k] [L, 2, KV, S, d], readers[i][k] the slots reading
    part k ([b] long; empty: every row):
    - one part every row reads (a shared prefix): cascade's two flash calls (as attention.
      cascade: the prefix with the rows' queries stacked, then the rows' own columns)
      merged by their log-sum-exps (attention.merge_halves); the one-token Passes' queries
      are cut from one stacking of every token's heads, and their halves merged together;
    - other parts: one flash call per part with its readers' queries stacked, one over the
      rows' own columns, merged by log-sum-exp (attention.attend_parts);
    - no part: SDPA over its own columns."""
    N, g = qk.shape[0], H // KV
    sizes = [rows[i] * q[i] for i in range(len(rows))]
    heads = qk[:, :H].view(N, KV, g, d)
    own_1 = heads.split(sizes)  # a one-token Pass's own-columns queries: [B, KV, g, d]
    # and its prefix call's: [1, KV, B g, d], rows of one [1, KV, N g, d]
    pre_1 = heads.transpose(0, 1).contiguous().view(1, KV, -1, d).split([m * g for m in sizes], 2)
    out = [qk] * len(sizes)  # per Pass [B q, H d] (placeholders until set)
    ones: List[int] = []  # noqa: UP006 (the one-token cascade Passes, merged together)
    halves: List[List[Tensor]] = [[], [], [], []]  # noqa: UP006 (their pre, pre_lse, own, own_lse)
    at = 0
    for i in range(len(sizes)):
        B, t = rows[i], q[i]
        query = qk[at:at + B * t, :H].unflatten(0, [B, t]).transpose(1, 2)  # [B, H, t, d]
        at += B * t
        seen = slabs[i][li, :, :B, :, :n[i] + t]  # its keys, values [B, KV, T, d]
        if len(parts[i]) == 0:
            out[i] = torch.nn.functional.scaled_dot_product_attention(
                query, seen[0], seen[1], attn_mask=bias[i], scale=scale,
                enable_gqa=True).transpose(1, 2).reshape(B * t, H * d)
            continue
        if t == 1:
            qs, stacked = own_1[i], pre_1[i]
        else:
            qs, stacked = stack_queries(query, KV)
            stacked = stacked.unsqueeze(0)
        own, own_lse = lse_attention(qs, seen[0], seen[1], bias[i], scale, True)
        part_k = [kv[li, 0].unsqueeze(0) for kv in parts[i]]  # [1, KV, S, d] each
        part_v = [kv[li, 1].unsqueeze(0) for kv in parts[i]]
        if len(part_k) == 1 and readers[i][0].numel() == 0:
            pre, pre_lse = lse_attention(stacked, part_k[0], part_v[0], None, scale, True)
            if t == 1:
                ones.append(i)
                for j, h in enumerate((pre, pre_lse, own, own_lse)):
                    halves[j].append(h)
                continue
            merged = merge_halves(pre, pre_lse, own, own_lse)
        else:
            merged = attend_parts(qs, stacked, own, own_lse, part_k, part_v, readers[i], scale,
                                  True)
        out[i] = merged.to(qk.dtype).reshape(B, H, t, d).transpose(1, 2).reshape(B * t, H * d)
    if len(ones) > 0:
        merged = merge_halves(torch.cat(halves[0], 2), torch.cat(halves[1], 2),
                              torch.cat(halves[2], 0), torch.cat(halves[3], 0)
                              ).to(qk.dtype).reshape(-1, H * d)  # [one-token rows, H d]
        if len(ones) == len(sizes):
            return merged
        for i, m in zip(ones, merged.split([sizes[i] for i in ones])):
            out[i] = m
    return out[0] if len(out) == 1 else torch.cat(out)


def post(att: Tensor, x: Tensor, norm: Tensor, eps: float, inter: int,
         w: List[Tensor], b: List[Optional[Tensor]], lone: List[bool]) -> Tensor:  # noqa
    """att [N, H d] (attention's rows), x [N, D] (the residual stream) -> x after the output
    projection and the MLP; w, b, lone: the o, gate|up and down GEMMs'."""
    x = gemm_rows(att.contiguous(), w[0], b[0], x, lone[0])
    gu = gemm_rows(torch.rms_norm(x, [x.shape[1]], norm, eps), w[1], b[1], None, lone[1])
    return gemm_rows(torch.nn.functional.silu(gu[:, :inter]) * gu[:, inter:], w[2], b[2], x, lone[2])


def layers(x: Tensor, cos: Tensor, sin: Tensor, eps: float, H: int, KV: int, d: int,
           scale: float, inter: int, norm1: List[Tensor], w: List[Tensor],  # noqa: UP006
           b: List[Optional[Tensor]], lone: List[bool], norm2: List[Tensor],  # noqa
           post_w: List[List[Tensor]], post_b: List[List[Optional[Tensor]]],  # noqa
           post_lone: List[List[bool]], rows: List[int], q: List[int],  # noqa: UP006
           slabs: List[Tensor], n: List[int], bias: List[Tensor],  # noqa: UP006
           parts: List[List[Tensor]], readers: List[List[Tensor]]) -> Tensor:  # noqa: UP006
    """Every layer (pre, attend, post; per layer li: norm1[li], w[li], b[li], lone[li] the
    q|k|v GEMM's, norm2[li] and post_*[li] post's) in one call -> x after the last: what a
    forward on one intra-op thread runs (no thread switch around attention)."""
    for li in range(len(norm1)):
        qk = pre(x, cos, sin, norm1[li], w[li], b[li], lone[li], eps, H, KV, d, rows, q, slabs,
                 n, li)
        att = attend(qk, H, KV, d, scale, rows, q, slabs, n, li, bias, parts, readers)
        x = post(att, x, norm2[li], eps, inter, post_w[li], post_b[li], post_lone[li])
    return x


def biases(x: Tensor, masks: List[Tensor], grouped: List[bool], lowest: float,  # noqa: UP006
           groups: int, rows: List[int], q: List[int]) -> List[Tensor]:  # noqa: UP006
    """Each Pass's mask [B, 1, q or 1, T] bool as the additive bias its attention reads, in
    x's dtype: where grouped, attention.group_bias's (lowest where not seen, over a group's
    stacked queries [B, 1, groups q, T]), else as SDPA turns a bool mask into one (-inf)."""
    out: List[Tensor] = []  # noqa: UP006
    for i in range(len(masks)):
        m = masks[i]
        B, t, T = rows[i], q[i], m.shape[-1]
        b = torch.zeros(m.shape, dtype=x.dtype, device=x.device).masked_fill_(
            ~m, lowest if grouped[i] else float("-inf"))
        out.append(b.expand(B, 1, t, T)[:, :, None].expand(B, 1, groups, t, T).reshape(
            B, 1, groups * t, T) if grouped[i] else b)
    return out


def compiled(plain: list[Any]) -> list[Any]:
    """The functions as TorchScript functions; where TorchScript cannot compile them (missing,
    or a torch that no longer takes them), the functions as they are, and a warning that says
    why the forward got slower (the same bits: the same ops, under the interpreter lock)."""
    try:
        with warnings.catch_warnings():  # torch >= 2.10 warns that torch.jit is deprecated
            warnings.simplefilter("ignore", DeprecationWarning)
            return [torch.jit.script(f) for f in plain]
    except Exception as err:  # noqa: BLE001 (no TorchScript: the same functions, in Python)
        warnings.warn(f"TorchScript could not compile the lean forward's layer pieces "
                      f"({type(err).__name__}: {str(err)[:200]}); they run as Python: the same "
                      "results, slower when many searches share the engine",
                      RuntimeWarning, stacklevel=2)
        return plain


PRE, ROTATE_AND_WRITE, ATTEND, POST, LAYERS, BIASES = compiled(
    [pre, rotate_and_write, attend, post, layers, biases])
SCRIPTED = not isinstance(PRE, type(pre))
