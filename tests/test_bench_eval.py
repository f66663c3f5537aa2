"""reports/bench/eval.py's kernel clock: it times the forward's kernels by kind while its block
runs (the lean forward's TorchScript pieces whole), puts every entry point back after, and the
split it prints adds up (hand-computed)."""

from __future__ import annotations

import importlib
import threading
import time
from collections import Counter

import pytest
import torch
import torch.nn.functional as F

from reports.bench.eval import (
    BUSY,
    KERNELS,
    PIECES,
    ceiling,
    inside,
    kernel_clock,
    where_time_goes,
)
from search.runtime import scripted


def entry_points() -> list[object]:
    return [getattr(importlib.import_module(module), name, None) for _, module, name in KERNELS]


def test_clock_times_each_kind_and_restores_the_entry_points() -> None:
    before = entry_points()
    x = torch.randn(64, 32)
    with kernel_clock() as spent:
        assert entry_points() != before  # wrapped for the block
        for _ in range(50):
            torch.rms_norm(x, (32,), torch.ones(32), 1e-5)
        t0 = time.perf_counter()
        F.scaled_dot_product_attention(torch.randn(2, 4, 8, 16), torch.randn(2, 4, 8, 16),
                                       torch.randn(2, 4, 8, 16))
        wall = time.perf_counter() - t0
    assert entry_points() == before  # and put back
    assert spent["norms, rotary, SiLU"] > 0
    assert 0 < spent["attention"] <= wall
    assert spent["GEMMs"] == 0 and spent[PIECES] == 0  # nothing packed ran, no piece


def test_clock_times_the_scripted_pieces_whole() -> None:
    """A lean forward's layers run as TorchScript pieces, timed whole (no wrapper sees the
    kernels inside them); its LM head's GEMM and final norm are Python's calls, timed alone."""
    from helpers import tiny_llama

    from search.runtime import attention, packed
    from search.runtime.kv import KVLayout
    from search.runtime.kvpool import Pool, Segment
    from search.runtime.lean import LeanLlama
    from search.runtime.paged import PagedCache

    assert scripted.SCRIPTED
    model, _ = tiny_llama()
    attention.use_sdpa_gqa(model)
    packed.pack_linears(model)
    fast = LeanLlama(model)
    lay = KVLayout.of(model, torch.device("cpu"))
    shape = (lay.layers, 2, lay.kv_heads)
    pool = Pool(lay.layers, lay.kv_heads, lay.head_dim, lay.dtype, lay.device)
    # a prompt of 7 columns in 3 rows of 5, 2 and 4 columns more, in the pool's blocks
    prompt, *steps = [b for n in (7, 5, 2, 4)
                      if (b := Segment.of(torch.randn(*shape, n, lay.head_dim), pool).blocks)]
    cache = PagedCache([prompt.table(7) + b.table(b.n) for b in steps], 1, lay, pool,
                       [prompt, *steps])
    assert cache.rows == 3
    ids, pos = torch.zeros(3, 1, dtype=torch.long), torch.tensor([[12], [9], [11]])
    with kernel_clock() as spent:
        fast.forward_slab(ids, pos, cache, cache.attention_mask(1), 1, False)
    assert spent[PIECES] > 0 and spent["GEMMs"] > 0 and spent["norms, rotary, SiLU"] > 0
    assert spent["attention"] == 0  # all of it inside the attention piece


def test_clock_restores_after_an_error() -> None:
    before = entry_points()
    with pytest.raises(ValueError), kernel_clock():
        raise ValueError("boom")
    assert entry_points() == before


def test_where_time_goes_adds_up() -> None:
    k1 = Counter({"GEMMs": 4.0, "attention": 2.0, "norms, rotary, SiLU": 1.0})
    kn = Counter({"GEMMs": 1.0, "attention": 1.5, "norms, rotary, SiLU": 0.5})
    text = where_time_goes(12.0, k1, 6.0, kn, 16)
    # concurrency 1: 12 - 7 = 5 s of rest; concurrency 16: 6 - 3 = 3 s; 12 / 3 = 4x at most
    assert ("concurrency 1: GEMMs 4.0, attention 2.0, norms, rotary, SiLU 1.0, layer pieces in "
            "TorchScript 0.0; inside any 7.0, the rest 5.0") in text
    assert ("concurrency 16: GEMMs 1.0, attention 1.5, norms, rotary, SiLU 0.5, layer pieces in "
            "TorchScript 0.0; inside any 3.0, the rest 3.0") in text
    assert "would take 3.0 s: at most 4.00x concurrency 1's 12.0 s" in text
    assert "4x needs the rest within 0.0 s" in text
    assert "4x needs" not in where_time_goes(12.0, k1, 6.0, Counter({"GEMMs": 4.0}), 16)
    assert "no time seen" in where_time_goes(12.0, k1, 6.0, Counter(), 16)
    # two lanes' kernels overlapping: 5.0 s by kind, inside any for 4.0 of a 5.5 s wall
    lanes = Counter({"GEMMs": 2.0, PIECES: 3.0, BUSY: 4.0})
    assert "TorchScript 3.0; inside any 4.0, the rest 1.5" in where_time_goes(12.0, k1, 5.5,
                                                                               lanes, 16)


def test_the_clock_counts_overlapping_kernels_once(monkeypatch) -> None:
    """Kernels that run at once on two threads (two lanes) count in full by kind, and once in
    BUSY, the wall with at least one running: here two calls held together by a barrier."""
    from search.runtime import packed

    both = threading.Barrier(2)

    def gemm(*args, **kwargs):
        both.wait()  # the two calls are inside at once from here
        time.sleep(0.2)

    monkeypatch.setattr(packed, "_gemm", gemm)
    with kernel_clock() as spent:
        threads = [threading.Thread(target=lambda: vars(packed)["_gemm"]()) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert spent["GEMMs"] >= 0.4
    assert 0.2 <= spent[BUSY] < 0.75 * spent["GEMMs"]
    assert inside(spent) == spent[BUSY]
    assert inside(Counter({"GEMMs": 1.0, PIECES: 2.0})) == 3.0  # one thread's: the sum


def test_ceiling_says_what_a_cut_outside_the_kernels_can_save():
    """90 s with 60 inside the kernels: at most 30 / 90 = 33.3% faster, and a third faster
    needs all 30 s cut; 100 s with 50 inside: 50% at most, a third needs 33.3 / 50 = 67%;
    63 of 90 inside: a third (30 s) is more than the 27 s outside."""
    assert ceiling(90, 60) == ("inside the forward's kernels 60.0 s of 90.0 s (66.7%): with "
                               "nothing outside them at most 33.3% faster; 33% faster needs "
                               "100% of the 30.0 s outside them cut")
    assert ceiling(100, 50).endswith("at most 50.0% faster; 33% faster needs 67% of the 50.0 s "
                                     "outside them cut")
    assert ceiling(90, 63).endswith("at most 30.0% faster; 33% faster is out of reach by cuts "
                                    "outside them (27.0 s)")


@pytest.mark.slow
def test_the_workers_part_runs_the_tiny_grid_here_and_on_workers(tmp_path, capsys):
    """bench.eval's workers part: one problem of the tiny grid at concurrency 2 in this
    process and on two worker processes; the rows are the same and both walls are printed."""
    from reports.bench.eval import on_workers

    out = on_workers(1, 2, 2, tmp_path)
    assert out["identical"] is True and out["here"] > 0 and out["workers"] > 0
    assert out["ratio"] == out["here"] / out["workers"]
    printed = capsys.readouterr().out
    assert "on 2 worker processes" in printed and "rows identical" in printed
