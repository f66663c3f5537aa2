"""Engine benchmark: step-wise tree expansion, three ways, side by side in one run.

Workload: 16 branches off one 256-token prompt, each extended S steps of T tokens (sampled,
EOS suppressed so every method emits exactly 16*S*T tokens), on the same model:
  (a) naive: per branch and step, HF `generate` on the full prefix (what search loops built
      on generate do: every step re-sends the prompt and all earlier steps);
  (b) HF `generate` with num_return_sequences=16 over the whole S*T tokens at once (no
      step boundaries; the best case for plain generate);
  (c) this engine: `expand` 16 rows per step, prompt prefilled once, KV shared.
Prints tokens/s, prefilled tokens and speed ratios. Usage:
    python reports/bench_engine.py [--model smollm2-135m] [--steps 3] [--step-tokens 32]
"""

from __future__ import annotations

import argparse
import time

import torch

from search.engines.hf import HFEngine
from search.types import Node, Problem

PROMPT = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many "
          "clips in May. How many clips did Natalia sell altogether in April and May? ")


def prompt_ids(tokenizer, length: int) -> list[int]:
    ids: list[int] = []
    while len(ids) < length:
        ids += tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
    return ids[:length]


def naive(model, ids, branches, steps, step_tokens, seed):
    torch.manual_seed(seed)
    paths = [list(ids) for _ in range(branches)]
    prefill = 0
    for _ in range(steps):
        for b in range(branches):
            x = torch.tensor([paths[b]])
            prefill += x.shape[1]
            out = model.generate(x, attention_mask=torch.ones_like(x), do_sample=True,
                                 max_new_tokens=step_tokens, min_new_tokens=step_tokens,
                                 pad_token_id=0)
            paths[b] = out[0].tolist()
    return branches * steps * step_tokens, prefill


def num_return(model, ids, branches, steps, step_tokens, seed):
    torch.manual_seed(seed)
    x = torch.tensor([ids])
    out = model.generate(x, attention_mask=torch.ones_like(x), do_sample=True,
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
        engine.retain(frontier)
    used = engine.meter.usage()
    engine.retain([])
    return used.generated_tokens, used.prefill_tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--branches", type=int, default=16)
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--step-tokens", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    engine = HFEngine.load(args.model)
    model, ids = engine.model, prompt_ids(engine.tokenizer, args.prompt_tokens)
    shape = (args.branches, args.steps, args.step_tokens, args.seed)
    print(f"model={args.model} threads={torch.get_num_threads()} branches={args.branches} "
          f"prompt={len(ids)} steps={args.steps}x{args.step_tokens} tokens")
    ours(engine, ids, args.branches, 1, 2, args.seed)  # warm-up
    rows = {}
    for name, fn, target in (("(a) naive generate, full prefix", naive, model),
                             ("(b) generate num_return_sequences", num_return, model),
                             ("(c) this engine, shared KV", ours, engine)):
        t0 = time.perf_counter()
        tokens, prefill = fn(target, ids, *shape)
        dt = time.perf_counter() - t0
        rows[name] = tokens / dt
        print(f"{name:36s} {tokens:6d} tokens {dt:8.2f} s {tokens / dt:8.1f} tok/s "
              f"prefilled {prefill:7d}")
    a, b, c = rows.values()
    print(f"speed ratio (c)/(a) = {c / a:.2f}x   (c)/(b) = {c / b:.2f}x   target (c)/(a) >= 5x")


if __name__ == "__main__":
    main()
