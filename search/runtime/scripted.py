"""The lean forward's layer as TorchScript pieces that run without the interpreter lock.

With 16 searches on one engine the thread that runs the forwards shares Python's interpreter
lock with the 16 search threads. Every torch op called from Python releases the lock for its
kernel and takes it back after, so a merged forward queued for the lock at every one of the
dozens of small ops a layer while the searches' own Python wanted it too. A TorchScript
function runs its ops in torch's interpreter, which holds no Python lock: one wait a call
instead of one an op, and the searches' Python runs on the other core meanwhile. The ops are
the very ATen calls the Python forward makes, on the same tensors, so the bits are the same
(tests/test_lean.py checks them against the same functions run as Python).

- `rotate_and_write`: rotary on the q|k|v GEMM's output, every Pass's new keys and values
  written to its slab (one _foreach_copy_); returns the rotated q|k heads;
- `post`: the output projection (+ residual), RMSNorm, the SiLU-gated MLP (+ residual);
- `layers`: every layer in one call (RMSNorm, the q|k|v GEMM and rotary: `project`; every
  Pass's new keys and values written by the kernel's `write`; the attention kernel; post): a
  forward whose projections are all packed and whose attention the kernel serves
  (search.runtime.kernel).

The functions are plain Python too: where TorchScript is missing (torch.jit.script is
deprecated since torch 2.10) they run as they are, the same ops under the lock, and a warning
at import says so (`compiled`).
"""

from __future__ import annotations

import warnings
from typing import Any, List, Optional, Tuple  # noqa: UP035 (TorchScript reads the annotations)

import torch

import search.runtime.kernel  # noqa: F401 (the attention op's schema, which layers calls)
from search.runtime.packed import gemm_rows

Tensor = torch.Tensor


def project(x: Tensor, cos: Tensor, sin: Tensor, norm: Tensor, w: Tensor,
            b: Optional[Tensor], lone: bool, qkn: Optional[Tensor], eps: float,  # noqa: UP045
            H: int, KV: int, d: int) -> Tuple[Tensor, Tensor, Tensor]:  # noqa: UP006
    """x [N, D] -> RMSNorm, the q|k|v GEMM and rotary: `rope`'s heads, keys and values."""
    qkv = gemm_rows(torch.rms_norm(x, [x.shape[1]], norm, eps), w, b, None, lone)
    return rope(qkv, cos, sin, H, KV, d, qkn, eps)


def rotate_and_write(qkv: Tensor, cos: Tensor, sin: Tensor, H: int, KV: int, d: int,
                     qkn: Optional[Tensor], eps: float, sizes: List[int],  # noqa: UP006, UP045
                     new: List[Tensor]) -> Tensor:  # noqa: UP006
    """qkv [N, (H + 2 KV) d] -> the rotated q|k heads [N, H + KV, d] (rope); Pass i's keys
    and values (its sizes[i] tokens) are written into new[i] ([B, q, 2, KV, d], a view of
    its slab) by one _foreach_copy_."""
    qk, k, v = rope(qkv, cos, sin, H, KV, d, qkn, eps)
    parts = torch.cat((k, v), 1).split(sizes)  # [N, 2 KV, d] by Pass
    torch.ops.aten._foreach_copy_(new, [parts[i].view(new[i].shape) for i in range(len(new))])
    return qk


def rope(qkv: Tensor, cos: Tensor, sin: Tensor, H: int, KV: int, d: int,
         qkn: Optional[Tensor], eps: float) -> Tuple[Tensor, Tensor, Tensor]:  # noqa: UP006, UP045
    """qkv [N, (H + 2 KV) d] -> the rotated q|k heads [N, H + KV, d] (rotary on q and k at
    once: x*cos + roll(x, d/2)*sin'; each head RMS-normed first where qkn, the q and k
    norms' weights [H + KV, d], is given: Qwen3), and views of the new keys (the rotated k
    heads) and values [N, KV, d]."""
    N = qkv.shape[0]
    qk = qkv[:, : (H + KV) * d].view(N, H + KV, d)
    if qkn is not None:  # (transformers' RMSNorm op for op: in float32, weighted after)
        f = qk.float()
        qk = qkn * (f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + eps)).to(qk.dtype)
    qk = torch.addcmul(qk * cos, qk.roll(d // 2, -1), sin)
    return qk, qk[:, H:], qkv[:, (H + KV) * d:].view(N, KV, d)


def post(att: Tensor, x: Tensor, norm: Tensor, eps: float, inter: int,
         w: List[Tensor], b: List[Optional[Tensor]], lone: List[bool]) -> Tensor:  # noqa
    """att [N, H d] (attention's rows), x [N, D] (the residual stream) -> x after the output
    projection and the MLP; w, b, lone: the o, gate|up and down GEMMs'."""
    x = gemm_rows(att.contiguous(), w[0], b[0], x, lone[0])
    gu = gemm_rows(torch.rms_norm(x, [x.shape[1]], norm, eps), w[1], b[1], None, lone[1])
    return gemm_rows(torch.nn.functional.silu(gu[:, :inter]) * gu[:, inter:], w[2], b[2], x, lone[2])


def layers(x: Tensor, cos: Tensor, sin: Tensor, eps: float, H: int, KV: int, d: int,
           scale: float, inter: int, norm1: List[Tensor], w: List[Tensor],  # noqa: UP006
           b: List[Optional[Tensor]], lone: List[bool], qkn: List[Optional[Tensor]],  # noqa
           norm2: List[Tensor],  # noqa: UP006
           post_w: List[List[Tensor]], post_b: List[List[Optional[Tensor]]],  # noqa
           post_lone: List[List[bool]], rows: List[int], q: List[int],  # noqa: UP006
           n: List[int], masks: List[Tensor],  # noqa: UP006
           pool: List[Tensor], tables: List[Tensor], owns: List[Tensor]  # noqa: UP006
           ) -> Tensor:
    """Every layer (project, write, the attention kernel, post; per layer li: norm1[li],
    w[li], b[li], lone[li] the q|k|v GEMM's, qkn[li] rope's, norm2[li] and post_*[li]
    post's) in one call ->
    x after the last. masks, pool, tables, owns: the kernel's (search.runtime.kernel)."""
    for li in range(len(norm1)):
        qk, k, v = project(x, cos, sin, norm1[li], w[li], b[li], lone[li], qkn[li], eps, H,
                           KV, d)
        torch.ops.tts.write(k, v, li, rows, q, n, pool, owns)
        att = torch.ops.tts.attend(qk, H, KV, scale, li, rows, q, n, masks, pool, tables, owns)
        x = post(att, x, norm2[li], eps, inter, post_w[li], post_b[li], post_lone[li])
    return x


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


PROJECT, ROTATE_AND_WRITE, POST, LAYERS = compiled([project, rotate_and_write, post, layers])
SCRIPTED = not isinstance(POST, type(post))
