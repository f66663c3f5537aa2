"""The engine on a GPU: one prepared check, every figure the engine's GPU targets are stated
on, measured side by side in one process on one card (under 8 minutes on an H100/H200).

1. The card: torch's own matmul rate (a bf16 GEMM) and copy bandwidth, measured here.
2. A random ~1B Llama in bf16 (hidden 2048, 16 layers, 32 heads, 8 KV heads, MLP 8192,
   vocabulary 32,000): per 16, 64 and 256 rows (16 rows a prompt: 1, 4, 16 prompts of 512
   tokens), 256 new tokens a row, EOS off, sampled at temperature 1:
   the engine's `expand` against transformers' `generate(do_sample=True,
   num_return_sequences=16, top_k=0)`: tokens/s, their ratio, and each as % of the
   workload's bound (per step the larger of (linear weights + KV read) / bandwidth and
   2 x linear params x rows / matmul rate, the shared prompt's KV read once a step);
   time to first token (prefill) and tokens prefilled by each; peak memory of each.
3. 16 searches' jobs of 16 rows each (different prompts) merged by the engine's scheduler
   (serving, one thread a job) against one `expand` over the same 256 rows.
4. The tiny-arith grid (6 problems x best_of_n/beam/particle_filter x widths 4 and 16) at
   concurrency 1 and 16: seconds, ratio, rows identical or not.
5. The engine tests on the device (pytest -k DEVICE over the device-parametrised files:
   tests/devices.py), their summary line.

--dry runs the same code on the CPU with a tiny model and shorter runs, in a few minutes
(the figures then say nothing about a GPU: it proves the check runs). Usage:
    python -m reports.bench.gpu [--dry] [--skip tests,grid,merged]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[2]
# the device-parametrised engine tests (tests/devices.py); --dry runs the cheap ones
TESTS = ("tests/test_engine.py", "tests/test_spec.py", "tests/test_decode.py",
         "tests/test_attention.py", "tests/test_lean.py", "tests/test_concurrency.py",
         "tests/test_gpu_lean.py", "tests/test_gpu_syncs.py", "tests/test_gpu_devices.py")
DRY_TESTS = ("tests/test_gpu_syncs.py", "tests/test_gpu_devices.py")


@dataclass(frozen=True)
class Shape:
    """The model and the workload of one check."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    inter: int
    vocab: int
    prompt: int  # tokens per prompt
    new: int  # tokens per row
    rows: tuple[int, ...]  # rows per engine/generate comparison (16 a prompt)
    merged_new: int  # tokens per row in the merged-jobs comparison
    grid_limit: int  # tiny-arith problems
    gemm: int  # the matmul-rate probe's size
    copy_mb: int  # the bandwidth probe's size


FULL = Shape(2048, 16, 32, 8, 8192, 32000, 512, 256, (16, 64, 256), 64, 6, 8192, 1024)
DRY = Shape(64, 2, 4, 2, 128, 512, 64, 16, (16, 64, 256), 8, 2, 512, 64)
PER_PROMPT = 16  # rows per prompt, as num_return_sequences


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def best_time(fn: Callable[[], Any], device: torch.device, reps: int = 3) -> float:
    """Fastest of reps timed calls of fn, after one warm-up call."""
    fn()
    best = float("inf")
    for _ in range(reps):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        best = min(best, time.perf_counter() - t0)
    return best


def machine(shape: Shape, device: torch.device, dtype: torch.dtype) -> tuple[float, float]:
    """(matmul FLOP/s in `dtype`, copy bytes/s: read + write) measured on `device`."""
    n = shape.gemm
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    peak = 2 * n ** 3 / best_time(lambda: torch.mm(a, b), device)
    x = torch.empty(shape.copy_mb << 20, dtype=torch.uint8, device=device)
    y = torch.empty_like(x)
    bw = 2 * x.numel() / best_time(lambda: y.copy_(x), device)
    return peak, bw


