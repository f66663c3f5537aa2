"""Engine benchmark: step-wise tree expansion, eight ways, per weight dtype, in one run.

Workload: 16 branches off one 256-token prompt, each extended S steps of T tokens (sampled,
EOS suppressed so every method emits exactly 16*S*T tokens), on the same model:
  (a) naive: per branch and step, HF `generate` on the full prefix (what search loops built
      on generate do: every step re-sends the prompt and all earlier steps);
  (b) HF `generate` with num_return_sequences=16 over the whole S*T tokens at once (no
      step boundaries; the best case for plain generate);
  (c) this engine with every row's path copied into its batch cache but a common prefix
      (tree_attention=False);
  (g) this engine, in-place KV, on the stock nn.Linear layers (HFEngine(pack=False));
  (h) this engine, packed, with the prompt's KV copied into every row (share_prefix=0);
  (i) this engine, packed and sharing the prefix, on transformers' forward (lean=False);
  (d) this engine as it ships: `expand` 16 rows per step, prompt prefilled once, KV shared,
      written in place into one preallocated buffer per call (kv.SlabCache), the common
      prefix held once and attended by cascade attention (search.runtime.attention), linears
      on oneDNN-prepacked weights (search.runtime.packed; fp32 on CPU), the forward
      itself search.runtime.lean's (Llama-family models);
  (e) llama.cpp through llama-cpp-python (optional; `pip install 'tts-search[llamacpp]'`),
      batched: one llama_batch per token holds all 16 sequences, the prompt decoded once
      into a unified KV cache shared by them; its own sampler chain (EOS banned); the
      GGUF file's own Q4_1 weights (run once, not per dtype); as many threads as torch;
      no step boundaries (the best case for it, like (b));
  (f) with --compile: (d) with torch.compile on the model forward.
(a)-(c) and (g) run on their own unpacked copy of the weights. Each runs with fp32 and bf16
weights, and int8 (HFEngine's dynamically quantised linears) with --dtypes fp32,int8. Each
is timed --repeat times (default 3; (a) once) and the fastest kept: a shared machine's noise
only ever slows a run. Printed per run: tokens/s, prefilled tokens, peak RSS during the
run, and the share of the compute bound reached: 2 * params FLOPs per token against the
matmul rate measured here at start-up (a 2048^3 GEMM in each dtype).
Then, per dtype, a step's linears alone (the lean forward's projections and LM head back to
back on random rows, nothing else): the ceiling on (d)'s tokens/s with all other work free.
Then whole searches through search.solve on the first dtype's engine (--no-workloads skips
them): best-of-16, beam W=4 x 10 steps, particle filter 16, on one GSM8K prompt; printed:
tokens/s, prefilled tokens, and the tokens a generate-based search would prefill for the
same tree (every expanded node's whole sequence once per expansion) with the share saved.
Then each other dtype's greedy agreement with fp32 on GSM8K test prompts: free-running (share of
positions where the two greedy outputs are equal) and per step (its greedy choice on
fp32's own path). Usage:
    python -m reports.bench.engine [--model smollm2-135m] [--steps 3] [--step-tokens 32]
        [--dtypes fp32,bf16] [--methods a,b,c,g,h,i,d,e] [--agreement-prompts 8] [--no-workloads] [--compile]
        [--threads N]
    python -m reports.bench.engine --targets [...]   the engine's figures of merit, each
        against its aim (reports.bench.targets)
"""

from __future__ import annotations

import contextlib
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# isort: off
import search  # before torch: the project's OpenMP wait policy (search.WAIT_POLICY) holds here
# isort: on
import torch

from problems import datasets
from reports.bench.llamacpp import llamacpp, llamacpp_missing
from search.cli import command
from search.engines.hf import HFEngine
from search.runtime.dtypes import bf16_native
from search.types import Node, Problem

PROMPT = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many "
          "clips in May. How many clips did Natalia sell altogether in April and May? ")
DTYPES: dict[str, torch.dtype | str] = {"fp32": torch.float32, "bf16": torch.bfloat16,
                                        "int8": "int8"}  # int8: HFEngine's quantised path


def prompt_ids(tokenizer, length: int) -> list[int]:
    ids: list[int] = []
    while len(ids) < length:
        ids += tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
    return ids[:length]


