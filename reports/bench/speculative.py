"""Speculative decoding benchmark: the plain engine against the speculative one, in one run.

Workload, on the embedded SmolLM2-135M (fp32) over GSM8K test prompts (chat template):
each prompt is expanded as one step of up to T tokens (no stop string; EOS ends it), prompt
prefill included in the time, fixed seeds, a fresh draft table per configuration:
  greedy  b1   1 row per prompt, temperature 0 (speculative output checked token-identical)
  sample  b1   1 row per prompt, temperature 0.7
  sample  b16  best-of-16: 16 rows per prompt, temperature 0.7
and, at batch 1 greedy, transformers `generate` plain and with prompt-lookup decoding
(`prompt_lookup_num_tokens`), on their own copy of the weights in stock nn.Linear layers
(the engines' are oneDNN-packed, search.runtime.packed). Printed per run: tokens, seconds, tokens/s, the ratio to the
plain engine, a row's tokens per verification (accepted drafts + 1), the acceptance rate.
First the forward cost per pass for rows x q tokens (a 200-token cache), the measurement
behind SpecConfig.max_batch_tokens. Usage:
    python -m reports.bench.speculative [--quick] [--prompts 4] [--max-tokens 128] [--rows 16]
        [--threads N]
"""

from __future__ import annotations

import platform
import time
from pathlib import Path

import torch

from search.cli import command
from search.engines.hf import HFEngine, SpecConfig
from search.engines.hf.spec import SpecStats
from search.runtime.passes import cache_arg
from search.types import Problem


def machine() -> str:
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{name}, {torch.get_num_threads()} threads, torch {torch.__version__}"


@torch.inference_mode()  # (as the engine's lanes run forwards)
def pass_costs(engine: HFEngine, rows=(1, 4, 16), qs=(1, 2, 4, 8), past: int = 200,
               reps: int = 3) -> None:
    """ms per forward of rows x q new tokens after `past` cached columns (zeros: the cost
    does not depend on the values), and ms per token relative to q = 1."""
    layout = engine.kv.layout
    print(f"forward cost, ms per pass (per token vs q=1), after {past} cached tokens:")
    print("rows " + "".join(f"{'q=' + str(q):>16s}" for q in qs))
    for b in rows:
        kv = torch.zeros(layout.layers, 2, layout.kv_heads, past, layout.head_dim,
                         dtype=layout.dtype)
        # (the rows' paths as the engine's batch caches read them: in its pool on the kernel)
        cache = engine.kv.batch([[engine.kv.segment(kv)]] * b, max(qs))
        cells, base = [], 0.0
        for q in qs:
            ids = torch.zeros(b, q, dtype=torch.long)
            pos = past + torch.arange(q)[None].expand(b, q)
            best = float("inf")
            for _ in range(reps):
                t0 = time.perf_counter()
                engine.forward(input_ids=ids, attention_mask=cache.attention_mask(q),
                               position_ids=pos, use_cache=True, logits_to_keep=q,
                               **{cache_arg(type(engine.forward)): cache})
                best = min(best, time.perf_counter() - t0)
                cache.rewind(cache.start)
            base = base or best
            cells.append(f"{1e3 * best:8.1f} ({best / base / q:4.2f})")
        print(f"{b:4d} " + "".join(f"{c:>16s}" for c in cells), flush=True)


def run_engine(engine: HFEngine, problems: list[Problem], rows: int, temperature: float,
               max_tokens: int, seed: int) -> tuple[int, float, list[list[tuple[int, ...]]]]:
    engine.meter.__init__()
    t0 = time.perf_counter()
    outs = []
    for i, problem in enumerate(problems):
        kids = engine.expand([engine.root(problem)], rows, stop=None, max_tokens=max_tokens,
                             temperature=temperature, seed=seed + i)[0]
        outs.append([k.step.token_ids if k.step else () for k in kids])
    dt = time.perf_counter() - t0
    return sum(len(t) for o in outs for t in o), dt, outs


