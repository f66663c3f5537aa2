"""KV bytes moved by the transformers engine's `expand`, against the new KV it writes.

A TorchDispatchMode sees every ATen call (TorchScript's too). KV storage is what the engine
allocates in its layout ([layers, 2, ...] ending in the head dim: slabs, segments, spare
room) and what copies of it produce; an op moves KV bytes when it writes into KV storage
or copies out of it: copy_, _foreach_copy_ and the attention kernel's tts.write (the bytes
written), cat, stack, clone, index_select, gather, _to_copy (their outputs),
index_copy/index_put (the values written).
Attention reading K/V where they live moves nothing. The new KV of a forward is its rows'
one new column each (every layer's key and value).

Workloads on a random fp32 Llama (no EOS, no stop strings: every row decodes T tokens):
  prompts  R rows, 16 a prompt, off R/16 prompts of L tokens (prefilled before counting);
  children the R children of `prompts` expanded once each (their last token fed first).
Per expand: all bytes of the call over its forwards; per step: the marginal bytes of T more
tokens per row, (bytes(2T) - bytes(T)) / T, against one forward's new KV.

Runs on this checkout, or on another one's code (`--old PATH`, a worktree of an older commit:
this file is run there as a script, importing that checkout's `search`).

`--cpu`: the CPU seconds the tree attention costs against the paths copied in, side by side
in one process: tiny-arith searches (beam and best-of-16 over `--problems` arith problems
of difficulty 5, Budget(tokens=2000), solve_many at concurrency 16) on two engines, one with
tree_attention and one without, run in turns `--repeats` times; printed: each engine's
fewest process CPU seconds and wall seconds, their ratios, and whether every Result
(answer, status, tokens generated, candidates) is the same on both. Usage:
    python -m reports.bench.kvbytes [--rows 64] [--lengths 128,512] [--tokens 32] [--old PATH]
        [--cpu] [--problems 8] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten
OUT_OPS = {aten.cat.default, aten.stack.default, aten.clone.default, aten.index_select.default,
           aten.gather.default, aten._to_copy.default, aten.index.Tensor}
INTO_OPS = {aten.copy_.default: 1, aten.index_copy_.default: 3, aten.index_copy.default: 3,
            aten.index_put_.default: 2, aten.index_put.default: 2, aten.slice_scatter.default: 1}
WRITE = "tts.write.default"  # the attention kernel's write of every Pass's new keys and values
NEW_OPS = {aten.empty.memory_format, aten.empty_strided.default, aten.new_empty.default,
           aten.zeros.default, aten.new_zeros.default}


def _nbytes(t: Any) -> int:
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0


class KVBytes(TorchDispatchMode):
    """Counts KV bytes moved (see the module doc) while active: `moved`."""

    def __init__(self, layers: int, head_dim: int) -> None:
        super().__init__()
        self.layers, self.head_dim = layers, head_dim
        self.kv: set[int] = set()  # data pointers of KV storages
        self.moved = 0
        self.by_op: dict[str, int] = {}
        self._alive: list[Any] = []

    def _add(self, func: Any, n: int) -> None:
        self.moved += n
        self.by_op[str(func)] = self.by_op.get(str(func), 0) + n

    def _is_kv(self, t: Any) -> bool:
        """Whether t is KV storage: made while counting, or of a KV's shape (a pool block's
        columns [L, 2, KV, n, D] from a chunk made before)."""
        if not isinstance(t, torch.Tensor):
            return False
        s = t.shape
        return t.untyped_storage().data_ptr() in self.kv or len(s) == 5 and \
            s[0] == self.layers and s[1] == 2 and s[-1] == self.head_dim

    def _mark(self, t: Any) -> None:
        if isinstance(t, torch.Tensor) and t.numel():
            storage = t.untyped_storage()
            self.kv.add(storage.data_ptr())
            self._alive.append(storage)  # held: a freed address reused would read as KV

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: Any = None
                           ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func in NEW_OPS and isinstance(out, torch.Tensor):
            s = out.shape  # (a KV pool's chunk: [C, L, 2, KV, BLOCK, D])
            if len(s) >= 4 and s[-1] == self.head_dim and (
                    s[0] == self.layers and s[1] == 2 or
                    len(s) == 6 and s[1] == self.layers and s[2] == 2):
                self._mark(out)
        elif func in OUT_OPS:
            srcs = args[0] if isinstance(args[0], (list, tuple)) else [args[0]]
            if any(self._is_kv(t) for t in srcs):
                self._add(func, _nbytes(out))
                self._mark(out)
        elif func in INTO_OPS:
            src = args[INTO_OPS[func]] if len(args) > INTO_OPS[func] else None
            if self._is_kv(args[0]) or self._is_kv(src):
                self._add(func, _nbytes(src))
        elif func is aten._foreach_copy_.default:
            for dst, src in zip(args[0], args[1]):
                if self._is_kv(dst) or self._is_kv(src):
                    self._add(func, _nbytes(src))
        elif str(func) == WRITE:  # (k, v [N, KV, d], li, rows, q, n, pool, owns): k and v
            k, v, pool = args[0], args[1], args[6]  # written into the pool's blocks
            self._add(func, (k.numel() + v.numel()) * pool[0].element_size())
        return out


class _Chars:
    """The least tokenizer an engine needs here: token id -> a character."""

    chat_template = None
    eos_token_id = None

    def decode(self, ids: Any, **_: Any) -> str:
        return "".join(chr(97 + int(i) % 26) for i in ids)


def engine(vocab: int = 256, hidden: int = 256, layers: int = 4, heads: int = 8,
           kv_heads: int = 2, seed: int = 0, **options: Any) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    from search.engines.hf import HFEngine

    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=kv_heads, max_position_embeddings=4096,
                      tie_word_embeddings=False)
    torch.manual_seed(seed)
    options.setdefault("tree_attention", True)  # the paths read where they live, unless asked
    eng = HFEngine(LlamaForCausalLM(cfg).eval(), _Chars(), chat=False, max_length=4096,
                   **options)
    eng.eos_ids = frozenset()
    return eng


def random_roots(eng: Any, count: int, length: int) -> list[Any]:
    """`count` roots of random prompts of `length` token ids (generator seed 1), in the
    engine's session."""
    from search.types import Node, Problem

    gen = torch.Generator().manual_seed(1)
    vocab = eng.model.config.vocab_size
    return [eng.session.kv.add(Node(problem=Problem(prompt=f"p{i}"), prompt_ids=torch.randint(
        0, vocab, (length,), generator=gen).tolist())) for i in range(count)]


