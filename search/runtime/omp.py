"""One OpenMP thread team at a time: what keeps a scheduler's lane threads at full speed;
and the thread settings that hold up on a busy machine.

Threads on a shared machine: `import search` sets OMP_WAIT_POLICY=PASSIVE unless the
environment says otherwise (it must be set before torch loads its OpenMP runtime): libgomp's
default "active" policy spins each idle worker for a while before it sleeps, and a worker
whose core a neighbour holds keeps every parallel region waiting (reports/bench/threads.py
measures it). The passive policy keeps torch's thread count, so every result
stays bit for bit what it was (where a kernel splits a sum by the thread count, one thread
and two give different samples of the same solve: transformers' own forward on MKL's
linears does; the lean forward does not, since its attention runs on one thread and its
packed GEMMs split rows, not sums: tests/test_lean.py), which is why the default does not
pick its threads from the cores free at start. `use_threads(n)` (--threads) sets the count.

torch's CPU kernels run their parallel regions on OpenMP (GNU libgomp in the Linux wheels).
Every thread that starts a parallel region gets its own pool of worker threads, which stays
after the region ends. While the pools hold more threads than the machine has cores, libgomp
has idle workers sleep almost at once instead of spinning (its "throttled" spin count), so
every later region pays for waking them: a small GEMM in a second thread, once the first
has a pool, costs about twice what it costs in the only thread that runs torch ops.

search.solve_many's model calls run in the engine's scheduler's lanes (search.runtime.sched),
while the thread that loaded the models (usually the main one) already has a pool. So when
serving starts, the caller's pool is released (`release_pool` in that thread); when serving
ends, each lane releases its own, and the caller's next parallel region builds a fresh one.
Releasing is OpenMP 5.0's omp_pause_resource_all (a thread's idle pool threads are joined;
nothing else changes: the same number of threads run the same partitions of every kernel, so
no result changes). Only GNU libgomp is released (its pause is per thread); with another
runtime, or where torch's cannot be found (no /proc) or refuses (called inside a parallel
region), nothing happens: the only cost is speed.

A thread's intra-op count is its own (OpenMP's and MKL's per-thread settings), but
`torch.set_num_threads` also sets the default that threads started later take. The lanes
and the attention block's one-thread switch set only their own (`set_threads_here`), so no
thread started meanwhile inherits their count.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# OpenMP's idle threads sleep instead of spinning (set before torch loads its runtime, unless
# the user chose): with the default "active" policy, spinning threads starve a CPU-bound
# neighbour on a machine with few cores; results do not change (the module doc)
_chosen = os.environ.get("OMP_WAIT_POLICY")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# the policy OpenMP runs under: the user's, else ours, unless torch loaded its runtime first
WAIT_POLICY = (_chosen or ("" if "torch" in sys.modules else "PASSIVE")).upper()
_SOFT = 1  # omp_pause_soft: the pool's threads go; state for the next region is kept
# weights a forward may read and still run on one thread where idle workers sleep (one_thread)
CACHED_BYTES = 32 << 20


@functools.cache
def _loaded() -> tuple[str, ...]:
    """The shared libraries this process has loaded (Linux: /proc/self/maps), torch's among
    them; () where that cannot be read."""
    try:
        import torch  # noqa: F401  # loads the runtime

        with open("/proc/self/maps", encoding="utf-8") as maps:
            return tuple(sorted({line.split()[-1] for line in maps
                                 if ".so" in line.rsplit("/", 1)[-1]}))
    except OSError:
        return ()


def _function(prefix: str, name: str, args: list[Any]) -> Any:
    """`name` (ctypes, int result) from the first loaded library whose file name starts with
    prefix, or None."""
    for path in _loaded():
        if path.rsplit("/", 1)[-1].startswith(prefix):
            try:
                fn = getattr(ctypes.CDLL(path), name)  # already loaded: the same handle
            except (OSError, AttributeError):
                continue
            fn.argtypes, fn.restype = args, ctypes.c_int
            return fn
    return None


@functools.cache
def _runtime() -> Any:
    """The OpenMP runtime's pause (ctypes), or None: GNU's runtime only, where a pause joins
    the calling thread's own pool and nothing else (LLVM's and Intel's pause the whole
    runtime, whichever thread is in a region)."""
    return _function("libgomp", "omp_pause_resource_all", [ctypes.c_int])


@functools.cache
def _per_thread() -> tuple[Any, ...]:
    """(OpenMP's omp_set_num_threads, and MKL's MKL_Set_Num_Threads_Local where torch has it:
    its C entry point, which takes the count by value; the lower-case ones take a pointer) as
    torch loaded them, or () without GNU's runtime: what torch.set_num_threads sets for the
    calling thread, without the process default it also sets."""
    omp = _function("libgomp", "omp_set_num_threads", [ctypes.c_int])
    mkl = _function("libtorch_cpu", "MKL_Set_Num_Threads_Local", [ctypes.c_int])
    return () if omp is None else tuple(fn for fn in (omp, mkl) if fn is not None)


def set_threads_here(n: int) -> None:
    """The calling thread's intra-op threads (OpenMP's, and MKL's where torch has it), as
    torch.set_num_threads sets them, but not the default that threads started later take
    (torch.set_num_threads sets that too: a lane or an attention call on fewer threads would
    hand its count to every thread started meanwhile). Without GNU's runtime: torch's."""
    import torch

    torch.get_num_threads()  # a new thread takes the default first (torch's lazy init)
    for fn in _per_thread() or (torch.set_num_threads,):
        fn(n)


@contextmanager
def threads_here(n: int) -> Iterator[None]:
    """The block on n intra-op threads in this thread (set_threads_here); the count comes
    back after it."""
    import torch

    before = torch.get_num_threads()
    if before == n:
        yield
        return
    set_threads_here(n)
    try:
        yield
    finally:
        set_threads_here(before)


def weight_bytes(model: Any) -> int:
    """Bytes of the model's parameters (what one_thread weighs)."""
    return sum(w.numel() * w.element_size() for w in model.parameters())


def one_thread(nbytes: int) -> bool:
    """Whether a model whose forwards read `nbytes` of weights runs them on one thread:
    where OpenMP's idle workers sleep (the passive policy, WAIT_POLICY) and the
    weights fit the caches (CACHED_BYTES). Such a forward is dozens of short parallel regions,
    and waking the sleeping worker for each costs more than the split saves; larger weights
    stream from memory, where two cores pay (`python -m reports.bench.threads --sizes`, random
    Llamas: at 4 MB two threads took 1.14-1.27x one's time a token, at 104 MB 0.64-0.96x). A
    row's bits do not depend on the count on the lean forward, the only one that asks."""
    return WAIT_POLICY == "PASSIVE" and nbytes <= CACHED_BYTES


def use_threads(n: int) -> None:
    """torch's intra-op threads for this process (--threads). Off the lean forward, results
    then match other runs with the same count only: a different count sums in a different
    order (see the module doc)."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"threads must be a positive int, got {n!r}")
    import torch

    torch.set_num_threads(n)


def release_pool() -> bool:
    """Release the calling thread's idle OpenMP worker threads (True if the runtime did)."""
    fn = _runtime()
    return fn is not None and fn(_SOFT) == 0