def build(shape: Shape, device: torch.device, dtype: torch.dtype) -> tuple[Any, Any]:
    """(model, tokenizer): a random Llama of `shape` on `device` in `dtype`, and a word-level
    tokenizer over its vocabulary ("t0" ... "tN": decoding only)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = Tokenizer(models.WordLevel({f"t{i}": i for i in range(shape.vocab)}, unk_token="t0"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=words, pad_token="t0", eos_token="t1")
    cfg = LlamaConfig(vocab_size=shape.vocab, hidden_size=shape.hidden,
                      intermediate_size=shape.inter, num_hidden_layers=shape.layers,
                      num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
                      max_position_embeddings=shape.prompt + shape.new + 64,
                      tie_word_embeddings=False, bos_token_id=2, eos_token_id=1,
                      pad_token_id=0)
    torch.manual_seed(0)
    with torch.device(device):
        model: Any = LlamaForCausalLM(cfg)
        model = model.to(dtype).eval()
    model.set_attn_implementation("sdpa")  # what generate runs; the engine switches its copy
    return model, tok


def linear_params(model: Any) -> int:
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))


def bound(model: Any, shape: Shape, rows: int, column_bytes: int, peak: float, bw: float
          ) -> float:
    """The workload's tokens/s bound (module doc): per step max(bytes / bw, FLOPs / peak)."""
    n = linear_params(model)
    wbytes = n * next(model.parameters()).element_size()
    prompts = rows // PER_PROMPT
    seconds = sum(max((wbytes + (prompts * shape.prompt + rows * s) * column_bytes) / bw,
                      2 * n * rows / peak) for s in range(shape.new))
    return rows * shape.new / seconds


