"""One merged forward of several searches' Passes, timed alone (`python -m reports.bench.host
--parts forward`): no search threads, no jobs, no batch caches built, so what is
left is the forward's own kernels and the Python and small ops around them. The kernels are
timed twice: by bench.eval's kernel clock (entry points Python calls; the lean forward's
TorchScript pieces whole) and by torch's profiler on a few forwards (it sees inside the
pieces, at a cost that a whole grid's records cannot afford)."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any


def forward_alone(engine: Any, *, passes: int = 16, forwards: int = 100, seed: int = 0) -> str:
    """One merged decode forward of `passes` one-token Passes, each on its own batch cache
    (the engine's: kv.batch) over paths with a shared prefix (1-16 rows, 60-75 prefix and
    5-44 own columns), timed alone: no
    search threads, no jobs, no batch caches built; the kernels by kind (bench.eval's
    kernel_clock) against the wall, per forward (the fastest of 5 rounds)."""
    import torch

    from reports.bench.eval import KINDS, inside, kernel_clock
    from search.runtime.passes import Pass

    kv = engine.kv
    lay, gen = kv.layout, torch.Generator().manual_seed(seed)

    @torch.inference_mode()  # (as the engine writes its pool)
    def segment(n: int) -> Any:  # n random columns, where the engine keeps a node's
        return kv.segment(torch.randn(lay.layers, 2, lay.kv_heads, n, lay.head_dim,
                                      generator=gen))

    batch = []
    for i in range(passes):
        rows = (4, 8, 2, 16, 1)[i % 5]
        prefix = segment(60 + i % 16)
        cache = kv.batch([[prefix, segment(5 + (b * 7 + i) % 40)] for b in range(rows)], 2)
        batch.append(Pass(kv.forward, torch.randint(0, 300, (rows, 1), generator=gen),
                          torch.full((rows, 1), 120), cache, cache.attention_mask(1)))

    def step() -> None:
        kv.forward.forward_many(batch)
        for p in batch:  # the next forward writes the same columns again
            p.cache.rewind(p.cache.length - 1)

    best: tuple[float, dict[str, float]] = (float("inf"), {})
    for _ in range(5):
        step()  # warm
        with kernel_clock() as spent:
            t0 = time.perf_counter()
            for _ in range(forwards):
                step()
            wall = (time.perf_counter() - t0) / forwards
        if wall < best[0]:
            best = (wall, {k: v / forwards for k, v in spent.items()})
    wall, spent = best
    busy = inside(spent)
    kinds = ", ".join(f"{k} {spent.get(k, 0.0) * 1e3:.2f}" for k in KINDS)
    ops, profiled = op_seconds(step, max(1, forwards // 5))
    return (f"one merged forward of {passes} one-token Passes, alone: {wall * 1e3:.2f} ms "
            f"({kinds} ms); kernels {busy / wall:.1%} of it\n  under torch's profiler (which "
            f"sees inside TorchScript): {profiled * 1e3:.2f} ms, of it " + ", ".join(
                f"{k} {ops.get(k, 0.0) * 1e3:.2f}" for k in dict.fromkeys(OPS.values()))
            + f" ms: kernels {sum(ops.values()) / profiled:.1%}")


# the forward's kernels as torch's profiler names them (tts::attend: search.runtime.kernel)
OPS = {"mkldnn::_linear_pointwise": "GEMMs", "tts::attend": "attention",
       "aten::_scaled_dot_product_flash_attention_for_cpu": "attention",
       "aten::_scaled_dot_product_attention_math": "attention",
       "aten::rms_norm": "norms, rotary, SiLU", "aten::addcmul": "norms, rotary, SiLU",
       "aten::silu": "norms, rotary, SiLU"}


def op_seconds(step: Callable[[], None], n: int) -> tuple[dict[str, float], float]:
    """(seconds per call of `step` inside OPS by kind, wall seconds per call) with torch's
    profiler on the calling thread: it sees the ops inside TorchScript functions, at a cost
    (a grid's worth of records does not fit in memory; this is for a few forwards)."""
    from torch.profiler import ProfilerActivity, profile

    spent: defaultdict[str, float] = defaultdict(float)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        wall = time.perf_counter() - t0
    for event in prof.events() or ():
        kind = OPS.get(event.name)
        if kind is not None:
            spent[kind] += event.cpu_time_total / 1e6
    return {k: v / n for k, v in spent.items()}, wall / n
