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

A completion's answer is read here too: its choices in order (`choices`), each choice's tokens
and logprobs (`token_logprobs`), how its step ended (`step_end`), and the token counts of a
call's answers (`tally`); a malformed answer raises ServerError.

Completions logprobs come as the legacy lists (tokens, token_logprobs, top_logprobs: vLLM,
llama-cpp-python, OpenAI) or, from llama-server, as chat-style content entries.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from search.engines.openai.http_pool import ServerError

# finish_reason -> how the step ended ("stop" alone leaves stop string vs EOS open)
FINISH = {"stop": "stop", "length": "length", "eos_token": "eos", "stop_sequence": "stop_sequence",
          "eos": "eos"}


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


# -- a completion's answer ------------------------------------------------------------------------
def tally(answers: Sequence[Mapping[str, Any]]) -> tuple[dict[str, int], int]:
    """The server's token counts over a call's answers ({prompt_tokens,
    prompt_tokens_evaluated, cached_prompt_tokens, completion_tokens,
    prompt_cache_unreported, responses_without_usage}) and the longest answer in tokens."""
    prompt = evaluated = completion = longest = unreported = without = 0
    for data in answers:
        usage = data.get("usage") or {}
        lengths = [len(((c or {}).get("logprobs") or {}).get("tokens") or ())
                   for c in data.get("choices") or []]
        completion += int(usage.get("completion_tokens", sum(lengths)))
        total, done = prompt_counts(data)
        prompt += total
        evaluated += total if done is None else done
        unreported += done is None
        longest = max([longest, *lengths])
        without += "usage" not in data
    return {"prompt_tokens": prompt, "prompt_tokens_evaluated": evaluated,
            "cached_prompt_tokens": prompt - evaluated, "completion_tokens": completion,
            "prompt_cache_unreported": unreported, "responses_without_usage": without}, longest


def choices(data: Mapping[str, Any], n: int, *, may_ignore_n: bool) -> list[dict[str, Any]]:
    """The answer's choices in index order; one choice for n > 1 means the server ignored n
    (allowed where may_ignore_n: not yet known to honour it)."""
    found = data.get("choices")
    if not isinstance(found, list) or not all(isinstance(c, dict) for c in found):
        raise ServerError(f"the server's answer has no list of choices: {str(data)[:300]}")
    indices = sorted(int(c.get("index", i)) for i, c in enumerate(found))
    ignored = len(found) == 1 and n > 1 and may_ignore_n
    if indices != list(range(len(found))) or (len(found) != n and not ignored):
        raise ServerError(f"asked for n={n} choices, the server returned {len(found)} "
                          f"(indices {indices})")
    return sorted(found, key=lambda c: int(c.get("index", 0)))


def token_logprobs(choice: Mapping[str, Any]
                   ) -> tuple[list[str], list[float], Mapping[str, Any]]:
    """A choice's token strings, their logprobs and the whole logprobs entry (legacy lists)."""
    lp = legacy_logprobs(choice.get("logprobs") or {})
    tokens, values = lp.get("tokens"), lp.get("token_logprobs")
    if not isinstance(tokens, list) or not isinstance(values, list) \
            or len(tokens) != len(values):
        raise ServerError("a choice came back without per-token logprobs, which steps need "
                          "(their probabilities and lengths); serve them (llama-cpp-python:"
                          f" --logits_all true): {str(choice)[:300]}")
    return [str(t) for t in tokens], values, lp


def step_end(choice: Mapping[str, Any], tokens: Sequence[str], stops: Sequence[str],
             max_tokens: int) -> tuple[str, str]:
    """A generated choice's step text and stop reason. Servers cut a stop string off the
    text; the step keeps it, from the tokens (which hold it) or the server's stop_reason
    (vLLM) / matched_stop (SGLang), which also tell a stop string from EOS."""
    text, joined = str(choice.get("text") or ""), "".join(tokens)
    finish = FINISH.get(str(choice.get("finish_reason")))
    matched = choice.get("stop_reason", choice.get("matched_stop", ...))
    if finish is None:
        raise ServerError(f"unknown finish_reason in {str(choice)[:300]}")
    if finish == "length":
        reason = "max_tokens" if len(tokens) >= max_tokens else "length"
    elif finish != "stop" or matched is not ...:  # the server says which
        reason = "stop" if finish == "stop_sequence" or isinstance(matched, str) else "eos"
    else:  # it does not: decoding ends at the first stop string, so any in the tokens is it
        reason = "stop" if any(s in joined or s in text for s in stops) else "eos"
    if reason == "stop" and not any(text.endswith(s) or s in text for s in stops):
        # the server cut the stop string off: the tokens still hold it
        text = joined if joined.startswith(text) else text + (
            matched if isinstance(matched, str) else stops[0])
    return text, reason