class Memory:
    """Peak memory of a block: the device's allocator on CUDA, the process's RSS on CPU."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def __enter__(self) -> Memory:
        from reports.bench.engine import reset_peak_rss

        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        else:
            reset_peak_rss()
        return self

    def __exit__(self, *exc: Any) -> None:
        from reports.bench.engine import peak_rss_mb

        self.mb = (torch.cuda.max_memory_allocated() / 2**20 if self.device.type == "cuda"
                   else peak_rss_mb())


def prompts_of(shape: Shape, count: int, seed: int = 1) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(3, shape.vocab, (count, shape.prompt), generator=gen).tolist()


def engine_expand(eng: Any, prompts: list[list[int]], new: int, seed: int = 0
                  ) -> tuple[float, int, int]:
    """(seconds, tokens, prefilled tokens) of one expand: PER_PROMPT rows a prompt."""
    from search.types import Node, Problem

    eng.eos_ids = frozenset()
    eng.meter.__init__()
    roots = [Node(problem=Problem(prompt=f"p{i}"), prompt_ids=ids) for i, ids in enumerate(prompts)]
    sync(eng.device)
    t0 = time.perf_counter()
    eng.expand(roots, PER_PROMPT, stop=None, max_tokens=new, temperature=1.0, seed=seed)
    sync(eng.device)
    seconds = time.perf_counter() - t0
    used = eng.meter.usage()
    return seconds, used.generated_tokens, used.prefill_tokens


def generate(model: Any, prompts: list[list[int]], new: int, seed: int = 0
             ) -> tuple[float, int, int]:
    """(seconds, tokens, prefilled tokens) of transformers' generate, PER_PROMPT sequences a
    prompt (it copies each prompt per sequence before its prefill)."""
    device = next(model.parameters()).device
    x = torch.tensor(prompts, device=device)
    torch.manual_seed(seed)
    sync(device)
    t0 = time.perf_counter()
    out = model.generate(x, attention_mask=torch.ones_like(x), do_sample=True, top_k=0,
                         top_p=1.0, temperature=1.0, num_return_sequences=PER_PROMPT,
                         max_new_tokens=new, min_new_tokens=new, pad_token_id=0)
    sync(device)
    seconds = time.perf_counter() - t0
    return seconds, (out.shape[1] - x.shape[1]) * out.shape[0], x.numel() * PER_PROMPT


def versus_generate(eng: Any, model: Any, shape: Shape, peak: float, bw: float) -> None:
    dev = eng.device
    print(f"\n== engine expand vs generate: {shape.prompt}-token prompts, {shape.new} new tokens"
          f" a row, {PER_PROMPT} rows a prompt, EOS off ==")
    print(f"{'rows':>5} {'engine tok/s':>13} {'generate tok/s':>15} {'ratio':>6} "
          f"{'engine %bound':>14} {'generate %bound':>16} {'TTFT eng/gen ms':>16} "
          f"{'prefilled eng/gen':>18} {'peak MB eng/gen':>16}", flush=True)
    engine_expand(eng, prompts_of(shape, 1), 4)  # warm-up: kernels, allocator
    generate(model, prompts_of(shape, 1), 4)
    for rows in shape.rows:
        ps = prompts_of(shape, rows // PER_PROMPT)
        with Memory(dev) as m_eng:
            t_eng, n_eng, pre_eng = engine_expand(eng, ps, shape.new)
        with Memory(dev) as m_gen:
            t_gen, n_gen, pre_gen = generate(model, ps, shape.new)
        ttft_eng = engine_expand(eng, ps, 1)[0]
        ttft_gen = generate(model, ps, 1)[0]
        top = bound(model, shape, rows, eng.kv.column_bytes, peak, bw)
        r_eng, r_gen = n_eng / t_eng, n_gen / t_gen
        print(f"{rows:>5} {r_eng:>13,.0f} {r_gen:>15,.0f} {r_eng / r_gen:>5.2f}x "
              f"{100 * r_eng / top:>13.1f}% {100 * r_gen / top:>15.1f}% "
              f"{1e3 * ttft_eng:>7.0f}/{1e3 * ttft_gen:<8.0f} {pre_eng:>8}/{pre_gen:<9} "
              f"{m_eng.mb:>7.0f}/{m_gen.mb:<8.0f}", flush=True)


def merged_jobs(eng: Any, shape: Shape) -> None:
    """16 jobs of 16 rows, one thread each, through the scheduler's lanes, against one
    expand of the same 256 rows."""
    from search.runtime.sched import SchedStats
    from search.session import Session
    from search.types import Node, Problem

    jobs, new = 16, shape.merged_new
    ps = prompts_of(shape, jobs, seed=2)
    t_one, n_one = min(engine_expand(eng, ps, new, seed)[:2] for seed in (0, 1))  # best of 2
    eng.eos_ids = frozenset()
    roots = [Node(problem=Problem(prompt=f"j{i}"), prompt_ids=ids) for i, ids in enumerate(ps)]
    done: list[int] = []

    def job(i: int) -> None:
        view = eng.bind(Session())
        kids = view.expand([roots[i]], PER_PROMPT, stop=None, max_tokens=new, seed=i)[0]
        done.append(sum(len(k.step.token_ids) for k in kids))

    sched = eng.scheduler
    sched.stats = SchedStats()
    with sched.serving():
        cap = sched.max_kv_bytes
        threads = [threading.Thread(target=job, args=(i,)) for i in range(jobs)]
        sync(eng.device)
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        sync(eng.device)
        t_many = time.perf_counter() - t0
    st = sched.stats
    print(f"\n== {jobs} jobs x {PER_PROMPT} rows x {new} tokens merged, against one expand of "
          f"the same {jobs * PER_PROMPT} rows ==\nmerged {sum(done) / t_many:,.0f} tok/s, one "
          f"expand {n_one / t_one:,.0f} tok/s: {n_one / t_one and (sum(done) / t_many) / (n_one / t_one):.2f}x"
          f" (forward merges: {getattr(eng.forward, 'merges', False)}; widest tick "
          f"{st.widest} Passes, {st.ticks} ticks, {st.lanes} lanes, at most {st.peak_jobs} "
          f"jobs in flight under a {cap / 2**30:.1f} GiB cache cap)", flush=True)


def tiny_grid(shape: Shape, tmp: Path) -> None:
    from reports.bench.eval import clocked_run, comparable, tiny_arith

    grid, setup = tiny_arith(shape.grid_limit)
    print(f"\n== tiny-arith grid ({shape.grid_limit} problems x best_of_n/beam/particle_filter "
          f"x widths 4, 16) on {setup['engine'].device} ==", flush=True)
    walls, rows = {}, {}
    for c in (1, 16):
        run, walls[c], _ = clocked_run(grid, tmp / f"c{c}.jsonl", c, **setup)
        rows[c] = sorted(map(comparable, run.rows))
    print(f"concurrency 1: {walls[1]:.1f} s, 16: {walls[16]:.1f} s: {walls[1] / walls[16]:.2f}x;"
          f" rows {'identical' if rows[1] == rows[16] else 'differ'}", flush=True)


def engine_tests(device: torch.device, dry: bool) -> None:
    files = DRY_TESTS if dry else TESTS
    print(f"\n== engine tests on {device.type}: pytest -k {device.type} "
          f"{' '.join(files)} ==", flush=True)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-k", device.type, *files], cwd=REPO, env=env, capture_output=True,
                         text=True)
    lines = [ln for ln in run.stdout.splitlines() if ln.strip()]
    failed = [ln for ln in lines if ln.startswith(("FAILED", "ERROR"))]
    print("\n".join([*failed, *lines[-1:]]) or run.stderr[-2000:], flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m reports.bench.gpu", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry", action="store_true", help="the CPU, a tiny model, short runs")
    ap.add_argument("--skip", default="", help="comma-separated: generate,merged,grid,tests")
    args = ap.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    if not args.dry and not torch.cuda.is_available():
        print("no GPU visible: run with --dry for the CPU rehearsal", file=sys.stderr)
        return 2
    import tempfile

    import transformers

    from search.engines.hf import HFEngine

    shape, device = (DRY, torch.device("cpu")) if args.dry else (FULL, torch.device("cuda"))
    dtype = torch.bfloat16
    name = torch.cuda.get_device_name() if device.type == "cuda" else "CPU (dry run)"
    print(f"{name}; torch {torch.__version__}, transformers {transformers.__version__}; "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    t0 = time.perf_counter()
    peak, bw = machine(shape, device, dtype)
    print(f"measured: bf16 matmul {peak / 1e9:,.0f} GFLOP/s, copy {bw / 1e9:,.1f} GB/s", flush=True)
    model, tok = build(shape, device, dtype)
    gen_model = model
    if "generate" not in skip:
        import copy

        gen_model = copy.deepcopy(model)  # the engine switches its model's attention kind
    # merge=True: what a GPU does by default, and on the CPU's bf16 rehearsal too
    eng = HFEngine(model, tok, chat=False, device=device, dtype=dtype, merge=True,
                   max_length=shape.prompt + shape.new + 8)
    print(f"model: {linear_params(model) / 1e6:,.1f}M linear params, {dtype}; engine forward: "
          f"{type(eng.forward).__name__}"
          f"{'' if eng.forward_note is None else ' (' + eng.forward_note + ')'}", flush=True)
    if "generate" not in skip:
        versus_generate(eng, gen_model, shape, peak, bw)
        del gen_model
    if "merged" not in skip:
        merged_jobs(eng, shape)
    with tempfile.TemporaryDirectory() as tmp:
        if "grid" not in skip:
            tiny_grid(shape, Path(tmp))
    if "tests" not in skip:
        engine_tests(device, args.dry)
    print(f"\ntotal {time.perf_counter() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
