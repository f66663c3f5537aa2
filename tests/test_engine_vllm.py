"""The vLLM engine (search.engines.vllm) against a fake `vllm.LLM`: what goes into each
SamplingParams and prompt, how outputs become steps, what is charged, and the clear errors
where vLLM or a GPU is absent. (No GPU here: a real vLLM run is not part of this suite.)"""

from __future__ import annotations

import string
import sys
import types
from dataclasses import dataclass, field
from typing import Any

import pytest
from helpers import char_tokenizer

import search
from search.engines.base import subseed
from search.engines.vllm import VLLMEngine, VLLMUnavailable
from search.types import Node, Problem, Step

TOK = char_tokenizer(string.ascii_letters + string.digits + "+=.? \n")
EOS = TOK.eos_token_id


class Params:
    """Stands in for vllm.SamplingParams: keeps its keyword arguments."""

    def __init__(self, **kw: Any) -> None:
        self.kw = kw


@dataclass
class Logprob:
    logprob: float


@dataclass
class Completion:
    index: int
    token_ids: list[int]
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str
    stop_reason: str | int | None
    text: str = ""


@dataclass
class Output:
    prompt_token_ids: list[int]
    outputs: list[Completion]
    num_cached_tokens: int = 0
    prompt_logprobs: list[dict[int, Logprob] | None] | None = None


def lp_of(position: int, token: int) -> float:
    """The fake model's log-probability of `token` at `position` (a plain formula)."""
    return -0.01 * ((position * 7 + token) % 50) - 0.05


