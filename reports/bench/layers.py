"""Where a merged forward's time goes while 16 searches share the engine.

    python -m reports.bench.engine --targets --parts layers [--tiny-limit 32]

Runs the tiny grid (reports.bench.eval.tiny_arith) at concurrency 16 and keeps the arguments
of every `every`-th merged forward the lanes run (scripted.LAYERS: every layer of the lean
forward in one TorchScript call), the pool blocks they read copied into a pool of their
own (their layout, which the attention kernel's speed depends on, as the forward saw it).
Once the grid is done it replays them on one thread, each way timed by thread CPU time, the
fewest of `repeats` rounds:

- whole:        the layers as the forward runs them;
- no attention: every layer but its attention (norms, GEMMs, rotary, the new keys and values
                written, the MLP), the queries standing in for attention's output;
- attention:    the attention kernel's calls alone (search.runtime.kernel: one a layer for
                every Pass), on stand-in queries.

So attention's share of a merged forward is 1 - no attention / whole. The captured forwards'
shapes are printed with it: Passes per forward, rows and own columns per Pass.

The rows read their paths in the KV pool's blocks through block tables (search.runtime.kvpool),
their own columns in blocks of their own (search.runtime.paged).

With `--old PATH` (a checkout of another commit) the attention calls also run on that
checkout's kernel (its attend.cpp built beside this one, `old_attend`; a kernel without
own blocks given the blocks as parts, `as_parts`: each block a part read by the slots whose
tables hold it, and each row's own blocks copied into a slab: the same columns in the same
order), side by side in the same rounds, its outputs compared with this kernel's bit for bit.
"""

from __future__ import annotations

import hashlib
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
            at = len(kept)
            if take:
                kept.append([])
        # x, cos, sin change per forward: copies; weights by reference; the pool's blocks it
        # reads and writes copied once it wrote them (a replay writes them: private)
        given = [a.clone() if i < 3 else a for i, a in enumerate(args)] if take else []
        out = layers(*args)
        if take:
            kept[at] = private(given)
        return out

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
        torch.ops.tts.write(k, v, li, f["rows"], f["q"], f["n"], f["pool"], f["owns"])
        x = scripted.POST(qk[:, :H].reshape(x.shape[0], H * d), x, f["norm2"][li], f["eps"],
                          f["inter"], f["post_w"][li], f["post_b"][li], f["post_lone"][li])
    return x


def schema(op: Any) -> list[str]:
    """An attend op's argument names after qk, H, KV, scale and li."""
    return [arg.name for arg in op.default._schema.arguments][5:]


def inputs_for(a: list[Any], op: Any) -> dict[str, Any]:
    """A captured forward's arguments by name, in the form an attend op takes: this
    kernel's as they are; an old one's that takes own blocks beside slabs with empty parts
    and slabs of no columns ([L, 2, rows, KV, 0, d] of the pool's dtype, as its engine
    passed), else with the blocks as parts (as_parts)."""
    f = named(a)
    c = f["pool"][0]  # [C, L, 2, KV, BLOCK, d]
    f |= {"parts": [], "readers": [], "part_start": [0] * (len(f["rows"]) + 1),
          "slabs": [c.new_empty(c.shape[1], 2, B, c.shape[3], 0, c.shape[5])
                    for B in f["rows"]]}
    return f if "owns" in schema(op) else as_parts(f)


def _attend(a: list[Any] | dict[str, Any], qk: torch.Tensor | None = None, op: Any = None
            ) -> list[torch.Tensor]:
    """The attention kernel's call of every layer of a captured forward (or its inputs_for
    an op), on queries qk [N, H + KV, d] (None: zeros of the forward's shape) -> each
    layer's output. op: another build of the kernel (old_attend; None: this checkout's)."""
    op = torch.ops.tts.attend if op is None else op
    f = a if isinstance(a, dict) else inputs_for(a, op)
    H, KV = f["H"], f["KV"]
    qk = torch.zeros(f["x"].shape[0], H + KV, f["d"]) if qk is None else qk
    return [op(qk, H, KV, f["scale"], li, **{k: f[k] for k in schema(op)})
            for li in range(len(f["norm1"]))]


_OLD: list[torch.library.Library] = []  # the namespace of old kernels' schemas, once


