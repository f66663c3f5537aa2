"""The CPU's attention for a merged forward: one call a layer for every Pass, read in place.

`torch.ops.tts.attend` (attend.cpp) computes, for every query token of every Pass of a
forward, attention over its row's path where it lives (the blocks of its block table in the
KV pool's chunks: search.runtime.kvpool) and over its own columns under its mask (in its
row's own pool blocks: search.runtime.paged), in one pass per (token, head):
scores, their max, exp, sum and the weighted values. Nothing is stacked, copied or merged by
log-sum-exp, no call is made per Pass, and each token's bits depend on its own inputs alone
(not on the rows beside it nor on the thread count), which is what lets the scheduler merge
many searches' Passes into one forward (c16 rows == c1 rows) while the rows split across
threads. The idea of FlashInfer's and vLLM's paged decode kernels, for a CPU without them.
A grouped-query model's keys and values are read once for the query heads that share them
(their bits those each head gets alone).
Its sibling `torch.ops.tts.write` puts every Pass's new keys and values into its rows' own
blocks of the pool (own-block tables), one call a layer for the whole forward (a copy of
each token's columns, nothing computed). A batch cache whose rows are in a slab (transformers'
layout, kv.SlabCache) is not the kernel's: the lean forward attends it per Pass.

It is C++ built on first use by torch.utils.cpp_extension (about 20 s once, then cached in
torch's extensions folder, TORCH_EXTENSIONS_DIR). Where it cannot be built (no compiler,
ninja or headers) or `TTS_ATTEND_KERNEL=0`, `serves` says no, a warning says why, and the
lean forward runs each Pass alone through attention.tree_attend instead: the same
results to rounding, slower, and Passes of several calls no longer merge on the CPU.
"""

from __future__ import annotations

import os
import shutil
import sysconfig
import threading
import warnings
from pathlib import Path

import torch

ATTEND = ("attend(Tensor qk, int H, int KV, float scale, int li, int[] rows, int[] q, int[] n, "
          "Tensor[] masks, Tensor[] pool, Tensor[] tables, Tensor[] owns) -> Tensor")
WRITE = ("write(Tensor k, Tensor v, int li, int[] rows, int[] q, int[] n, Tensor(a!)[] pool, "
         "Tensor[] owns) -> ()")
_LIB = torch.library.Library("tts", "DEF")  # the schemas always (TorchScript resolves them)
_LIB.define(ATTEND)
_LIB.define(WRITE)
SOURCE = Path(__file__).with_name("attend.cpp")
_lock = threading.Lock()
_built: list[bool] = []  # [whether it loaded], once tried


def flags() -> list[str]:
    """-O3, and the AVX2 build of ATen's vector types where this CPU runs torch's AVX2 code."""
    if torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512"):
        return ["-O3", "-mavx2", "-mfma", "-mf16c", "-DCPU_CAPABILITY_AVX2",
                "-DCPU_CAPABILITY=AVX2"]
    return ["-O3"]


def _build() -> bool:
    if os.environ.get("TTS_ATTEND_KERNEL", "1") == "0":
        return False
    from torch.utils import cpp_extension

    scripts = sysconfig.get_path("scripts")  # pip's ninja, where the venv is not on PATH
    if shutil.which("ninja") is None and shutil.which("ninja", path=scripts):
        os.environ["PATH"] = scripts + os.pathsep + os.environ.get("PATH", "")
    try:
        cpp_extension.load("tts_attend", [str(SOURCE)], extra_cflags=flags(),
                           is_python_module=False, verbose=False)
        return True
    except Exception as err:  # noqa: BLE001 (no compiler or ninja: the per-Pass fallback)
        warnings.warn(f"the CPU attention kernel could not be built ({type(err).__name__}: "
                      f"{str(err)[-300:]}); each Pass attends alone (attention.tree_attend), "
                      "slower, and searches' Passes do not merge on the CPU",
                      RuntimeWarning, stacklevel=3)
        return False


def available() -> bool:
    """Whether torch.ops.tts.attend runs here (built, or loaded from the cache, on first ask)."""
    if not _built:
        with _lock:
            if not _built:
                _built.append(_build())
    return _built[0]


def serves(x: torch.Tensor) -> bool:
    """Whether the kernel runs attention for a forward whose residual stream is x."""
    return x.device.type == "cpu" and x.dtype == torch.float32 and available()


if __name__ == "__main__":  # `python -m search.runtime.kernel`: build it now (make setup does)
    print("CPU attention kernel:", "built" if available() else "not built (see the warning)")
