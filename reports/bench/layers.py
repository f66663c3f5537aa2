"""Where a merged forward's time goes while 16 searches share the engine.

    python -m reports.bench.engine --targets --parts layers [--tiny-limit 32]

Runs the tiny grid (reports.bench.eval.tiny_arith) at concurrency 16 and keeps the arguments
of every `every`-th merged forward the lanes run (scripted.LAYERS: every layer of the lean
forward in one TorchScript call), the Passes' slabs by reference (their
layout, which the attention kernel's speed depends on, as the forward saw it). Once the grid
is done it replays them on one thread, each way timed by thread CPU time, the fewest of
`repeats` rounds:

- whole:        the layers as the forward runs them;
- no attention: every layer but its attention (norms, GEMMs, rotary, the new keys and values
                written, the MLP), the queries standing in for attention's output;
- attention:    the attention kernel's calls alone (search.runtime.kernel: one a layer for
                every Pass), on stand-in queries.

So attention's share of a merged forward is 1 - no attention / whole. The captured forwards'
shapes are printed with it: Passes per forward, rows and own columns per Pass.
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
        qk, k, v = scripted.PROJECT(x, f["cos"], f["sin"], f["norm1"][li], f["w"][li],
                                    f["b"][li], f["lone"][li], f["eps"], H, f["KV"], d)
        torch.ops.tts.write(k, v, li, f["rows"], f["q"], f["n"], f["slabs"])
        x = scripted.POST(qk[:, :H].reshape(x.shape[0], H * d), x, f["norm2"][li], f["eps"],
                          f["inter"], f["post_w"][li], f["post_b"][li], f["post_lone"][li])
    return x


def _attention(a: list[Any]) -> None:
    """The attention kernel's call of every layer, on zero queries of the forward's shape."""
    f = named(a)
    H, KV = f["H"], f["KV"]
    qk = torch.zeros(a[0].shape[0], H + KV, f["d"])
    for li in range(len(f["norm1"])):
        torch.ops.tts.attend(qk, H, KV, f["scale"], li, f["rows"], f["q"], f["n"], f["slabs"],
                             f["masks"], f["parts"], f["readers"], f["part_start"])


def replay(forwards: list[list[Any]], repeats: int = 3) -> dict[str, float]:
    """ms per forward of each way (see the module doc), the fewest of `repeats` rounds, on a
    thread of one intra-op thread (as a lane's)."""
    from search.runtime import scripted

    ways: dict[str, Callable[[list[Any]], Any]] = {
        "whole": lambda a: scripted.LAYERS(*a), "no attention": _without_attention,
        "attention": _attention}
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