# the ops' schemas of older checkouts' attend.cpp: before a pool (UNPAGED), with block tables
# but no own blocks (TABLES), with own blocks beside slabs (OWNED)
UNPAGED = ("attend(Tensor qk, int H, int KV, float scale, int li, int[] rows, int[] q, int[] n, "
           "Tensor[] slabs, Tensor[] masks, Tensor[] parts, Tensor[] readers, int[] part_start)"
           " -> Tensor")
TABLES = UNPAGED.replace(") -> Tensor", ", Tensor[] pool, Tensor[] tables) -> Tensor")
UNPAGED_WRITE = ("write(Tensor k, Tensor v, int li, int[] rows, int[] q, int[] n, "
                 "Tensor(a!)[] slabs) -> ()")
OWNED = ("attend(Tensor qk, int H, int KV, float scale, int li, int[] rows, int[] q, int[] n, "
         "Tensor[] slabs, Tensor[] masks, Tensor[] pool, Tensor[] tables, Tensor[] owns) "
         "-> Tensor")
OWNED_WRITE = ("write(Tensor k, Tensor v, int li, int[] rows, int[] q, int[] n, "
               "Tensor(a!)[] slabs, Tensor(b!)[] pool, Tensor[] owns) -> ()")


def old_attend(source: Path) -> Any:
    """The attend op of another checkout's attend.cpp (`source`), built with this machine's
    flags and registered under the namespace tts_old (a later call's build replaces an earlier
    one's there; the namespace's schema is the first source's)."""
    from torch.utils import cpp_extension

    from search.runtime import kernel

    text = source.read_text(encoding="utf-8").replace("TORCH_LIBRARY_IMPL(tts,",
                                                      "TORCH_LIBRARY_IMPL(tts_old,")
    name = f"tts_old_{hashlib.sha1(text.encode()).hexdigest()[:12]}"
    path = Path(tempfile.gettempdir()) / f"{name}.cpp"
    path.write_text(text, encoding="utf-8")
    if not _OLD:
        _OLD.append(torch.library.Library("tts_old", "DEF"))
        if "TensorList owns" not in text:
            ops = TABLES if "TensorList tables" in text else UNPAGED, UNPAGED_WRITE
        elif "TensorList slabs" in text:
            ops = OWNED, OWNED_WRITE
        else:
            ops = kernel.ATTEND, kernel.WRITE
        for op in ops:
            _OLD[0].define(op)
    cpp_extension.load(name, [str(path)], extra_cflags=kernel.flags(), is_python_module=False,
                       verbose=False)
    return torch.ops.tts_old.attend