# -- the machine ---------------------------------------------------------------------------
def gemm_gflops(dtype: torch.dtype, n: int = 2048, reps: int = 3) -> float:
    """Best-of-reps rate of an n x n x n matmul, GFLOP/s."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    torch.mm(a, b)  # warm-up (oneDNN picks its kernels)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2 * n ** 3 / best / 1e9


def gemm_floor(engine: HFEngine, rows: int, reps: int = 3) -> float | None:
    """Seconds a decode step's linears alone take at `rows` rows: the model's own (packed)
    projections and LM head called back to back on random inputs, best of reps (None
    without the lean forward, whose projections these are). Nothing else of a step is
    counted, so rows / this is a ceiling on the engine's tokens/s."""
    from search.runtime.lean import LeanLlama

    fwd = engine.forward
    if not isinstance(fwd, LeanLlama):
        return None
    projs = [p for layer in fwd.layers for p in (layer.qkv, layer.o, layer.gate_up, layer.down)]
    projs.append(fwd.lm_head)
    inputs = [torch.randn(rows, p.modules[0].in_features) for p in projs]
    best = float("inf")
    for _ in range(reps + 1):  # the first warms the caches
        t0 = time.perf_counter()
        for p, x in zip(projs, inputs):
            p(x)
        best = min(best, time.perf_counter() - t0)
    return best


