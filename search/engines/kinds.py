"""Engines by kind: the prefix of an engine name says which loads it.

    openai:URL#MODEL   an OpenAI-compatible server (search.engines.openai)
    vllm:MODEL         offline vLLM on a GPU (search.engines.vllm)
    anything else      a transformers model by embedded name, path or Hugging Face id
                       (search.engines.hf; its kind is "hf")

ENGINE_KINDS is a search.plugins.Registry of EngineKind by prefix: another package adds a kind by
an entry point in the group "tts_search.engines" (name = the prefix, value =
"module:attr" naming an EngineKind), and `solve(engine="myprefix:...")` then loads it.
Each kind's modules are imported only when a name of that kind is checked or loaded.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from search.engines.base import Engine
from search.plugins import Registry

DEFAULT_KIND = "hf"  # names with no registered prefix


@dataclass(frozen=True)
class EngineKind:
    """load(name, **engine options) -> the Engine; check(name) raises a clear error where
    the name cannot load here, loading nothing heavy. Both receive the whole name, prefix
    included."""

    load: Callable[..., Engine]
    check: Callable[[str], None]


def _load_openai(name: str, **kwargs: Any) -> Engine:
    from search.engines.openai import OpenAIEngine

    return OpenAIEngine.from_spec(name, **kwargs)


def _check_openai(name: str) -> None:
    from search.engines.openai import parse_spec

    parse_spec(name)


def _load_vllm(name: str, **kwargs: Any) -> Engine:
    from search.engines.vllm import VLLMEngine

    return VLLMEngine.load(name.removeprefix("vllm:"), **kwargs)


def _check_vllm(name: str) -> None:
    from search.engines.vllm import VLLMUnavailable

    if importlib.util.find_spec("vllm") is None:
        raise VLLMUnavailable(f"{name}: the vLLM engine needs vLLM, which is not installed "
                              "here (`pip install 'tts-search[vllm]'` on a machine with a "
                              "CUDA GPU)")


def _load_hf(name: str, **kwargs: Any) -> Engine:
    from search.engines.hf import HFEngine

    return HFEngine.load(name, **kwargs)


def _check_hf(name: str) -> None:
    from search.models import check_model

    check_model(name)


ENGINE_KINDS: Registry[EngineKind] = Registry("engines", "engine kind", {
    "openai": EngineKind(_load_openai, _check_openai),
    "vllm": EngineKind(_load_vllm, _check_vllm),
    DEFAULT_KIND: EngineKind(_load_hf, _check_hf),
})


def kind_of(name: str) -> EngineKind:
    """The kind that loads engine `name`: its prefix's ("openai:..."), else transformers'."""
    prefix, sep, _ = name.partition(":")
    if sep and prefix != DEFAULT_KIND and prefix and "/" not in prefix and prefix in ENGINE_KINDS:
        return ENGINE_KINDS.get(prefix)
    return ENGINE_KINDS.get(DEFAULT_KIND)