@dataclass
class FakeLLM:
    """vllm.LLM's generate over a scripted model: two steps "a+b=c.\\n\\n" (a, b from the
    seed and sample), then "The answer is c." and EOS. Stop strings and max_tokens are applied
    as vLLM does; cached: prompt tokens reported as prefix-cache hits per request."""

    cached: int = 0
    calls: list[tuple[list[dict[str, list[int]]], list[Params]]] = field(default_factory=list)

    def get_tokenizer(self) -> Any:
        return TOK

    def script(self, prompt: list[int], seed: int, j: int) -> list[int]:
        a, b = (seed + j) % 5, (seed // 7 + 2 * j) % 4
        if TOK.decode(prompt).count("\n\n") < 2:
            return TOK(f"{a}+{b}={a + b}.\n\nthen", add_special_tokens=False)["input_ids"]
        return TOK(f"The answer is {a + b}.", add_special_tokens=False)["input_ids"] + [EOS]

    def generate(self, prompts: list[dict[str, list[int]]], sampling_params: list[Params],
                 use_tqdm: bool = True) -> list[Output]:
        assert not use_tqdm and len(prompts) == len(sampling_params)
        self.calls.append((prompts, sampling_params))
        return [self._one(p["prompt_token_ids"], sp.kw) for p, sp in zip(prompts, sampling_params)]

    def _one(self, prompt: list[int], kw: dict[str, Any]) -> Output:
        outs = []
        for j in range(kw["n"]):
            ids, finish, why = [], "length", None
            for t in self.script(prompt, kw["seed"], j):
                if len(ids) == kw["max_tokens"]:
                    break
                ids.append(t)
                hit = [s for s in kw.get("stop") or () if s in TOK.decode(ids)]
                if t == EOS or hit:
                    finish, why = "stop", (hit[0] if hit else None)
                    break
            lps = [{t: Logprob(lp_of(len(prompt) + i, t)), 0: Logprob(-9.0)}
                   for i, t in enumerate(ids)] if kw.get("logprobs") is not None else None
            outs.append(Completion(j, ids, lps, finish, why))
        plp = None
        if kw.get("prompt_logprobs") is not None:
            plp = [None] + [{t: Logprob(lp_of(i + 1, t))} for i, t in enumerate(prompt[1:])]
        return Output(prompt, outs[::-1], self.cached, plp)  # samples out of order on purpose


def step(node: Node) -> Step:
    assert node.step is not None, node
    return node.step


PROBLEM = Problem(prompt="What is 2+3?", id="p", answer="5")


def engine(**kw: Any) -> tuple[VLLMEngine, FakeLLM]:
    llm = FakeLLM(**kw)
    return VLLMEngine(llm, sampling=Params, name="fake"), llm


def test_sampling_params_and_prompts():
    eng, llm = engine()
    root = eng.root(PROBLEM)
    assert list(root.prompt_ids) == TOK("What is 2+3?\n")["input_ids"]
    kids = eng.expand([root], 3, stop=["\n\n"], max_tokens=40, temperature=0.6, top_p=0.9,
                      seed=11)[0]
    ((prompts, params),) = llm.calls
    assert prompts == [{"prompt_token_ids": list(root.prompt_ids)}]
    assert params[0].kw == {"n": 3, "temperature": 0.6, "top_p": 0.9, "max_tokens": 40,
                            "stop": ["\n\n"], "include_stop_str_in_output": True, "logprobs": 1,
                            "seed": subseed(11, 0)}
    eng.expand(kids[:2], 1, stop=None, max_tokens=5, seed=12)
    prompts, params = llm.calls[1]
    assert prompts == [{"prompt_token_ids": k.token_ids()} for k in kids[:2]]
    assert [p.kw["seed"] for p in params] == [subseed(12, 0), subseed(12, 1)]
    assert all(p.kw["stop"] is None and p.kw["max_tokens"] == 5 for p in params)


def test_steps_follow_the_outputs():
    eng, llm = engine()
    root = eng.root(PROBLEM)
    kids = eng.expand([root], 2, seed=3)[0]
    for j, kid in enumerate(kids):  # in sample order, stop string kept, logprobs per token
        ids = llm.script(list(root.prompt_ids), subseed(3, 0), j)[:8]  # "a+b=c.\n\n"
        assert step(kid).token_ids == tuple(ids) and step(kid).text.endswith("\n\n")
        assert step(kid).logprobs == tuple(lp_of(len(root.prompt_ids) + i, t)
                                          for i, t in enumerate(ids))
        assert step(kid).stop_reason == "stop"
    two = eng.expand([kids[0]], 1, seed=4)[0][0]
    leaf = eng.expand([two], 1, seed=5)[0][0]
    assert step(leaf).text.startswith("The answer is") and step(leaf).stop_reason == "eos"
    assert step(leaf).token_ids[-1] == EOS and leaf.finished
    short = eng.expand([two], 1, max_tokens=3)[0][0]
    assert (step(short).text, step(short).stop_reason) == ("The", "max_tokens")
    tight = VLLMEngine(llm, sampling=Params, max_length=two.n_tokens + 2)
    full = tight.expand([two], 1, max_tokens=50)[0][0]  # the context holds 2 more tokens
    assert llm.calls[-1][1][0].kw["max_tokens"] == 2
    assert (len(step(full).token_ids), step(full).stop_reason) == (2, "length") and full.finished


def test_meter_counts_tokens_and_prefix_cache_hits():
    eng, llm = engine(cached=3)
    roots = [eng.root(PROBLEM), eng.root(Problem(prompt="Why?", id="w"))]
    kids = eng.expand(roots, 2, seed=1)
    eng.expand([k for ks in kids for k in ks], 1, seed=2)
    prompts = [len(p["prompt_token_ids"]) for ps, _ in llm.calls for p in ps]
    steps = [n for r in roots for n in r.walk() if n.step is not None]
    used = eng.meter.usage()
    assert used.generated_tokens == sum(len(step(n).token_ids) for n in steps)
    assert used.prefill_tokens == sum(prompts) - 3 * len(prompts)


def test_token_level_calls():
    eng, llm = engine()
    root = eng.root(PROBLEM)
    n = len(root.prompt_ids)
    (top,) = eng.topk_next([root], 2)
    assert llm.calls[-1][1][0].kw == {"n": 1, "max_tokens": 1, "temperature": 0.0,
                                      "logprobs": 2, "seed": 0}
    first = llm.script(list(root.prompt_ids), 0, 0)[0]
    assert top == [(first, lp_of(n, first)), (0, -9.0)]
    before = eng.meter.usage()
    (kid,) = eng.extend([root], ["1+2"], generated=True)
    ids = TOK("1+2", add_special_tokens=False)["input_ids"]
    assert llm.calls[-1][1][0].kw["prompt_logprobs"] == 1
    assert step(kid).token_ids == tuple(ids) and step(kid).text == "1+2"
    assert step(kid).logprobs == tuple(lp_of(n + i, t) for i, t in enumerate(ids))
    spent = eng.meter.usage() - before
    assert (spent.generated_tokens, spent.prefill_tokens) == (3 + 1, n)  # + vLLM's one sample
    probe = TOK("12", add_special_tokens=False)["input_ids"]
    assert eng.next_logprobs([root, kid], probe) == [
        [lp_of(n, t) for t in probe], [lp_of(n + 3, t) for t in probe]]


def test_solve_through_the_fake():
    eng, _ = engine()
    result = search.solve(PROBLEM, "beam", engine=eng, seed=2, n=4, m=2)
    assert result.status == "ok" and result.answer is not None
    steps = [n for n in result.tree.walk() if n.step is not None]
    assert result.usage.generated_tokens == sum(len(step(n).token_ids) for n in steps)


def test_clear_errors_without_vllm_or_gpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    with pytest.raises(VLLMUnavailable, match="not installed"):
        VLLMEngine.load("some/model")
    with pytest.raises(VLLMUnavailable, match="not installed"):
        search.solve(PROBLEM, "greedy", engine="vllm:some/model")
    made: dict[str, Any] = {}
    fake = types.ModuleType("vllm")
    fake.SamplingParams = Params  # type: ignore[attr-defined]
    fake.LLM = lambda **kw: made.update(kw) or FakeLLM()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", fake)
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(VLLMUnavailable, match="needs a GPU"):
        VLLMEngine.load("some/model")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    eng = VLLMEngine.load("some/model", gpu_memory_utilization=0.5)
    assert made == {"model": "some/model", "enable_prefix_caching": True, "seed": 0,
                    "gpu_memory_utilization": 0.5}
    assert eng.name == "vllm:some/model" and eng.tokenizer is TOK
