"""Weight dtypes of the models the runtime runs (the transformers engine's options name them):
names, the int8 path, native bf16 on CPU."""

from __future__ import annotations

import os
from typing import Any

import torch


def weight_dtype(dtype: torch.dtype | str | None) -> torch.dtype | None:
    """torch.bfloat16 or its name ("bfloat16", "bf16", "float32", ...) -> a torch dtype."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    name = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(dtype, dtype)
    value = getattr(torch, name, None) if isinstance(name, str) else None
    if not isinstance(value, torch.dtype) or not value.is_floating_point:
        raise ValueError(f"dtype must be a floating torch dtype or its name, got {dtype!r}")
    return value


def kv_dtype(kv: torch.dtype | str | None, weights: torch.dtype, device: str
             ) -> torch.dtype | None:
    """The KV's element type where it differs from the weights' (None: theirs): float16
    beside fp32 weights on the CPU, the one pair the attention kernel reads; else refused."""
    value = weight_dtype(kv)
    if value is None or value == weights:
        return None
    if (value, weights, device) != (torch.float16, torch.float32, "cpu"):
        raise ValueError(f"kv_dtype={kv!r}: the KV is kept in the weights' dtype ({weights}), "
                         "or in float16 beside fp32 weights on the CPU")
    return value


def is_int8(dtype: Any) -> bool:
    return isinstance(dtype, str) and dtype.lower() in ("int8", "qint8")


INT8_SKIP = ("down_proj",)  # Llama-family MLP output projections: their inputs carry the
# activation outliers that one per-call activation scale cannot hold (SmolLM2-135M's greedy
# choice on fp32's path: 59% the same with them quantised, 90% without; reports.bench.engine
# reports it)


def quantize_int8(model: Any) -> Any:
    """Replace the model's nn.Linear layers, in place, by dynamically quantised int8 ones
    (weights per output channel, activations per call), all but INT8_SKIP; the rest stays
    as it was."""
    import warnings

    from torch.ao.quantization.qconfig import per_channel_dynamic_qconfig
    from torch.ao.quantization.quantize import quantize_dynamic

    spec = {name: per_channel_dynamic_qconfig for name, mod in model.named_modules()
            if isinstance(mod, torch.nn.Linear) and not name.endswith(INT8_SKIP)}
    with warnings.catch_warnings():  # torch.ao.quantization announces its move to torchao
        warnings.simplefilter("ignore")
        return quantize_dynamic(model, spec, dtype=torch.qint8, inplace=True)


def bf16_native() -> bool:
    """Whether this CPU computes bf16 matmuls natively (AVX-512 bf16 / AMX via oneDNN);
    without it bf16 weights run emulated and slower than fp32."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def cpu_16bit(model: Any, device: torch.device, asked: Any) -> bool:
    """Whether `model` holds bf16 or fp16 weights bound for the CPU with no dtype asked for
    (HFConfig.dtype None): there the lean forward runs without the packed GEMMs and the
    attention kernel, which take fp32."""
    return device.type == "cpu" and asked is None and \
        next(model.parameters()).dtype in (torch.bfloat16, torch.float16)


def fp32_for_cpu(model: Any, device: torch.device, asked: Any = None) -> Any:
    """`model`, made fp32 where its 16-bit weights are bound for the CPU with no dtype asked
    for (cpu_16bit) and fit (fp32_fits): what a load of a checkpoint gives the CPU."""
    return model.float() if cpu_16bit(model, device, asked) and fp32_fits(model) else model


def fp32_fits(model: Any) -> bool:
    """Whether a model of 16-bit weights may be made fp32 on this machine: its fp32 weights,
    beside the 16-bit ones while they convert, within half the memory available."""
    size = sum(p.numel() for p in model.parameters()) * 6  # 4 bytes fp32 + 2 of 16-bit
    try:
        with open("/proc/meminfo") as f:
            free = next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        try:
            free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):  # (not known here: nothing converted)
            return False
    return 2 * size <= free
