"""The embedded reasoners and their PRMs: small Llamas this project trains itself
(training/train.py, training/prm_train.py), the demo's default models.

    model, tokenizer, engine_kwargs = load("tiny-arith")
    search.engines.hf.HFEngine.load("tiny-arith")     # the same, through search.models

Each lives in training/models/<name>/: config.json, generation_config.json, model.safetensors,
the character tokenizer (save_pretrained), training.json (config, seed, threads, data) and
metrics.json (the table printed by `python -m training.evaluate <name>`); a PRM's folder
holds its prm_format.json (rewards.prm). Importing this module registers them as embedded
models of the core with their folders (search.models.register, folder_of), so a scorer finds
what sits beside a model (a value head, a PRM's format) without importing this package;
search.plugins imports it the first time a model name is resolved.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from search.models import Form, quiet_transformers, register

MODELS_DIR = Path(__file__).parent / "models"
NAMES = ("tiny-arith", "tiny-code")


def model_dir(name: str) -> Path:
    """The folder of an embedded reasoner; FileNotFoundError if it is not committed."""
    if name not in NAMES:
        raise KeyError(f"unknown reasoner {name!r}; known: {', '.join(NAMES)}")
    folder = MODELS_DIR / name
    if not (folder / "model.safetensors").is_file():
        raise FileNotFoundError(f"reasoner {name!r} has no weights in {folder}; train it with "
                                f"`python -m training.train {name}`")
    return folder


PRMS = ("tiny-arith-prm", "tiny-code-prm")  # PRMs trained here (training/prm_train.py)


def prm_folder(name: str) -> Path | None:
    """The folder of an embedded PRM ("tiny-arith-prm"), None for any other name."""
    folder = MODELS_DIR / name
    return folder if name in PRMS and (folder / "config.json").is_file() else None


def training_record(name: str) -> dict[str, Any]:
    return json.loads((model_dir(name) / "training.json").read_text())


def metrics(name: str) -> dict[str, Any]:
    """The recorded evaluation table ({} before `python -m training.evaluate` has run)."""
    path = model_dir(name) / "metrics.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def load(name: str, dtype: Any = None) -> tuple[Any, Any, dict[str, Any]]:
    """(model, tokenizer, engine kwargs) for HFEngine: a plain prompt in the trained format."""
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

    folder = model_dir(name)
    record = training_record(name)
    tok = PreTrainedTokenizerFast.from_pretrained(str(folder))
    kw = {"dtype": dtype} if dtype is not None else {}
    model = LlamaForCausalLM.from_pretrained(str(folder), **kw).eval()
    engine_kwargs = {"chat": False, "prompt_template": record["config"]["prompt_template"],
                     "max_length": model.config.max_position_embeddings}
    return model, tok, engine_kwargs


def load_prm(name: str, dtype: Any = None) -> tuple[Any, Any, dict[str, Any]]:
    """(model, tokenizer, {}) of an embedded PRM: a causal LM like any other (its scorer is
    rewards.prm.HFPRM, `scorer="prm:<name>"`)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = prm_folder(name)
    if folder is None:
        raise FileNotFoundError(f"embedded PRM {name!r} has no weights in {MODELS_DIR / name}; "
                                "train it with `python -m training.prm_train`")
    kw = {"dtype": dtype} if dtype is not None else {}
    return (AutoModelForCausalLM.from_pretrained(str(folder), **kw).eval(),
            AutoTokenizer.from_pretrained(str(folder)), {})


def _loader(name: str) -> Any:
    load_one = load_prm if name in PRMS else load

    def load_quietly(dtype: Any = None) -> tuple[Any, Any, dict[str, Any]]:
        return quiet_transformers(lambda: load_one(name, dtype=dtype))

    return load_quietly


# tiny-arith reads problems.arith's word problems and writes one step per operation, steps
# apart by a blank line, ending "The answer is N." (the math reader's form)
FORMS = {"tiny-arith": Form(domain="math", step_delimiter=("\n\n",),
                            reads="arithmetic word problems in the form problems.arith writes "
                                  "them (\"Mia has 5 boxes with 8 apples in each box. ... How "
                                  "many apples does Ivy have now?\")")}

# embedded models of the core: HFEngine.load("tiny-arith") finds them, the scorer check
# (search.api.check_scorer) finds "prm:tiny-arith-prm" before anything loads, and
# rewards.prm and rewards.value_head find their folders (search.models.folder_of)
for _name in NAMES + PRMS:
    register(_name, _loader(_name), folder=MODELS_DIR / _name, form=FORMS.get(_name))
