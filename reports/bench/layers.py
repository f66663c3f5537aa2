"""Where a merged forward's time goes while 16 searches share the engine.

    python -m reports.bench.engine --targets --parts layers [--tiny-limit 32]

Runs the tiny grid (reports.bench.eval.tiny_arith) at concurrency 16 and keeps the arguments
of every `every`-th merged forward the lanes run on one intra-op thread (scripted.LAYERS:
every layer of the lean forward in one TorchScript call), the Passes' slabs by reference (their
layout, which the attention kernel's speed depends on, as the forward saw it). Once the grid
is done it replays them on one thread, each way timed by thread CPU time, the fewest of
`repeats` rounds:

- whole:        the layers as the forward runs them;
- no attention: every layer's pre and post pieces alone (norms, GEMMs, rotary, the new keys
                and values written, the MLP), the queries standing in for attention's output;
- own columns:  each Pass's flash call over its rows' own columns, every layer, alone;
- parts:        each Pass's flash calls over the parts its rows read where they live
                (a part's readers' queries stacked).

So attention's share of a merged forward is 1 - no attention / whole, and the two flash rows
say how much of it the kernel itself takes (the rest: the per-Pass views and the log-sum-exp
merge). The captured forwards' shapes are printed with it: Passes per forward, rows and own
columns per Pass.
"""

from __future__ import annotations

import inspect
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


def named(a: list[Any]) -> dict[str, Any]:
    """A captured forward's arguments by scripted.layers' parameter names."""
    from search.runtime import scripted

    return dict(zip(inspect.signature(scripted.layers).parameters, a))


def capture(limit: int, every: int = 10, skip: int = 200, keep: int = 40) -> list[list[Any]]:
    """The arguments of merged forwards of the tiny grid at concurrency 16: every `every`-th
    scripted.LAYERS call after the first `skip` (the lanes warmed up), at most `keep`."""
    from reports.bench.eval import clocked_run, tiny_arith
    from search.runtime import scripted

    layers, seen, kept = scripted.LAYERS, [0], []
    lock = threading.Lock()

    def spy(*args: Any) -> Any:
        with lock:
            seen[0] += 1
            take = seen[0] > skip and seen[0] % every == 0 and len(kept) < keep
            if take:  # x, cos, sin change per forward: copies; weights and slabs by reference
                kept.append([a.clone() if i < 3 else a for i, a in enumerate(args)])
        return layers(*args)

    grid, setup = tiny_arith(limit)
    scripted.LAYERS = spy
    try:
        with tempfile.TemporaryDirectory() as tmp:
            clocked_run(grid, Path(tmp) / "rows.jsonl", 16, **setup)
    finally:
        scripted.LAYERS = layers
    return kept


def _without_attention(a: list[Any]) -> torch.Tensor:
    from search.runtime import scripted

    f = named(a)
    x, H, d = f["x"], f["H"], f["d"]
    for li in range(len(f["norm1"])):
        qk = scripted.PRE(x, f["cos"], f["sin"], f["norm1"][li], f["w"][li], f["b"][li],
                          f["lone"][li], f["eps"], H, f["KV"], d, f["rows"], f["q"], f["slabs"],
                          f["n"], li)
        x = scripted.POST(qk[:, :H].reshape(x.shape[0], H * d), x, f["norm2"][li], f["eps"],
                          f["inter"], f["post_w"][li], f["post_b"][li], f["post_lone"][li])
    return x


def _flash(a: list[Any], own: bool) -> None:
    """Each Pass's own-columns flash call (own) or its parts' calls, every layer, on queries
    shaped as the forward's (a group's heads and tokens stacked per row, or its readers')."""
    f = named(a)
    KV, d, scale, rows, q = f["KV"], f["d"], f["scale"], f["rows"], f["q"]
    g = f["H"] // KV
    queries = [torch.zeros(B, KV, g * t, d) for B, t in zip(rows, q)]  # [B, KV, g t, d]
    for li in range(len(f["norm1"])):
        for i, query in enumerate(queries):
            if own:
                seen = f["slabs"][i][li, :, :rows[i], :, :f["n"][i] + q[i]]
                FLASH(query, seen[0], seen[1], attn_mask=f["bias"][i], scale=scale)
                continue
            for kv, who in zip(f["parts"][i], f["readers"][i]):
                readers = query if who.numel() == 0 else query.index_select(0, who)
                FLASH(readers.transpose(0, 1).reshape(1, KV, -1, d), kv[li, 0][None],
                      kv[li, 1][None], scale=scale)


def replay(forwards: list[list[Any]], repeats: int = 3) -> dict[str, float]:
    """ms per forward of each way (see the module doc), the fewest of `repeats` rounds, on a
    thread of one intra-op thread (as a lane's)."""
    from search.runtime import scripted

    ways: dict[str, Callable[[list[Any]], Any]] = {
        "whole": lambda a: scripted.LAYERS(*a), "no attention": _without_attention,
        "own columns": lambda a: _flash(a, True), "parts": lambda a: _flash(a, False)}
    best = {name: float("inf") for name in ways}

    def run() -> None:
        torch.set_num_threads(1)
        with torch.inference_mode():
            for _ in range(repeats):
                for name, way in ways.items():
                    t0 = time.thread_time()
                    for a in forwards:
                        way(a)
                    best[name] = min(best[name], (time.thread_time() - t0) / len(forwards) * 1e3)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return best


def layers(limit: int) -> list[str]:
    forwards = capture(limit)
    if not forwards:
        return ["layers: the grid ran no merged forward on one thread to replay"]
    ms = replay(forwards)
    each = [named(a) for a in forwards]
    passes = [len(f["rows"]) for f in each]
    rows = [r for f in each for r in f["rows"]]
    cols = [n + t for f in each for n, t in zip(f["n"], f["q"])]
    share = 1 - ms["no attention"] / ms["whole"]
    return [f"merged forwards at concurrency 16 ({len(forwards)} replayed, one thread): "
            f"{statistics.mean(passes):.1f} Passes a forward, {statistics.mean(rows):.1f} rows "
            f"and {statistics.mean(cols):.1f} own columns a Pass; ms a forward: " + ", ".join(
                f"{name} {v:.2f}" for name, v in ms.items()) + f"; attention {share:.0%} of "
            "the layers"]