def run_generate(engine: HFEngine, problems: list[Problem], max_tokens: int,
                 lookup: int | None) -> tuple[int, float]:
    model, tokens = engine.model, 0
    extra = {"prompt_lookup_num_tokens": lookup} if lookup else {}
    pad = engine.tokenizer.pad_token_id or 0
    t0 = time.perf_counter()
    for problem in problems:
        x = torch.tensor([engine.prompt_ids(problem)])
        out = model.generate(x, attention_mask=torch.ones_like(x), do_sample=False,
                             max_new_tokens=max_tokens, pad_token_id=pad, **extra)
        tokens += out.shape[1] - x.shape[1]
    return tokens, time.perf_counter() - t0


def main() -> None:
    ap = command("python -m reports.bench.speculative", __doc__)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rows", type=int, default=16, help="best-of-N width of the batched run")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--lookup", type=int, default=10, help="HF prompt_lookup_num_tokens")
    ap.add_argument("--max-batch-tokens", type=int, default=SpecConfig.max_batch_tokens)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--dtype", default="fp32", help="fp32, bf16 or int8 (HFEngine's dtype)")
    ap.add_argument("--quick", action="store_true", help="2 prompts x 64 tokens, no cost table")
    args = ap.parse_args()
    if args.quick:
        args.prompts, args.max_tokens = 2, 64
    torch.set_grad_enabled(False)
    if args.threads:
        torch.set_num_threads(args.threads)
    from problems import datasets
    from search.models import ModelNotFoundError

    try:
        problems = datasets.load("gsm8k", limit=args.prompts)
    except FileNotFoundError as err:
        print(f"skipped: no GSM8K data ({err})")
        return
    try:
        plain = HFEngine.load(args.model, **({} if args.dtype == "fp32" else
                                             {"dtype": args.dtype}))
    except ModelNotFoundError as err:
        print(f"skipped: {err}")
        return
    config = SpecConfig(max_batch_tokens=args.max_batch_tokens)
    print(f"machine: {machine()}")
    print(f"model={args.model} {args.dtype}, {len(problems)} GSM8K test prompts, up to "
          f"{args.max_tokens} tokens per row, {config}")
    if not args.quick:
        pass_costs(plain)
    runs = [("greedy", 1, 0.0), ("sample", 1, args.temperature),
            ("sample", args.rows, args.temperature)]
    warm = Problem(prompt="1+1=")
    run_engine(plain, [warm], 1, 0.0, 4, 0)
    print(f"{'run':18s} {'method':22s} {'tokens':>6s} {'s':>7s} {'tok/s':>7s} {'ratio':>6s} "
          f"{'tok/verif':>9s} {'accept':>6s}")
    for kind, rows, temp in runs:
        label = f"{kind} b{rows}" + (f" T={temp}" if temp else "")
        tokens, dt, ref = run_engine(plain, problems, rows, temp, args.max_tokens, args.seed)
        base = tokens / dt
        print(f"{label:18s} {'engine plain':22s} {tokens:6d} {dt:7.2f} {base:7.1f} {1:6.2f}",
              flush=True)
        spec = HFEngine(plain.model, plain.tokenizer, speculate=config, name=args.model)
        run_engine(spec, [warm], 1, 0.0, 4, 0)
        spec.spec_stats = SpecStats()
        tokens, dt, got = run_engine(spec, problems, rows, temp, args.max_tokens, args.seed)
        s = spec.spec_stats
        same = "" if temp else ("  identical to plain" if got == ref else "  DIFFERS from plain")
        print(f"{label:18s} {'engine speculative':22s} {tokens:6d} {dt:7.2f} {tokens / dt:7.1f} "
              f"{tokens / dt / base:6.2f} {s.per_verification:9.2f} {100 * s.acceptance:5.1f}%"
              f"{same}", flush=True)
        if rows == 1 and not temp:
            # transformers as users get it: its own copy of the weights, stock nn.Linear
            stock = HFEngine.load(args.model, pack=False, **({} if args.dtype == "fp32" else
                                                             {"dtype": args.dtype}))
            for name, lookup in (("HF generate", None), ("HF prompt lookup", args.lookup)):
                tokens, dt = run_generate(stock, problems, args.max_tokens, lookup)
                print(f"{label:18s} {name:22s} {tokens:6d} {dt:7.2f} {tokens / dt:7.1f} "
                      f"{tokens / dt / base:6.2f}", flush=True)


if __name__ == "__main__":
    main()
