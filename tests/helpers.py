"""Test helpers: small local models (no download, built in a second) and references read
independently of the code under test.

`tiny_llama` is a randomly initialised LlamaForCausalLM over training.wordtok.char_tokenizer
(a real transformers tokenizer: one token per character, plus <pad>/<bos>/<eos>/<unk>).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

from training.wordtok import char_tokenizer

DATA = Path(__file__).resolve().parent / "data"
# The start of a program that tries system calls (the sandbox tests'): `errno_of(fn)` is 0 when
# fn() ran and the errno of the OSError it raised otherwise; `raw(nr, *args)` is a call of
# system call nr through libc that raises OSError(errno) on failure.
SYSCALLS = r'''
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def errno_of(fn):
    try:
        fn()
        return 0
    except OSError as exc:
        return exc.errno
def raw(nr, *args):
    def call():
        if libc.syscall(nr, *args) < 0:
            raise OSError(ctypes.get_errno(), "")
    return call
'''


def tiny_llama(alphabet: Iterable[str] = "ab \n0123456789+-*=.", *, seed: int = 0,
               hidden: int = 64, layers: int = 2, heads: int = 4, kv_heads: int = 2,
               max_positions: int = 1024) -> tuple[Any, Any]:
    """(model, tokenizer): a random fp32 Llama over a character vocabulary."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = char_tokenizer(alphabet)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=kv_heads, max_position_embeddings=max_positions,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).eval()
    return model, tok


def cache_columns(cache: Any, start: int, stop: int) -> Any:
    """Columns [start, stop) of batch row 0 of a transformers cache (a plain forward's), as
    an engine segment holds them: [L, 2, H, stop - start, D]. The reference for the engine's
    KV segments."""
    import torch

    return torch.stack([torch.stack([layer.keys[0], layer.values[0]])[:, :, start:stop]
                        for layer in cache.layers])


def written(cache: Any) -> Any:
    """The columns an engine batch cache (kv.SlabCache) holds so far [L, 2, B, KV, n, D] (a
    paged cache's rows' own, gathered from their blocks; past them: never written, empty
    memory)."""
    import torch

    from search.runtime.paged import PagedCache

    n = cache.length
    if isinstance(cache, PagedCache):
        return torch.stack([cache.gather(b, range(n)) for b in range(cache.rows)], dim=2)
    return cache.buf[..., :n, :]


def status_from_tree(result: Any, budget: Any = None) -> str:
    """What a Result's status must be, read independently of the code that set it: from the
    nodes its candidates name (their `finished` flags in the tree, not the candidates') and
    from its usage against `budget` (the search.Budget it ran under, None for none):
      "ok"                an answer was chosen, and no limit cut work short;
      "budget_exhausted"  an answer, the best so far, after a limit of `budget` cut work in
                          flight (stats["cut_in_flight"], stats["cut_by"] naming that limit);
      "no_answer"         none, though a candidate's node finished;
      "budget_exhausted"  none finished and a limit's stopping point was reached;
      "unfinished"        none finished within the budget (depth limits, empty trees)."""
    if result.answer is not None:
        if not result.stats.get("cut_in_flight"):
            return "ok"
        assert budget is not None and result.stats.get("cut_by") in budget.limits(), \
            f"cut by {result.stats.get('cut_by')!r}, not a limit of {budget}"
        return "budget_exhausted"
    nodes = {node.id: node for node in result.tree.walk()}
    if any(nodes[c.node_id].finished for c in result.candidates if c.node_id in nodes):
        return "no_answer"
    if budget is not None:
        spent = {"tokens": result.usage.generated_tokens, "scorer_calls":
                 result.usage.scorer_calls, "flops": result.usage.flops,
                 "seconds": result.usage.seconds}
        for name, limit in budget.limits().items():  # tokens hold back whole tokens
            stop = limit - budget.reserve_tokens if name == "tokens" else \
                (1 - budget.reserve) * limit
            if spent[name] >= stop:
                return "budget_exhausted"
    return "unfinished"


def dump(result: Any) -> str:
    """Everything a Result holds but its timings, nodes numbered by their place in the tree
    (ids count every node the process ever made, so they depend on what ran beside it)."""
    nodes = list(result.tree.walk())
    index = {n.id: i for i, n in enumerate(nodes)}

    def score(k: str, v: float) -> object:
        return index.get(int(v), "?") if k == "merged_into" else repr(v)

    tree = [(index[n.parent.id] if n.parent else None, n.depth, n.n_tokens, repr(n.cum_logprob),
             None if n.step is None else (n.step.text, n.step.token_ids,
                                          [repr(x) for x in n.step.logprobs],
                                          n.step.stop_reason),
             sorted((k, score(k, v)) for k, v in n.scores.flat().items())) for n in nodes]
    usage = {k: v for k, v in result.usage.as_dict().items() if k != "seconds"}
    cands = [(c.text, c.answer, repr(c.score), c.finished, index.get(c.node_id))
             for c in result.candidates]

    def ids(x: object, key: str = "") -> object:  # node ids in stats, by place in the tree
        if isinstance(x, dict):
            return {k: ids(v, k) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [ids(v, key) for v in x]
        return index.get(x, "?") if key.endswith("node") and isinstance(x, int) else repr(x)

    return json.dumps([result.answer, result.text, repr(result.score), result.status,
                       result.seed, result.algo, cands, usage, tree, ids(dict(result.stats))])


def verdict_rows(name: str) -> list[tuple[str, str, str, bool]]:
    """(family, gold, prediction, expected) for every gold of every hand-written row of
    tests/data/NAME.jsonl: the row's prediction answers each gold in its `right` and none in
    its `wrong` (a hedge or a withdrawn answer has no `right`: it answers no gold)."""
    out = []
    for line in (DATA / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        out += [(row["family"], gold, row["prediction"], gold in row["right"])
                for gold in (*row["right"], *row["wrong"])]
    return out


@contextmanager
def worker_calls() -> Iterator[list[float]]:
    """The timeout of every call the block makes to a sympy worker (verifiers._math.pool's
    Pool.run), in order. What bounds a verify's time, whatever the machine's speed: beyond its
    in-process checks it makes these calls, each killed at its timeout."""
    from verifiers._math.pool import Pool

    calls: list[float] = []
    run = Pool.run

    def counted(self: Pool, args: tuple[Any, ...], timeout: float) -> tuple[bool, str]:
        calls.append(timeout)
        return run(self, args, timeout)

    with mock.patch.object(Pool, "run", counted):
        yield calls
