"""Linear layers on oneDNN's prepacked fp32 weights: faster on CPU, and batch-invariant.

`torch.nn.functional.linear` on CPU hands each call to MKL, which picks a kernel by the
number of rows M: a GEMV at M=1, a GEMM that repacks the whole weight matrix on every call
at M>1. A decode step streams every weight once, so that repacking is most of the cost of a
small-M call, which is what caps speculative verification (1 + k rows per pass). oneDNN can
pack a weight once, in its own blocked layout, and reuse it:
`torch.ops.mkldnn._reorder_linear_weight` (what torch.compile's CPU weight-prepacking pass
uses), then `torch.ops.mkldnn._linear_pointwise` per call (reports/bench/engine.py compares
the two).

The packed kernel also computes each row the same way whatever M is (bit-identical rows for
any M >= 2, where MKL's differ by ~1e-6 between M=1 and M>1), so the linear layers do not
make a row's logits depend on how many rows or draft tokens share its forward pass. One
exception, found by experiment: with more than 1,024 input features (SmolLM2's MLP
down-projection), oneDNN computes a single row by another kernel (its sums in another order,
~1e-6 apart) at any thread count; `packed_linear` finds out once per weight shape and, where
that is so, runs a lone row as two (the row twice). The attention kernels still make a row
depend on its batch, slightly (~4e-5 on SmolLM2's logits between one query and six), so
greedy speculation is token-identical up to near-ties, as it was before; the engine keeps
every call's attention to itself (search.runtime.sched).

Sibling projections that a Llama-family block calls back to back on one input (q/k/v,
gate/up) share one packed weight and one GEMM (`fuse_siblings`): 4 kernel calls per layer
instead of 7, wider ones.

CPU and fp32 only (oneDNN's bf16 packing needs AVX-512 or AVX-NE-CONVERT); `pack_linears`
checks the kernel on this machine against F.linear first and leaves the model alone where it
is missing or disagrees. The layers keep their original parameters too (state_dict,
save_pretrained and tied embeddings are unaffected; `unpack_linears` undoes it), so the
linear weights are held twice: +0.43 GB for SmolLM2-135M.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Optional  # noqa: UP035 (TorchScript reads Optional)

import torch
import torch.nn.functional as F

PACK_HINT = 16  # the row count oneDNN tunes the packed layout for (a decode batch); any M works


def packed_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None,
                  in_features: int, residual: torch.Tensor | None = None) -> torch.Tensor:
    """(..., in) -> (rows, in) -> (rows, out) -> (..., out) on a oneDNN-packed weight;
    residual (rows, out): added to the output.
    A lone row runs as two where oneDNN would compute it apart (see the module doc)."""
    rows = x.reshape(-1, in_features).contiguous()
    lone = rows.shape[0] == 1 and not single_row_same(packed, bias, in_features)
    out = gemm_rows(rows, packed, bias, residual, lone)
    return out.reshape(*x.shape[:-1], out.shape[-1])


def gemm_rows(rows: torch.Tensor, packed: torch.Tensor, bias: Optional[torch.Tensor],  # noqa: UP045
              residual: Optional[torch.Tensor], lone: bool) -> torch.Tensor:  # noqa: UP045
    """rows [M, in] (contiguous) -> [M, out] (+ residual [M, out]) on a packed weight; lone:
    oneDNN computes a lone row of this weight apart (single_row_same), so it runs as two.
    TorchScript compiles it too (search.runtime.scripted)."""
    if lone and rows.shape[0] == 1:
        pair = rows.expand(2, rows.shape[1]).contiguous()
        if residual is not None:
            residual = residual.expand(2, residual.shape[1]).contiguous()
        return _gemm(pair, packed, bias, residual)[:1]
    return _gemm(rows, packed, bias, residual)


def _gemm(rows: torch.Tensor, packed: torch.Tensor, bias: Optional[torch.Tensor],  # noqa: UP045
          residual: Optional[torch.Tensor]) -> torch.Tensor:  # noqa: UP045
    out = torch.ops.mkldnn._linear_pointwise(rows, packed, bias, "none", [], "")
    # the residual added after the GEMM, not by oneDNN's binary post-op: the same float32 sums
    # (tests/test_packed.py), without the post-op's cost per call (~40 us at small shapes;
    # with a bias, milliseconds: python -m reports.bench.residual)
    return out if residual is None else out.add_(residual)


_SINGLE: dict[tuple[int, int, bool], bool] = {}  # (in, out, bias) -> same?


def single_row_same(packed: torch.Tensor, bias: torch.Tensor | None, in_features: int) -> bool:
    """Whether oneDNN computes one row of this weight shape as it computes it among others
    (probed once per shape, on this weight, with random rows; a residual is added after the
    GEMM, row by row, so it changes nothing here)."""
    key = (in_features, packed.size(0), bias is not None)  # packed: [out, in]
    same = _SINGLE.get(key)
    if same is None:
        x = torch.randn(2, in_features, generator=torch.Generator().manual_seed(0))
        pair = _gemm(x, packed, bias, None)
        one = _gemm(x[:1].clone(), packed, bias, None)
        same = _SINGLE[key] = bool(torch.equal(pair[:1], one))
    return same


class PackedLinear(torch.nn.Module):
    """nn.Linear's forward on a oneDNN-prepacked copy of its weight (CPU, fp32)."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight = linear.weight.detach()
        # an opaque oneDNN tensor, kept as a plain attribute: not a parameter or buffer, so
        # state_dict and .to() never see a layout they cannot handle
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, PACK_HINT)
        # the original parameters stay: state_dict, save_pretrained, tied embeddings and
        # unpack_linears see the model as it was (at the cost of a second copy of the weights)
        self.weight, self.bias = linear.weight, linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return packed_linear(x, self.packed, self.bias, self.in_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, oneDNN-packed"


# linears a Llama-family block always calls one after another on the same input tensor
SIBLINGS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


class _Fused:
    """One packed weight for sibling linears: a single GEMM over their stacked rows, whose
    output columns are handed out to the siblings as they are called with the same input."""

    def __init__(self, linears: list[PackedLinear]) -> None:
        self.in_features = linears[0].in_features
        self.sizes = [m.out_features for m in linears]
        weight = torch.cat([m.weight.detach() for m in linears])  # [sum(out), in]
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, PACK_HINT)
        self.bias = None if all(m.bias is None for m in linears) else torch.cat(
            [m.bias.detach() if m.bias is not None else m.weight.new_zeros(m.out_features)
             for m in linears])
        self.x: torch.Tensor | None = None  # the input of the pending outputs
        self.pending: list[torch.Tensor | None] = []

    def take(self, x: torch.Tensor, i: int) -> torch.Tensor:
        """Sibling i's output for x: computed for all siblings on the first call with x,
        then each sibling's share once (a sibling called with another tensor, or twice,
        recomputes: never a stale result)."""
        if x is not self.x or self.pending[i] is None:
            out = packed_linear(x, self.packed, self.bias, self.in_features)
            self.x = x
            self.pending = list(out.split(self.sizes, -1))
        out, self.pending[i] = self.pending[i], None
        if all(o is None for o in self.pending):
            self.x = None  # nothing held between forwards
        assert out is not None
        return out


