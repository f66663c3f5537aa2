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

And what a KV pool of fixed-size blocks would cost the kernel's reads: the attention calls
again with every path part cut into blocks of BLOCK columns, each copied into a pool (one
tensor [blocks, L, 2, KV, BLOCK, d], a block's unused columns left empty), the blocks in
the order the parts are first read (`pooled`) or scattered in a seeded random order
(`scattered`, a pool after much freeing and reuse); the kernel's output is checked equal,
bit for bit, to the segments' (a block is a part: the columns in the same order).
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
                                    f["b"][li], f["lone"][li], f["qkn"][li], f["eps"], H,
                                    f["KV"], d)
        torch.ops.tts.write(k, v, li, f["rows"], f["q"], f["n"], f["slabs"])
        x = scripted.POST(qk[:, :H].reshape(x.shape[0], H * d), x, f["norm2"][li], f["eps"],
                          f["inter"], f["post_w"][li], f["post_b"][li], f["post_lone"][li])
    return x


def _attend(a: list[Any], qk: torch.Tensor | None = None) -> list[torch.Tensor]:
    """The attention kernel's call of every layer of a captured forward, on queries qk
    [N, H + KV, d] (None: zeros of the forward's shape) -> each layer's output."""
    f = named(a)
    H, KV = f["H"], f["KV"]
    qk = torch.zeros(a[0].shape[0], H + KV, f["d"]) if qk is None else qk
    return [torch.ops.tts.attend(qk, H, KV, f["scale"], li, f["rows"], f["q"], f["n"],
                                 f["slabs"], f["masks"], f["parts"], f["readers"],
                                 f["part_start"])
            for li in range(len(f["norm1"]))]


BLOCK = 16  # columns a block (vLLM's default block size)


def pooled(a: list[Any], scatter: bool) -> list[Any]:
    """The captured forward's arguments with its parts cut into BLOCK-column blocks of one
    pool (see the module doc): each distinct part copied once, its blocks in first-read order
    or, scattered, in a seeded random order."""
    f = named(a)
    parts, readers, start = f["parts"], f["readers"], f["part_start"]
    if not parts:
        return a
    key = [(kv.data_ptr(), kv.shape[3]) for kv in parts]
    first: dict[tuple[int, int], int] = {}  # a distinct part -> where it is first read
    for j, k in enumerate(key):
        first.setdefault(k, j)
    pieces = [(k, s) for k, j in first.items() for s in range(0, parts[j].shape[3], BLOCK)]
    L, two, KV, _, d = parts[0].shape
    pool = parts[0].new_empty(len(pieces), L, two, KV, BLOCK, d)
    order = torch.randperm(len(pieces), generator=torch.Generator().manual_seed(0)).tolist() \
        if scatter else range(len(pieces))
    blocks: dict[tuple[tuple[int, int], int], torch.Tensor] = {}
    for at, (k, s) in zip(order, pieces):
        c = min(BLOCK, parts[first[k]].shape[3] - s)
        pool[at, :, :, :, :c].copy_(parts[first[k]][:, :, :, s:s + c])
        blocks[k, s] = pool[at, :, :, :, :c]
    cut = [[(blocks[key[j], s], readers[j]) for s in range(0, parts[j].shape[3], BLOCK)]
           for j in range(len(parts))]
    per_pass = [[b for j in range(start[i], start[i + 1]) for b in cut[j]]
                for i in range(len(start) - 1)]
    names = list(named(a))
    out = list(a)
    out[names.index("parts")] = [kv for bs in per_pass for kv, _ in bs]
    out[names.index("readers")] = [r for bs in per_pass for _, r in bs]
    out[names.index("part_start")] = [sum(map(len, per_pass[:i])) for i in range(len(per_pass) + 1)]
    return out


def _same_attention(a: list[Any], b: list[Any]) -> bool:
    """Whether the kernel's outputs on two forms of one forward are equal, every layer."""
    f = named(a)
    qk = torch.randn(a[0].shape[0], f["H"] + f["KV"], f["d"],
                     generator=torch.Generator().manual_seed(1))
    return all(map(torch.equal, _attend(a, qk), _attend(b, qk)))


def in_blocks(forwards: list[list[Any]]) -> dict[str, list[list[Any]]]:
    """The captured forwards with their parts in pool blocks (pooled), by way name."""
    return {f"attention, pooled in blocks of {BLOCK}": [pooled(a, False) for a in forwards],
            f"attention, scattered blocks of {BLOCK}": [pooled(a, True) for a in forwards]}


def replay(forwards: list[list[Any]], repeats: int = 3,
           blocks: dict[str, list[list[Any]]] | None = None) -> dict[str, float]:
    """ms per forward of each way (see the module doc), the fewest of `repeats` rounds, on a
    thread of one intra-op thread (as a lane's); blocks: in_blocks(forwards), if made."""
    from search.runtime import scripted

    blocks = in_blocks(forwards) if blocks is None else blocks
    ways: dict[str, Callable[[list[Any]], Any]] = {
        "whole": lambda a: scripted.LAYERS(*a), "no attention": _without_attention,
        "attention": _attend}
    inputs = {name: forwards for name in ways} | blocks
    best = {name: float("inf") for name in inputs}

    def run() -> None:
        torch.set_num_threads(1)
        with torch.inference_mode():
            for _ in range(repeats):
                for name, given in inputs.items():
                    way = ways.get(name, _attend)
                    t0 = time.thread_time()
                    for a in given:
                        way(a)
                    best[name] = min(best[name], (time.thread_time() - t0) / len(given) * 1e3)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return best


def layers(limit: int) -> list[str]:
    forwards = capture(limit)
    if not forwards:
        return ["layers: the grid ran no merged forward on one thread to replay"]
    blocks = in_blocks(forwards)
    # (checked before the replay: replaying "whole" writes its keys and values again into
    # slabs that later forwards read as parts, so the pool's copies would be of older bits)
    same = all(_same_attention(a, b) for form in blocks.values() for a, b in zip(forwards, form))
    ms = replay(forwards, blocks=blocks)
    each = [named(a) for a in forwards]
    passes = [len(f["rows"]) for f in each]
    rows = [r for f in each for r in f["rows"]]
    cols = [n + t for f in each for n, t in zip(f["n"], f["q"])]
    share = 1 - ms["no attention"] / ms["whole"]
    return [f"merged forwards at concurrency 16 ({len(forwards)} replayed, one thread): "
            f"{statistics.mean(passes):.1f} Passes a forward, {statistics.mean(rows):.1f} rows "
            f"and {statistics.mean(cols):.1f} own columns a Pass; ms a forward: " + ", ".join(
                f"{name} {v:.2f}" for name, v in ms.items()) + f"; attention {share:.0%} of "
            f"the layers; in blocks: {ms[f'attention, pooled in blocks of {BLOCK}'] / ms['attention']:.2f}x "
            f"(pooled), {ms[f'attention, scattered blocks of {BLOCK}'] / ms['attention']:.2f}x "
            f"(scattered) the segments' attention, its output bit for bit the same: {same}"]