def reset_peak_rss() -> None:
    """Linux: restart the process's peak-RSS counter (VmHWM); elsewhere a no-op."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def peak_rss_mb() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # lifetime peak


# -- the methods ---------------------------------------------------------------------------
def naive(engine: HFEngine, ids, branches, steps, step_tokens, seed):
    torch.manual_seed(seed)
    paths = [list(ids) for _ in range(branches)]
    prefill = 0
    for _ in range(steps):
        for b in range(branches):
            x = torch.tensor([paths[b]])
            prefill += x.shape[1]
            out = engine.model.generate(x, attention_mask=torch.ones_like(x), do_sample=True,
                                        max_new_tokens=step_tokens, min_new_tokens=step_tokens,
                                        pad_token_id=0)
            paths[b] = out[0].tolist()
    return branches * steps * step_tokens, prefill


def num_return(engine: HFEngine, ids, branches, steps, step_tokens, seed):
    torch.manual_seed(seed)
    x = torch.tensor([ids])
    out = engine.model.generate(x, attention_mask=torch.ones_like(x), do_sample=True,
                                num_return_sequences=branches, max_new_tokens=steps * step_tokens,
                                min_new_tokens=steps * step_tokens, pad_token_id=0)
    # generate expands the prompt to one copy per sequence before its prefill
    return (out.shape[1] - len(ids)) * branches, branches * len(ids)


def ours(engine: HFEngine, ids, branches, steps, step_tokens, seed):
    engine.eos_ids = frozenset()  # same token count as the min_new_tokens runs
    engine.meter.__init__()  # fresh counters
    root = Node(problem=Problem(prompt="bench"), prompt_ids=ids)
    frontier, width = [root], branches
    for s in range(steps):
        kids = engine.expand(frontier, width, stop=None, max_tokens=step_tokens, seed=seed + s)
        frontier, width = [k for ks in kids for k in ks], 1
    used = engine.meter.usage()
    return used.generated_tokens, used.prefill_tokens


# method -> (label, function, which engine runs it): "plain" is the model as transformers
# loads it (stock nn.Linear), "copied" the engine without tree attention, "ours" the engine as
# it ships (oneDNN-packed linears where they run, search.runtime.packed)
METHODS: dict[str, tuple[str, Callable, str]] = {
    "a": ("naive generate, full prefix", naive, "plain"),
    "b": ("generate num_return_sequences", num_return, "plain"),
    "c": ("engine, paths copied in", ours, "copied"),
    "g": ("engine, in-place KV, nn.Linear", ours, "plain"),
    "h": ("engine, packed, prefix per row", ours, "noshare"),
    "i": ("engine, transformers' forward", ours, "hfforward"),
    "d": ("engine, in-place KV, packed", ours, "ours"),
    "e": ("llama.cpp, batched (Q4_1)", llamacpp, "plain"),
}


# -- search workloads ------------------------------------------------------------------------
# what the targets are stated on: whole searches through search.solve (free logprob
# scorer, steps end at a blank line or after step_tokens; EOS allowed, so token counts vary)
WORKLOADS: dict[str, tuple[str, dict[str, Any]]] = {
    "best-of-16": ("best_of_n", dict(n=16, step_tokens=32, max_depth=3, select="score")),
    "beam W=4 x 10 steps": ("beam", dict(n=16, m=4, max_depth=10, step_tokens=16)),
    "particle filter 16": ("particle_filter", dict(n=16, max_depth=10, step_tokens=16)),
}


def resent_prefixes(root: Node) -> int:
    """Tokens a search built on `generate` would prefill for the same tree: every expanded
    node's whole sequence (prompt and all its steps) sent once per expansion (its samples
    sharing it, as num_return_sequences does), where this engine prefills the prompt once."""
    return sum(len(node.token_ids()) for node in root.walk() if node.children)


def run_workloads(engine: HFEngine, problem: Problem, seed: int) -> None:
    print(f"\nsearch workloads on {engine.name} (as it ships), one GSM8K prompt, logprob scorer:")
    print(f"{'workload':22s} {'tokens':>6s} {'s':>7s} {'tok/s':>7s} {'prefilled':>9s} "
          f"{'re-sent':>8s} {'saved':>6s}")
    for label, (algo, knobs) in WORKLOADS.items():
        engine.meter.__init__()
        t0 = time.perf_counter()
        result = search.solve(problem, algo, engine=engine, scorer="logprob", seed=seed, **knobs)
        dt = time.perf_counter() - t0
        used, resent = result.usage, resent_prefixes(result.tree)
        print(f"{label:22s} {used.generated_tokens:6d} {dt:7.2f} "
              f"{used.generated_tokens / dt:7.1f} {used.prefill_tokens:9d} {resent:8d} "
              f"{100 * (1 - used.prefill_tokens / resent):5.1f}%", flush=True)


# -- bf16 / int8 numerics -------------------------------------------------------------------------
def agreement(fp32: HFEngine, other: HFEngine, problems, max_tokens: int
              ) -> tuple[float, float]:
    """(free-running, per-step) share of greedy tokens where `other` (bf16, int8) equals fp32."""
    runs = [e.expand([e.root(p) for p in problems], 1, stop=None, max_tokens=max_tokens,
                     temperature=0) for e in (fp32, other)]
    same = total = step_same = steps = 0
    for (x,), (y,) in zip(*runs):
        s, t = x.step.token_ids, y.step.token_ids
        total += max(len(s), len(t))
        same += sum(u == v for u, v in zip(s, t))
        path = x.token_ids()  # teacher forcing: other's argmax along fp32's path
        with torch.no_grad():
            pred = other.model(torch.tensor([path])).logits[0, len(path) - len(s) - 1:-1]
        step_same += int((pred.argmax(-1) == torch.tensor(s)).sum())
        steps += len(s)
    return same / total, step_same / steps


def main() -> None:
    if "--targets" in sys.argv[1:]:  # the engine's figures of merit (reports.bench.targets)
        from reports.bench.targets import main as targets

        sys.exit(targets([a for a in sys.argv[1:] if a != "--targets"]))
    ap = command("python -m reports.bench.engine", __doc__)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--branches", type=int, default=16)
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--step-tokens", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--methods", default="a,b,c,g,h,i,d,e")
    ap.add_argument("--repeat", type=int, default=3,
                    help="time each method this many times and keep the fastest ((a): once)")
    ap.add_argument("--agreement-prompts", type=int, default=8)
    ap.add_argument("--agreement-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads, and llama.cpp's (default: torch's)")
    ap.add_argument("--no-workloads", action="store_true",
                    help="skip the search workloads (best-of-16, beam W=4 x 10, particle filter)")
    ap.add_argument("--compile", action="store_true",
                    help="also time (d) with torch.compile(dynamic=True) on the model forward (f)")
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    if args.threads:
        torch.set_num_threads(args.threads)
    dtypes = [d for d in args.dtypes.split(",") if d]
    methods = [m for m in args.methods.split(",") if m]
    if "e" in methods and (why := llamacpp_missing(args.model)):
        print(f"(e) llama.cpp skipped: {why}")
        methods.remove("e")
    # int8's bound is reported against the fp32 GEMM rate (the FLOPs are the same)
    rates = {d: gemm_gflops(torch.float32 if d == "int8" else DTYPES[d])  # type: ignore[arg-type]
             for d in dtypes}
    print(f"model={args.model} threads={torch.get_num_threads()} branches={args.branches} "
          f"prompt={args.prompt_tokens} steps={args.steps}x{args.step_tokens} tokens "
          f"bf16_native={bf16_native()}")
    print("measured GEMM 2048^3: " + "  ".join(f"{d} {r:.1f} GFLOP/s" for d, r in rates.items()))
    shape = (args.branches, args.steps, args.step_tokens, args.seed)
    engines: dict[str, HFEngine] = {}
    table: dict[tuple[str, str], float] = {}
    print(f"{'method':34s} {'dtype':5s} {'tokens':>6s} {'s':>7s} {'tok/s':>7s} "
          f"{'prefilled':>9s} {'peakMB':>7s} {'%bound':>6s}")
    for d in dtypes:
        eng = engines[d] = HFEngine.load(args.model, dtype=DTYPES[d])
        ids = prompt_ids(eng.tokenizer, args.prompt_tokens)
        # the baselines get their own unpacked copy of the weights: packing is in place
        plain = HFEngine.load(args.model, dtype=DTYPES[d], pack=False) if eng.packed else eng
        copied = HFEngine(eng.model, eng.tokenizer, chat=False, tree_attention=False)
        noshare = HFEngine(eng.model, eng.tokenizer, chat=False, share_prefix=0)
        hfforward = HFEngine(eng.model, eng.tokenizer, chat=False, lean=False)
        variants = {"plain": plain, "copied": copied, "ours": eng, "noshare": noshare,
                    "hfforward": hfforward}
        if args.compile:
            methods = [*methods, "f"]
        for m in methods:
            if m == "e" and d != dtypes[0]:
                continue  # llama.cpp runs the GGUF's own weights: once
            if m == "f":
                name, fn, target = "engine, in-place KV, torch.compile", ours, _compiled(eng)
            else:
                name, fn, variant = METHODS[m]
                target = variants[variant]
            if fn is ours or fn is llamacpp:
                fn(target, ids, args.branches, 1, 2, args.seed)  # warm-up (and model load)
            reset_peak_rss()
            dt = float("inf")  # best of --repeat runs (one for (a)): this machine's noise
            for _ in range(1 if m == "a" else args.repeat):  # is one-sided, never faster
                t0 = time.perf_counter()
                tokens, prefill = fn(target, ids, *shape)
                dt = min(dt, time.perf_counter() - t0)
            tps = table[(m, d)] = tokens / dt
            bound = tps * 2 * eng.n_params / (rates[d] * 1e9)
            print(f"({m}) {name:30s} {'q4_1' if m == 'e' else d:5s} {tokens:6d} {dt:7.2f} {tps:7.1f} {prefill:9d} "
                  f"{peak_rss_mb():7.0f} {100 * bound:5.1f}%", flush=True)
        if args.compile:
            methods = methods[:-1]
    for d in dtypes:
        ratios = [f"(d)/({m}) = {table[('d', d)] / table[(m, d)]:.2f}x" for m in "abcghif"
                  if (m, d) in table and ("d", d) in table]
        if ("e", dtypes[0]) in table and ("d", d) in table:
            ratios.append(f"(d)/(e, q4_1) = {table[('d', d)] / table[('e', dtypes[0])]:.2f}x")
        print(f"{d}: " + "   ".join(ratios))
        floor = gemm_floor(engines[d], args.branches) if d in engines else None
        if floor is not None and ("d", d) in table:
            ceiling = args.branches / floor
            also = (f", {ceiling / table[('e', dtypes[0])]:.2f}x llama.cpp"
                    if ("e", dtypes[0]) in table else "")
            print(f"{d}: a step's linears alone at {args.branches} rows take {1e3 * floor:.1f} ms: "
                  f"at most {ceiling:.0f} tok/s with everything else free{also}; "
                  f"(d) reaches {100 * table[('d', d)] / ceiling:.0f}% of that")
    if not args.no_workloads:
        run_workloads(engines[dtypes[0]], datasets.load("gsm8k", limit=1)[0], args.seed)
    others = dtypes[1:] if dtypes[0] == "fp32" else []
    if others and args.agreement_prompts:
        probs = datasets.load("gsm8k", limit=args.agreement_prompts)
    for d in others:
        if ("d", d) in table:
            print(f"(d) {d}/fp32 = {table[('d', d)] / table[('d', 'fp32')]:.2f}x")
        if args.agreement_prompts:
            free, step = agreement(engines["fp32"], engines[d], probs, args.agreement_tokens)
            print(f"{d} greedy agreement with fp32 on {len(probs)} GSM8K test prompts x "
                  f"{args.agreement_tokens} tokens: free-running {100 * free:.1f}% of positions, "
                  f"per step (on fp32's path) {100 * step:.1f}%")


def _compiled(engine: HFEngine) -> HFEngine:
    """A second engine over a torch.compile'd forward of the same model (dynamic shapes)."""
    model = engine.model
    compiled = HFEngine(model, engine.tokenizer, chat=False, lean=False)
    compiled.kv.forward = _CompiledForward(model)
    return compiled


class _CompiledForward:
    """The model with its forward compiled; everything else passes through."""

    def __init__(self, model) -> None:
        self._model = model
        self._forward = torch.compile(model.forward, dynamic=True)

    def __call__(self, *args, **kwargs):
        return self._forward(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._model, name)


if __name__ == "__main__":
    main()
