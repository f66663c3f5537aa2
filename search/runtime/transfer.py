"""Small host values to and from the engine's device, without stalling it.

On a GPU the host queues kernels and runs ahead of them; it stalls (a *host sync*) whenever
it reads a device value (`.tolist()`, `.item()`, `bool(t)`, `int(t)`, `.cpu()`) or copies a
list from pageable memory into a device tensor (torch then waits for the stream). A decode
loop that does either per row or per token waits for the GPU that many times a step. So:

- `upload`: a list of ints (index tensors, positions, token ids) to the device through pinned
  memory, asynchronously: the host queues the copy and goes on;
- `readback`: the tensors a step hands the host (its sampled tokens and their logprobs) in ONE
  device-to-host copy: one sync per step, whatever the rows.

On the CPU both are the plain calls (the same values, the same bits). `device_or_default`
says which device a model runs on where none is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def upload(values: Sequence[Any], device: torch.device, dtype: torch.dtype = torch.long
           ) -> torch.Tensor:
    """torch.tensor(values, dtype=dtype) (nested lists of ints or bools) on `device`; on CUDA copied from pinned memory with
    non_blocking=True (torch's host allocator keeps the pinned buffer until the copy is done)."""
    t = torch.tensor(values, dtype=dtype)
    if device.type == "cpu":
        return t
    if device.type == "cuda":
        t = t.pin_memory()
    return t.to(device, non_blocking=True)


def readback(*tensors: torch.Tensor) -> list[Any]:
    """Equal-shape tensors (int64 token ids < 2**53, float32 logprobs, ...) -> each as
    (nested) lists of Python numbers, ints for an integer tensor: read by one copy on every
    device (stacked as float64, which holds both exactly), so that the loop the CPU's tests
    count is the one a GPU runs."""
    both = torch.stack([t.double() for t in tensors]).tolist()
    return [_ints(b) if not t.is_floating_point() else b for b, t in zip(both, tensors)]


def _ints(x: list[Any]) -> list[Any]:
    """Nested lists of floats -> the same of ints (a row's numbers at once)."""
    if x and isinstance(x[0], list):
        return [_ints(v) for v in x]
    return list(map(int, x))


def device_or_default(device: str | torch.device | None) -> torch.device:
    """`device`, or where none is given CUDA where torch sees it, else the CPU."""
    return torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