def private(a: list[Any]) -> list[Any]:
    """A captured forward's arguments with the pool blocks it reads and writes copied into a
    pool of its own (one chunk; the tables renumbered), so that replaying it writes nothing
    the engine holds."""
    f = named(a)
    if not f["pool"]:
        return a
    chunks, C = f["pool"], f["pool"][0].shape[0]
    used = sorted({g for t in f["tables"] for g in t[..., 0].flatten().tolist() if g >= 0} |
                  {g for t in f["owns"] for g in t.flatten().tolist()})
    new = {g: i for i, g in enumerate(used)}
    pool = torch.stack([chunks[g // C][g % C] for g in used]) if used else chunks[0][:1].clone()
    renumber = torch.tensor([new.get(g, -1) for g in range(len(chunks) * C)] + [-1])
    names, out = list(f), list(a)
    out[names.index("pool")] = [pool]
    out[names.index("tables")] = [torch.stack([renumber[t[..., 0]], t[..., 1]], -1)
                                  for t in f["tables"]]
    out[names.index("owns")] = [renumber[t] for t in f["owns"]]
    return out


def as_parts(f: dict[str, Any]) -> dict[str, Any]:
    """A captured forward's arguments by name with its block tables handed over as parts (see
    the module doc): each block's filled columns a part, read by the slots whose tables hold
    it (in the order first met, which keeps each slot's blocks in its table's order: rows
    share a path's first blocks), and each row's own blocks copied into a slab."""
    if not f["tables"]:
        return f
    chunks = f["pool"]
    C = chunks[0].shape[0] if chunks else 1
    parts: list[torch.Tensor] = []
    readers: list[torch.Tensor] = []
    start = [0]
    for rows, table in zip(f["rows"], f["tables"]):
        slots: dict[tuple[int, int], list[int]] = {}
        for b, row in enumerate(table.tolist()):
            for g, fill in row:
                if g < 0:
                    break
                slots.setdefault((g, fill), []).append(b)
        for (g, fill), who in slots.items():
            parts.append(chunks[g // C][g % C, :, :, :, :fill])
            readers.append(torch.tensor(who if len(who) < rows else [], dtype=torch.long))
        start.append(len(parts))
    slabs = [torch.stack([torch.cat([chunks[g // C][g % C] for g in row], dim=3)
                          for row in o.tolist()], dim=2) for o in f["owns"]]
    return f | {"parts": parts, "readers": readers, "part_start": start, "slabs": slabs,
                "pool": [], "tables": [], "owns": []}


def qk(a: list[Any]) -> torch.Tensor:
    """Seeded stand-in queries [N, H + KV, d] for a captured forward's attention."""
    f = named(a)
    return torch.randn(a[0].shape[0], f["H"] + f["KV"], f["d"],
                       generator=torch.Generator().manual_seed(1))


def replay(forwards: list[list[Any]], repeats: int = 3, old: Any = None) -> dict[str, float]:
    """ms per forward of each way (see the module doc), the fewest of `repeats` rounds, on a
    thread of one intra-op thread (as a lane's); old: another build's attend op
    (old_attend), timed as the way "attention, old kernel"."""
    from search.runtime import scripted

    ways: dict[str, Callable[[Any], Any]] = {
        "whole": lambda a: scripted.LAYERS(*a), "no attention": _without_attention,
        "attention": _attend}
    inputs: dict[str, list[Any]] = {name: forwards for name in ways}
    if old is not None:  # (its inputs converted once, not timed)
        ways["attention, old kernel"] = lambda f: _attend(f, None, old)
        inputs["attention, old kernel"] = [inputs_for(a, old) for a in forwards]
    best = {name: float("inf") for name in inputs}

    def run() -> None:
        torch.set_num_threads(1)
        with torch.inference_mode():
            for _ in range(repeats):
                for name, given in inputs.items():
                    way = ways[name]
                    t0 = time.thread_time()
                    for a in given:
                        way(a)
                    best[name] = min(best[name], (time.thread_time() - t0) / len(given) * 1e3)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return best


# grouped-query heads (H query heads, KV key/value heads, head dim d) of released models
GROUPS = ((9, 3, 64, "SmolLM2-135M"), (14, 2, 64, "Qwen2.5-0.5B"), (32, 8, 64, "Llama-3.2-1B"))


def decode_call(H: int, KV: int, d: int, seed: int = 0) -> tuple[torch.Tensor, list[Any]]:
    """A decode forward's attention call for one layer: 4 Passes of 16 rows, one token a row,
    each row reading through its block table a 256-column prompt every row of its Pass
    shares and 128 columns of its own, in a KV pool's blocks, then its 8 own columns (a
    block of its own) -> (qk, the kernel's other arguments after scale and layer)."""
    from search.runtime.kvpool import BLOCK, tables

    gen = torch.Generator().manual_seed(seed)
    rows, own, shared, mine = 16, 8, 256 // BLOCK, 128 // BLOCK
    pool = torch.randn(4 * (shared + rows * mine + rows), 1, 2, KV, BLOCK, d, generator=gen)
    tabs, g = [], 0
    for _ in range(4):
        prompt = [(g + j, BLOCK) for j in range(shared)]
        g += shared
        tabs.append(tables([prompt + [(g + b * mine + j, BLOCK) for j in range(mine)]
                            for b in range(rows)]))
        g += rows * mine
    owns = [torch.arange(g + i * rows, g + (i + 1) * rows).view(rows, 1) for i in range(4)]
    masks = [torch.ones(rows, 1, 1, own + 1, dtype=torch.bool)] * 4
    return (torch.randn(4 * rows, H + KV, d, generator=gen),
            [[rows] * 4, [1] * 4, [own] * 4, masks, [pool], tabs, owns])


def own_copies(qk: torch.Tensor, H: int, KV: int, args: list[Any]
               ) -> tuple[torch.Tensor, list[Any]]:
    """The same call with each query head given its own copy of its group's keys and values
    (KV = H): a model without grouped queries at these head counts."""
    g = H // KV
    rows, q, n, masks, pool, tabs, owns = args
    return (torch.cat([qk[:, :H], qk[:, H:].repeat_interleave(g, 1)], 1),
            [rows, q, n, masks, [c.repeat_interleave(g, 3) for c in pool], tabs, owns])


def attend(qk: torch.Tensor, H: int, KV: int, args: list[Any]) -> torch.Tensor:
    return torch.ops.tts.attend(qk, H, KV, 0.125, 0, *args)


def groups(repeats: int = 5, calls: int = 10) -> list[str]:
    """Grouped-query attention: the kernel's call (a group's keys and values read once for
    its query heads) against the same call with a copy of them per query head, side by side
    on one thread (the fewest ms of `repeats` rounds), and whether their bits agree."""
    from search.runtime import kernel

    if not kernel.available():
        return ["grouped-query attention: the CPU attention kernel is not built here"]
    best: dict[tuple[str, str], float] = {}
    same = []

    def run() -> None:
        torch.set_num_threads(1)
        for H, KV, d, name in GROUPS:
            qk, args = decode_call(H, KV, d)
            own_qk, own = own_copies(qk, H, KV, args)
            ways = {"grouped": (qk, H, KV, args), "own copies": (own_qk, H, H, own)}
            outs = [attend(*a) for a in ways.values()]
            same.append(torch.equal(*outs))
            for _ in range(repeats):
                for way, a in ways.items():
                    t0 = time.thread_time()
                    for _ in range(calls):
                        attend(*a)
                    ms = (time.thread_time() - t0) / calls * 1e3
                    best[name, way] = min(best.get((name, way), ms), ms)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return ["grouped-query attention, a decode call (4 Passes x 16 rows, 256 shared + 128 + 8 "
            "columns a row, the first in pool blocks), keys and values read once a group "
            "against a copy per query head: " +
            "; ".join(f"{name} ({H}/{KV} heads, d {d}) {best[name, 'grouped']:.2f} ms against "
                      f"{best[name, 'own copies']:.2f} "
                      f"({best[name, 'own copies'] / best[name, 'grouped']:.2f}x)"
                      for H, KV, d, name in GROUPS) + f"; bits the same: {all(same)}"]


def layers(limit: int, old: Path | None = None) -> list[str]:
    """The replay's line; old: a checkout whose kernel is timed beside this one's."""
    forwards = capture(limit)
    if not forwards:
        return ["layers: the grid ran no merged forward on one thread to replay"]
    op = None if old is None else old_attend(old / "search" / "runtime" / "attend.cpp")
    ms = replay(forwards, old=op)
    each = [named(a) for a in forwards]
    passes = [len(f["rows"]) for f in each]
    rows = [r for f in each for r in f["rows"]]
    cols = [n + t for f in each for n, t in zip(f["n"], f["q"])]
    share = 1 - ms["no attention"] / ms["whole"]
    return [f"merged forwards at concurrency 16 ({len(forwards)} replayed, one thread): "
            f"{statistics.mean(passes):.1f} Passes a forward, {statistics.mean(rows):.1f} rows "
            f"and {statistics.mean(cols):.1f} own columns a Pass; ms a forward: " + ", ".join(
                f"{name} {v:.2f}" for name, v in ms.items()) + f"; attention {share:.0%} of "
            "the layers"] + ([] if old is None else [against_old(forwards, op, ms, old.name)])


def against_old(forwards: list[list[Any]], op: Any, ms: dict[str, float], name: str) -> str:
    """The line of the old kernel's attention beside this one's (replay's times), bits
    compared on seeded queries."""
    with torch.inference_mode():
        same = all(all(map(torch.equal, _attend(a, q), _attend(a, q, op)))
                   for a in forwards for q in [qk(a)])
    return (f"attention kernel against {name}'s, side by side: {ms['attention']:.2f} ms a "
            f"forward against {ms['attention, old kernel']:.2f} "
            f"({ms['attention, old kernel'] / ms['attention']:.2f}x), bits the same: {same}")