def measure(rows: int, length: int, tokens: int, per_prompt: int = 16, **options: Any
            ) -> dict[str, float]:
    """Bytes moved per forward / new KV per forward, per expand and per step, both workloads."""

    eng = engine(**options)
    lay = eng.kv.layout
    column = lay.layers * 2 * lay.kv_heads * lay.head_dim * torch.finfo(lay.dtype).bits // 8
    roots = random_roots(eng, rows // per_prompt, length)
    mode = KVBytes(lay.layers, lay.head_dim)  # one for all: it knows every KV storage made

    def count(call: Callable[[], Any]) -> tuple[int, Any]:
        mode.moved = 0
        with mode:
            out = call()
        return mode.moved, out

    count(lambda: eng.kv.ensure(roots, eng.session))

    def figures(name: str, expand: Callable[[int, int], Any], forwards: int) -> list[Any]:
        """Moved bytes per forward over new KV: per expand of T tokens, and per step (the
        marginal of T more); returns both calls' outputs."""
        (once, a), (twice, b) = count(lambda: expand(tokens, 0)), count(lambda: expand(2 * tokens, 1))
        out[f"{name}_expand"] = once / forwards / (rows * column)
        out[f"{name}_step"] = (twice - once) / tokens / (rows * column)
        return [a, b]

    out: dict[str, float] = {}
    got = figures("prompts", lambda t, i: eng.expand(roots, per_prompt, stop=None, max_tokens=t,
                                                     seed=3), tokens - 1)
    kids = [[k for ks in g for k in ks] for g in got]  # each call's children its own set
    # (children: their last sampled token is fed first, one forward more)
    figures("children", lambda t, i: eng.expand(kids[i], 1, stop=None, max_tokens=t, seed=4),
            tokens)
    return out


def prefills(searches: int = 16) -> dict[str, int]:
    """Prompt tokens the model computed (tiny-arith, best-of-4, one arith prompt): by a first
    solve, a second (another seed) on the same engine, and `searches` seeds of it in one
    solve_many at that concurrency on a fresh engine (KVTree.prefilled where the engine
    counts it; else the runs' prefill_tokens, which were all computed)."""
    import search
    from problems import arith

    problem, other = arith.generate(2, seed=7, difficulty=4)  # (get_engine keeps engines)
    budget = search.Budget(tokens=120)

    def computed(eng: Any, run: Callable[[], list[Any]]) -> int:
        before = getattr(eng.kv, "prefilled", None)
        results = run()
        if before is None:
            return sum(r.usage.prefill_tokens for r in results)
        return eng.kv.prefilled - before

    eng: Any = search.get_engine("tiny-arith")
    out = {"prompt": len(eng.prompt_ids(problem))}
    for name, seed in (("first", 0), ("second", 1)):
        out[name] = computed(eng, lambda seed=seed: [search.solve(
            problem, "best_of_n", budget, engine=eng, seed=seed, n=4)])
    out["other"] = len(eng.prompt_ids(other))
    out["many"] = computed(eng, lambda: search.solve_many(
        [other], "best_of_n", budget, engine=eng, seeds=range(searches),
        concurrency=searches, n=4))
    return out


def shared_prefixes(problems: int = 50) -> dict[str, Any]:
    """What prompts that begin alike save (PromptCache.longest): HFEngine.prefill of the
    first `problems` MATH-500 prompts under SmolLM2-135M's chat template (its system prompt
    theirs in common) on two fresh engines, one reusing the tokens a prompt shares with a
    cached one and one reusing whole prompts only -> the prompt tokens in all, each engine's
    tokens computed and seconds."""
    import time

    from problems import load
    from search.engines.hf import HFEngine

    batch = load("math500")[:problems]
    out: dict[str, Any] = {}
    for name in ("shared", "whole"):
        eng = HFEngine.load("smollm2-135m", device="cpu")
        eng.kv.partial_prompts &= name == "shared"
        out["tokens"] = sum(len(eng.prompt_ids(p)) for p in batch)
        t0 = time.perf_counter()
        out[name] = eng.prefill(batch)
        out[f"{name}_s"] = time.perf_counter() - t0
    return out


def cpu_seconds(problems: int = 8, repeats: int = 3, concurrency: int = 16
                ) -> dict[str, Any]:
    """Process CPU and wall seconds of the same tiny-arith searches with tree attention and
    with the paths copied in (the fewest of `repeats` turns each), and whether their Results
    agree (see the module doc)."""
    import resource
    import time

    import search
    from problems import arith

    probs = arith.generate(problems, seed=0, difficulty=5)
    engines = {name: search.get_engine("tiny-arith", device="cpu", tree_attention=flag)
               for name, flag in (("tree", True), ("copied", False))}

    def used() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    searches: list[tuple[str, dict[str, Any]]] = [("beam", {}), ("best_of_n", {"n": 16})]
    best: dict[str, tuple[float, float]] = {}
    results: dict[str, list[Any]] = {}
    for turn in range(repeats):
        for name in list(engines)[::1 if turn % 2 == 0 else -1]:  # alternate who goes first
            c0, w0 = used(), time.perf_counter()
            got = [r for algo, knobs in searches
                   for r in search.solve_many(probs, algo, search.Budget(tokens=2000),
                                              engine=engines[name], scorer="steps",
                                              concurrency=concurrency, **knobs)]
            spent = (used() - c0, time.perf_counter() - w0)
            best[name] = min(best.get(name, spent), spent)
            results[name] = [(r.answer, r.status, r.usage.generated_tokens,
                              [(c.text, c.answer, c.finished) for c in r.candidates]) for r in got]
    return {"cpu": {k: v[0] for k, v in best.items()}, "wall": {k: v[1] for k, v in best.items()},
            "same": results["tree"] == results["copied"], "runs": len(results["tree"])}


def run_here(rows: int, lengths: list[int], tokens: int) -> dict[str, Any]:
    """Both tables' figures on this checkout's code (no lengths: the prefill counts only)."""
    return {"bytes": [{"L": L, **measure(rows, L, tokens)} for L in lengths],
            "prefill": prefills()}


def run_old(path: str, rows: int, lengths: list[int], tokens: int) -> dict[str, Any]:
    """The same measure on another checkout's code (this file run there as a script)."""
    code = (f"import sys, json; sys.path.insert(0, {path!r}); "
            f"sys.argv = ['kvbytes']; exec(open({__file__!r}).read().replace("
            f"'__main__', '__skip__')); print(json.dumps(run_here({rows}, {lengths!r}, "
            f"{tokens})))")
    got = subprocess.run([sys.executable, "-c", code], cwd=path, capture_output=True,
                         text=True, check=True)
    return json.loads(got.stdout.strip().splitlines()[-1])


def table(results: dict[str, dict[str, Any]], rows: int, tokens: int) -> str:
    lines = [f"KV bytes moved per forward / new KV per forward ({rows} rows, {tokens} tokens "
             "a row, random fp32 Llama, 4 layers, 2 KV heads x 32)",
             "| code | L | 16 a prompt: expand | step | children: expand | step |",
             "| --- | --- | --- | --- | --- | --- |"]
    for code, res in results.items():
        for r in res["bytes"]:
            lines.append(f"| {code} | {r['L']} | {r['prompts_expand']:.2f}x | "
                         f"{r['prompts_step']:.2f}x | {r['children_expand']:.2f}x | "
                         f"{r['children_step']:.2f}x |")
    lines += ["", "Prompt tokens computed (tiny-arith, best-of-4, one arith prompt of "
              f"{next(iter(results.values()))['prefill']['prompt']} tokens; tokens computed "
              "over whole searches, the steps' recomputation included)",
              "| code | first solve | second solve, another seed | 16 seeds of another "
              f"prompt ({next(iter(results.values()))['prefill']['other']} tokens) in "
              "solve_many |",
              "| --- | --- | --- | --- |"]
    for code, res in results.items():
        p = res["prefill"]
        lines.append(f"| {code} | {p['first']} | {p['second']} | {p['many']} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description="KV bytes moved by expand, per forward")
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--lengths", default="128,512")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--old", help="a checkout of older code to measure side by side")
    ap.add_argument("--cpu", action="store_true", help="CPU seconds, tree against copied")
    ap.add_argument("--problems", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    if a.cpu:
        c = cpu_seconds(a.problems, a.repeats)
        print(f"tiny-arith, {c['runs']} searches (beam, best-of-16; {a.problems} problems, "
              f"2000 tokens, solve_many at 16), fewest of {a.repeats}: CPU s tree "
              f"{c['cpu']['tree']:.1f}, copied {c['cpu']['copied']:.1f}, ratio tree/copied "
              f"{c['cpu']['tree'] / c['cpu']['copied']:.2f}; wall ratio "
              f"{c['wall']['tree'] / c['wall']['copied']:.2f}; same Results: {c['same']}")
        return
    lengths = [int(x) for x in a.lengths.split(",") if x]  # "": the prefill counts only
    results: dict[str, dict[str, Any]] = {"this": run_here(a.rows, lengths, a.tokens)}
    if a.old:
        results[Path(a.old).name] = run_old(str(Path(a.old).resolve()), a.rows, lengths,
                                            a.tokens)
    print(table(results, a.rows, a.tokens))


if __name__ == "__main__":
    main()
