"""A packed GEMM's residual add: oneDNN's binary post-op against the GEMM, then add_.

    python -m reports.bench.residual [--repeats 3] [--calls 300]

For each (in, out, bias) weight shape (random, seed 0; the tiny models', SmolLM2-135M's
o_proj and down_proj, and a biased one) and row count M, on one thread: microseconds per call
of the post-op (`_linear_pointwise`'s "add" overload) and of the plain GEMM followed by an
in-place add (what search.runtime.packed runs), their ratio, and whether the two outputs are
equal bit for bit. Each way is timed `--repeats` times, interleaved, the fastest kept.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from typing import Any

# isort: off
import search  # noqa: F401  # (the project's thread policy, before torch loads)
import torch
from search.runtime.packed import PACK_HINT, gemm_rows
# isort: on

SHAPES = ((128, 128, False), (384, 128, False), (576, 576, False), (1536, 576, False),
          (1024, 512, True))
ROWS = (1, 16, 72, 256)


def fused(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, r: torch.Tensor
          ) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, r, w, b, "add")


def separate(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, r: torch.Tensor
             ) -> torch.Tensor:
    return gemm_rows(x, w, b, r, False)


def per_call(fn: Callable[..., torch.Tensor], args: tuple[Any, ...], calls: int) -> float:
    t0 = time.thread_time()
    for _ in range(calls):
        fn(*args)
    return (time.thread_time() - t0) / calls * 1e6


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m reports.bench.residual", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--calls", type=int, default=300)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for k, n, bias in SHAPES:
            w = torch.ops.mkldnn._reorder_linear_weight(torch.randn(n, k, generator=gen),
                                                        PACK_HINT)
            b = torch.randn(n, generator=gen) if bias else None
            cells = []
            for m in ROWS:
                x, r = torch.randn(m, k, generator=gen), torch.randn(m, n, generator=gen)
                same = torch.equal(fused(x, w, b, r), separate(x, w, b, r))
                ways = {"post-op": fused, "add_": separate}
                best = {name: float("inf") for name in ways}
                for _ in range(args.repeats):
                    for name, way in ways.items():
                        best[name] = min(best[name], per_call(way, (x, w, b, r), args.calls))
                cells.append(f"M={m}: {best['post-op']:.0f} vs {best['add_']:.0f} us "
                             f"({best['add_'] / best['post-op']:.2f}x){'' if same else ' DIFFER'}")
            print(f"in {k}, out {n}, bias {bias}: post-op vs add_: " + "; ".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