class FusedLinear(PackedLinear):
    """A PackedLinear whose GEMM is shared with its siblings (see fuse_siblings)."""

    def __init__(self, linear: PackedLinear, fused: _Fused, index: int) -> None:
        torch.nn.Module.__init__(self)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias  # its own packed copy is dropped
        self.fused, self.index = fused, index

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fused.take(x, self.index)


@functools.cache
def supported() -> bool:
    """Whether oneDNN's packed fp32 linear runs here and agrees with F.linear."""
    if not torch.backends.mkldnn.is_available():
        return False
    gen = torch.Generator().manual_seed(0)
    w, b, x = (torch.randn(*shape, generator=gen) for shape in ((40, 24), (40,), (3, 24)))
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(w, PACK_HINT)
        out = torch.ops.mkldnn._linear_pointwise(x, packed, b, "none", [], "")
    except (RuntimeError, AttributeError, NotImplementedError):
        return False
    return bool(torch.allclose(out, F.linear(x, w, b), rtol=1e-4, atol=1e-5))


def pack_linears(model: Any, *, fuse: bool = True) -> int:
    """Replace the model's CPU fp32 nn.Linear layers, in place, by PackedLinear; returns how
    many. fuse: then give sibling projections one GEMM (fuse_siblings). Nothing changes
    where the kernel is not supported here."""
    if not supported():
        return 0
    count = _replace(model, lambda m: PackedLinear(m) if type(m) is torch.nn.Linear
                     and m.weight.device.type == "cpu" and m.weight.dtype == torch.float32
                     else None)
    if fuse:
        fuse_siblings(model)
    return count


def fuse_siblings(model: Any) -> int:
    """Give the packed q/k/v and gate/up projections of each Llama-family attention and
    MLP block one GEMM each (SIBLINGS; their blocks call them back to back on one input):
    fewer, wider kernel calls. Returns how many groups were fused."""
    count = 0
    for block in list(model.modules()):
        if not type(block).__name__.endswith(("Attention", "MLP")):
            continue
        for names in SIBLINGS:
            group = [getattr(block, n, None) for n in names]
            if not all(type(m) is PackedLinear for m in group) or \
                    len({m.in_features for m in group}) != 1:  # type: ignore[union-attr]
                continue
            fused = _Fused(group)  # type: ignore[arg-type]
            for i, (n, m) in enumerate(zip(names, group)):
                setattr(block, n, FusedLinear(m, fused, i))  # type: ignore[arg-type]
            count += 1
    return count


def unpack_linears(model: Any) -> int:
    """Put plain nn.Linear layers (the same parameters) back in place of PackedLinear."""
    def plain(m: torch.nn.Module) -> torch.nn.Linear | None:
        if not isinstance(m, PackedLinear):
            return None
        linear = torch.nn.Linear(m.in_features, m.out_features, bias=m.bias is not None,
                                 device="meta")
        linear.weight, linear.bias = m.weight, m.bias
        return linear

    return _replace(model, plain)


def _replace(model: Any, convert: Callable[[torch.nn.Module], torch.nn.Module | None]) -> int:
    """Swap, in place, every submodule that convert() maps to a module; returns how many."""
    count = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            new = convert(child)
            if new is not None:
                setattr(parent, name, new)
                count += 1
    return count


def is_packed(model: Any) -> bool:
    return any(isinstance(m, PackedLinear) for m in model.modules())
