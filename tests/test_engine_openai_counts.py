"""The OpenAI engine charges what the server says it computed (issue 19, item 4): prefill is
the prompt tokens the server evaluated, read from each server's own fields (llama-server's
timings, OpenAI/vLLM/SGLang's cached_tokens), with a server that says nothing
(llama-cpp-python) charged every prompt token and flagged; FLOPs come from the model's
parameter count (given, the server's, or a local config); server counts are per solve.

The stub (tests/test_engine_openai.py) keeps a single-slot prefix cache like llama.cpp's and
counts the prompt tokens it evaluated itself: that count is the reference, not the engine's
parsing."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from test_engine_openai import FAST, PROBLEM, Stub

import search
from search.engines.openai import OpenAIEngine
from search.engines.openai.server_usage import params_from_config, prompt_counts
from search.types import Budget


@pytest.fixture
def stub() -> Iterator[Stub]:
    server = Stub()
    server.prefix_cache = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def run(stub: Stub, shape: str, **kw) -> tuple[OpenAIEngine, search.Result]:
    stub.shape = shape
    eng = OpenAIEngine(stub.url, "stub-model", retry=FAST, concurrency=1, **kw)
    result = search.solve(PROBLEM, "beam", Budget(tokens=400), engine=eng, seed=1, n=4, m=2)
    return eng, result


@pytest.mark.parametrize("shape", ["openai", "llama-server"])
def test_prefill_is_what_the_server_evaluated(stub, shape):
    eng, result = run(stub, shape)
    used = result.usage
    # a beam's children extend their parents' prompts: the slot cache hits often
    assert 0 < stub.evaluated < stub.usage["prompt_tokens"]
    assert used.prefill_tokens == stub.evaluated
    assert used.generated_tokens == stub.usage["completion_tokens"]
    server = result.stats["server"]
    assert server["prompt_tokens"] == stub.usage["prompt_tokens"]
    assert server["cached_prompt_tokens"] == stub.usage["prompt_tokens"] - stub.evaluated
    assert server["prompt_cache_unreported"] == 0 and server["requests"] == len(stub.bodies)


@pytest.mark.parametrize("shape", ["llama-cpp-python", "vllm-plain"])
def test_a_server_that_does_not_say_is_charged_every_prompt_token_and_flagged(stub, shape):
    eng, result = run(stub, shape)
    assert result.usage.prefill_tokens == stub.usage["prompt_tokens"] > stub.evaluated
    assert result.stats["server"]["prompt_cache_unreported"] == len(stub.bodies) > 0


def test_flops_from_the_servers_parameter_count(stub):
    eng, result = run(stub, "llama-server")
    assert (eng.n_params, eng.n_params_source) == (stub.n_params, "server")
    processed = stub.evaluated + stub.usage["completion_tokens"]
    assert result.usage.flops == 2.0 * stub.n_params * processed
    given, res2 = run(stub, "llama-server", n_params=10)
    assert given.n_params_source == "given" and res2.usage.flops > 0
    blind, res3 = run(stub, "openai")  # no meta, no tokenizer, no local config of "stub-model"
    assert blind.n_params is None and blind.n_params_source == "unknown"
    assert res3.usage.flops == 0
    assert res3.stats["server"]["flops_uncounted_tokens"] == \
        res3.usage.prefill_tokens + res3.usage.generated_tokens > 0


def test_flops_from_the_tokenizers_model_config(stub, tmp_path):
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    config.save_pretrained(tmp_path)
    # the reference: the model built for real, every parameter counted once
    want = sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())
    assert params_from_config(str(tmp_path)) == want
    assert params_from_config(str(tmp_path / "nowhere")) is None
    stub.shape = "openai"
    eng = OpenAIEngine(stub.url, str(tmp_path), retry=FAST)  # the server names a local model
    eng.expand([eng.root(PROBLEM)], 1)
    assert (eng.n_params, eng.n_params_source) == (want, f"config of {tmp_path}")


def test_server_counts_are_per_solve(stub):
    stub.shape = "llama-server"
    eng = OpenAIEngine(stub.url, "stub-model", retry=FAST, concurrency=1)
    first = search.solve(PROBLEM, "best_of_n", engine=eng, seed=1, n=3)
    sent = len(stub.bodies)
    second = search.solve(PROBLEM, "best_of_n", engine=eng, seed=2, n=3)
    assert first.stats["server"]["requests"] == sent
    assert second.stats["server"]["requests"] == len(stub.bodies) - sent
    assert second.stats["server"]["completion_tokens"] == second.usage.generated_tokens
    assert eng.server_stats["requests"] == len(stub.bodies)  # the engine keeps the totals


@pytest.mark.parametrize(("answer", "want"), [
    ({"usage": {"prompt_tokens": 9, "completion_tokens": 2}}, (9, None)),  # llama-cpp-python
    ({"usage": {"prompt_tokens": 9, "prompt_tokens_details": {"cached_tokens": 7}}}, (9, 2)),
    ({"usage": {"prompt_tokens": 9, "prompt_tokens_details": None}}, (9, None)),  # vLLM
    ({"usage": {"prompt_tokens": 9}, "timings": {"prompt_n": 3, "cache_n": 6}}, (9, 3)),
    # llama-server: timings win over a details field; prompt_n + cache_n is the prompt
    ({"usage": {"prompt_tokens": 9, "prompt_tokens_details": {"cached_tokens": 0}},
      "timings": {"prompt_n": 1, "cache_n": 8}}, (9, 1)),
    ({"usage": {"prompt_tokens": 9, "prompt_tokens_details": {"cached_tokens": "x"}}},
     (9, None)),
    ({"timings": {"prompt_n": -1}}, (0, None)),  # llama-server's "not measured"
    ({}, (0, None)),
])
def test_prompt_counts_read_each_servers_fields(answer, want):
    assert prompt_counts(answer) == want


def test_llama_server_logprobs_in_the_chat_style_format(stub):
    """llama-server answers /v1/completions logprobs as {content: [{token, logprob,
    top_logprobs}]}: steps, top-k and forcing read it as they read the legacy lists."""
    from test_engine_openai import scripted

    stub.shape = "llama-server"
    eng = OpenAIEngine(stub.url, "stub-model", retry=FAST)
    root = eng.root(PROBLEM)
    kid = eng.expand([root], 1, seed=2)[0][0]
    toks, _ = scripted(stub.bodies[-1]["prompt"], stub.bodies[-1]["seed"])
    assert kid.step is not None and kid.step.logprobs == tuple(v for _, v in toks[:4])
    (top,) = eng.topk_next([root], 2)
    assert [eng.decode([i]) for i, _ in top][1] == "zz"
