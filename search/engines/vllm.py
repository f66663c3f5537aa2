"""Offline vLLM (`vllm.LLM`) behind the Engine protocol, with automatic prefix caching on.

    engine = VLLMEngine.load("Qwen/Qwen2.5-1.5B-Instruct", gpu_memory_utilization=0.8)
    search.solve(problem, "beam", engine="vllm:Qwen/Qwen2.5-1.5B-Instruct")

vLLM is imported by `load` only (`pip install 'tts-search[vllm]'`, on a machine with a CUDA
GPU); where it or a GPU is missing, `load` raises VLLMUnavailable saying which. Every engine
call is one `llm.generate` over all its nodes; a node is sent as the token ids of its whole
path (prompt + steps), so the model continues exactly the tokens the search holds, and vLLM's
prefix cache (enable_prefix_caching=True) keeps the KV of shared path prefixes: a child
recomputes its parent's tokens only if vLLM evicted them. Each request carries its own seed
(derived from the call's seed and the row, as in search.engines.openai).

Steps: token ids and per-token logprobs as vLLM returns them (logprobs=1; vLLM's V1 engine
reports the raw model's log-probabilities by default, i.e. temperature 1 as Step asks), the
text decoded from the ids (the stop string kept: include_stop_str_in_output). finish_reason
"stop" is a stop string when vLLM's stop_reason is one, else EOS; "length" is "max_tokens" at
the step's cap, "length" when the context (max_model_len) is full.

Accounting: generated = tokens vLLM returned; prefill = prompt tokens less those vLLM found in
its prefix cache (RequestOutput.num_cached_tokens); passes = one prefill plus one per token of
the longest row; FLOPs 2 * n_params per processed token when n_params is given. extend and
next_logprobs are exact (prompt_logprobs over the forced tokens); each also samples one token
that vLLM requires and counts it as generated.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from search.engines.base import DEFAULT_STOP, budget_child, check_expand, server_cap, subseed
from search.engines.prompts import PromptFormat
from search.session import Bindable
from search.types import Node, Problem, Step

PLAIN = PromptFormat()


class VLLMUnavailable(RuntimeError):
    """vLLM is not installed, or there is no GPU for it."""


class VLLMEngine(Bindable):
    """The Engine protocol over a `vllm.LLM` (or any object with its generate/get_tokenizer).

    sampling: the SamplingParams class (default vllm.SamplingParams, imported when first used).
    max_length: the context length (default: the LLM's max_model_len where it says).
    """

    def __init__(self, llm: Any, *, tokenizer: Any = None, prompt: PromptFormat = PLAIN,
                 sampling: Callable[..., Any] | None = None, max_length: int | None = None,
                 n_params: int | None = None, name: str = "") -> None:
        self.llm = llm
        self.tokenizer = tokenizer if tokenizer is not None else llm.get_tokenizer()
        self.prompt, self.n_params, self._sampling = prompt, n_params, sampling
        config = getattr(getattr(llm, "llm_engine", None), "model_config", None)
        self.max_length = int(max_length or getattr(config, "max_model_len", 0) or 1 << 30)
        self.name = name or str(getattr(config, "model", "") or "vllm")

    @classmethod
    def load(cls, model: str, *, prompt: PromptFormat = PLAIN, n_params: int | None = None,
             seed: int = 0, **llm_kwargs: Any) -> VLLMEngine:
        """vllm.LLM(model, enable_prefix_caching=True, seed=seed, **llm_kwargs) as an engine."""
        try:  # by name: pyright would take this very file for "vllm"
            vllm = importlib.import_module("vllm")
        except ImportError as err:
            raise VLLMUnavailable(f"the vLLM engine needs vLLM, which is not installed here "
                                  f"({err}); `pip install 'tts-search[vllm]'` on a machine "
                                  "with a CUDA GPU") from err
        import torch

        if not torch.cuda.is_available():
            raise VLLMUnavailable("the vLLM engine needs a GPU and torch sees none "
                                  "(torch.cuda.is_available() is False)")
        llm = vllm.LLM(model=model, **{"enable_prefix_caching": True, "seed": seed,
                                       **llm_kwargs})
        return cls(llm, prompt=prompt, n_params=n_params, name=f"vllm:{model}",
                   sampling=vllm.SamplingParams)

    # -- requests ----------------------------------------------------------------------------
    def params(self, **fields: Any) -> Any:
        sampling = self._sampling
        if sampling is None:  # learned once, for every search: set on the part
            sampling = self.part._sampling = importlib.import_module("vllm").SamplingParams
        return sampling(**fields)

    def _generate(self, prompts: Sequence[Sequence[int]], params: Sequence[Any],
                  forced: int = 0, generated: bool = False) -> list[Any]:
        """One llm.generate; charges the meter. forced: prompt tokens that the caller forced
        (extend), counted as generated when `generated` (token-level search) else prefill."""
        outs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts],
                                 sampling_params=list(params), use_tqdm=False)
        if len(outs) != len(prompts):
            raise RuntimeError(f"vLLM returned {len(outs)} outputs for {len(prompts)} prompts")
        new = sum(len(o.token_ids) for out in outs for o in out.outputs)
        cached = sum(int(getattr(out, "num_cached_tokens", 0) or 0) for out in outs)
        prefill = sum(map(len, prompts)) - cached
        longest = max((len(o.token_ids) for out in outs for o in out.outputs), default=0)
        processed = prefill + new
        self.meter.charge_model(generated=new + (forced if generated else 0),
                                prefill=prefill - (forced if generated else 0),
                                passes=1 + longest,
                                flops=2.0 * (self.n_params or 0) * processed)
        return list(outs)

    # -- the protocol ------------------------------------------------------------------------
    def root(self, problem: Problem) -> Node:
        ids = self.prompt.ids(problem, self.tokenizer)
        if len(ids) >= self.max_length:
            raise ValueError(f"prompt of {len(ids)} tokens does not fit the context "
                             f"({self.max_length})")
        return self.session.kv.add(Node(problem=problem, prompt_ids=ids))

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=True)

    def expand(self, nodes: Sequence[Node], n: int = 1, *, stop: Sequence[str] | None = DEFAULT_STOP,
               max_tokens: int = 256, temperature: float = 1.0, top_p: float = 1.0,
               seed: int = 0) -> list[list[Node]]:
        nodes = check_expand(nodes, n, max_tokens, temperature, top_p)
        max_tokens = server_cap(self.meter, len(nodes) * n, max_tokens)  # within the budget
        if not max_tokens:
            return [[budget_child(node) for _ in range(n)] for node in nodes]
        caps = [max(1, min(max_tokens, self.max_length - node.n_tokens)) for node in nodes]
        params = [self.params(n=n, temperature=temperature, top_p=top_p, max_tokens=cap,
                              stop=list(stop or ()) or None, include_stop_str_in_output=True,
                              logprobs=1, seed=subseed(seed, i))
                  for i, cap in enumerate(caps)]
        outs = self._generate([node.token_ids() for node in nodes], params)
        children = []
        for node, out in zip(nodes, outs):
            if len(out.outputs) != n:
                raise RuntimeError(f"vLLM returned {len(out.outputs)} samples for n={n}")
            children.append([Node(parent=node, step=self._step(o, max_tokens))
                             for o in sorted(out.outputs, key=lambda o: o.index)])
        return children

    def _step(self, out: Any, max_tokens: int) -> Step:
        ids = [int(t) for t in out.token_ids]
        if out.logprobs is None or len(out.logprobs) != len(ids):
            raise RuntimeError("vLLM returned no logprob for some sampled token")
        lps = tuple(float(lp[t].logprob) for t, lp in zip(ids, out.logprobs))
        if out.finish_reason == "length":
            reason = "max_tokens" if len(ids) >= max_tokens else "length"  # else: context full
        else:  # stop_reason: the stop string, or None / a token id for EOS
            reason = "stop" if isinstance(out.stop_reason, str) else "eos"
        return Step(self.decode(ids), tuple(ids), lps, reason)

    def topk_next(self, nodes: Sequence[Node], k: int) -> list[list[tuple[int, float]]]:
        params = [self.params(n=1, max_tokens=1, temperature=0.0, logprobs=k, seed=0)
                  for _ in nodes]
        outs = self._generate([node.token_ids() for node in nodes], params)
        return [sorted(((int(t), float(lp.logprob)) for t, lp in out.outputs[0].logprobs[0].items()),
                       key=lambda p: -p[1])[:k] for out in outs]

    def _forced(self, nodes: Sequence[Node], conts: Sequence[Sequence[int]],
                generated: bool) -> list[tuple[float, ...]]:
        """Exact logprobs of each continuation after its node (vLLM's prompt_logprobs)."""
        prompts = [node.token_ids() + list(c) for node, c in zip(nodes, conts)]
        params = [self.params(n=1, max_tokens=1, temperature=0.0, prompt_logprobs=1, seed=0)
                  for _ in prompts]
        outs = self._generate(prompts, params, forced=sum(map(len, conts)), generated=generated)
        out = []
        for prompt, cont, res in zip(prompts, conts, outs):
            tail: Sequence[Mapping[int, Any]] = res.prompt_logprobs[len(prompt) - len(cont):]
            out.append(tuple(float(lp[t].logprob) for t, lp in zip(cont, tail)))
        return out

    def extend(self, nodes: Sequence[Node], continuations: Sequence[str | Sequence[int]], *,
               generated: bool = False) -> list[Node]:
        if len(nodes) != len(continuations):
            raise ValueError("extend needs one continuation per node")
        conts = [self.tokenizer(c, add_special_tokens=False)["input_ids"] if isinstance(c, str)
                 else [int(t) for t in c] for c in continuations]
        if any(not c for c in conts):
            raise ValueError("extend: an empty continuation")
        lps = self._forced(nodes, conts, generated)
        eos = getattr(self.tokenizer, "eos_token_id", None)
        return [Node(parent=node, step=Step(self.decode(c), tuple(c), lp,
                                            "eos" if c[-1] == eos else "forced"))
                for node, c, lp in zip(nodes, conts, lps)]

    def next_logprobs(self, nodes: Sequence[Node], token_ids: Sequence[int]) -> list[list[float]]:
        pairs = [(node, [int(t)]) for node in nodes for t in token_ids]
        flat = self._forced([p[0] for p in pairs], [p[1] for p in pairs], generated=False)
        k = len(token_ids)
        return [[lp[0] for lp in flat[i * k:(i + 1) * k]] for i in range(len(nodes))]
