"""What an OpenAI-compatible server says it computed, read from its answers and endpoints:
the prompt tokens it evaluated (its prefix cache excluded), the model's parameter count from
a config, the prefix-cache counters of /metrics, per-token logprobs in either format. Field
names, by server:

    llama.cpp llama-server   timings.prompt_n (prompt tokens processed), timings.cache_n
                             (taken from its cache), /v1/models data[].meta.n_params; newer
                             builds also usage.prompt_tokens_details.cached_tokens
    OpenAI, SGLang           usage.prompt_tokens_details.cached_tokens
    vLLM                     the same with --enable-prompt-tokens-details; /v1/models root
    llama-cpp-python 0.3.x   usage.prompt_tokens and completion_tokens only (its prefix
                             reuse shows in its verbose log, not in the answer)

Completions logprobs come as the legacy lists (tokens, token_logprobs, top_logprobs: vLLM,
llama-cpp-python, OpenAI) or, from llama-server, as chat-style content entries.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def prompt_counts(data: Mapping[str, Any]) -> tuple[int, int | None]:
    """(prompt tokens, of them evaluated by the server or None when it does not say), from
    one answer: llama-server's timings.prompt_n (tokens it processed; timings.cache_n came
    from its cache), else usage.prompt_tokens less usage.prompt_tokens_details.cached_tokens
    (OpenAI, vLLM, SGLang, newer llama-server)."""
    usage: Mapping[str, Any] = data.get("usage") or {}
    total = _count(usage.get("prompt_tokens")) or 0
    timings: Mapping[str, Any] = data["timings"] if isinstance(data.get("timings"), Mapping) \
        else {}
    if (done := _count(timings.get("prompt_n"))) is not None:
        return max(total, done + (_count(timings.get("cache_n")) or 0)), done
    details = usage.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, Mapping) else None
    if cached is not None:
        return total, max(0, total - cached)
    return total, None


def _count(value: Any) -> int | None:
    """A token count from JSON: a non-negative int (or integral float), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 \
            or value != int(value):
        return None
    return int(value)


def params_from_config(name: str) -> int | None:
    """The parameter count of the model `name` (embedded name, local folder, or hub id in
    the local cache) from its config alone (a model built on the meta device: no weights
    are read); None when there is no such config here."""
    try:
        from search.models import check_model, embedded

        if name in embedded():
            return None  # no config file to read (an embedded tokenizer's model is counted)
        if check_model(name) == "hub":
            from huggingface_hub import try_to_load_from_cache

            if not isinstance(try_to_load_from_cache(name, "config.json"), str):
                return None  # not downloaded: do not fetch a model to count it
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        config = AutoConfig.from_pretrained(name)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        return int(sum(p.numel() for p in model.parameters()))
    except (OSError, ValueError, KeyError, ImportError):
        return None


def cache_counters(metrics: str) -> dict[str, float]:
    """The prefix-cache counters of a Prometheus /metrics text (vLLM, SGLang)."""
    out: dict[str, float] = {}
    for line in metrics.splitlines():
        name, _, value = line.rpartition(" ")
        if not line.startswith("#") and ("prefix_cache" in name or "cache_hit" in name):
            try:
                out[name] = float(value)
            except ValueError:
                continue
    return out


def legacy_logprobs(lp: Mapping[str, Any]) -> Mapping[str, Any]:
    """A choice's logprobs as the legacy completions lists {tokens, token_logprobs,
    top_logprobs: [{token: logprob}]}, converted from llama-server's chat-style
    {content: [{token, logprob, top_logprobs: [{token, logprob}]}]} where that is what came."""
    content = lp.get("content") if isinstance(lp, Mapping) else None
    if "tokens" in lp or not isinstance(content, list) \
            or not all(isinstance(c, Mapping) for c in content):
        return lp
    return {"tokens": [c.get("token") for c in content],
            "token_logprobs": [c.get("logprob") for c in content],
            "top_logprobs": [{t.get("token"): t.get("logprob") for t in c.get("top_logprobs") or ()
                              if isinstance(t, Mapping)} for c in content]}
