"""Loading a PRM by its format's own model class, checked: a head that does not match is an
error before any search, never a silent fallback.

What is checked, before a PRM is used:
- the format: given (`format=`), declared (prm_format.json), known from the hub id
  (prm_formats.KNOWN_IDS) or read off the checkpoint when only one format fits it
  (Qwen2ForProcessRewardModel, a token classifier, a causal LM holding v_head weights); a
  plain causal LM fits two hub formats and must be named;
- the architecture config.json names, against what the format's class is;
- transformers' loading report (output_loading_info): a weight the class has and the
  checkpoint lacks (newly initialised: the issue's lm_head) or one of another shape is an
  error naming them;
- the head's size (two labels; a value head of one output over the hidden state).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rewards.prm_formats import (
    DECLARED,
    HUB_FORMATS,
    KNOWN_IDS,
    LM_PAIR,
    QWEN_HEAD,
    TOKEN_CLASSES,
    VALUE,
    HubFormat,
    PRMFormatError,
    hub_format,
)

QWEN_CLASS = "Qwen2ForProcessRewardModel"
V_HEAD = ("v_head.summary.weight", "v_head.summary.bias")  # Skywork's PRM_MODEL.state_dict


def config_of(where: str) -> dict[str, Any]:
    """The checkpoint's config.json as a dict (a folder's, or a cached hub id's)."""
    from transformers.utils.hub import cached_file

    path = Path(where) / "config.json" if Path(where).is_dir() else \
        cached_file(where, "config.json")
    if path is None or not Path(path).is_file():
        raise PRMFormatError(f"{where}: no config.json")
    return json.loads(Path(path).read_text())


def weight_shapes(where: str) -> dict[str, tuple[int, ...]]:
    """Every tensor name in the checkpoint's safetensors files -> its shape, read from the
    headers ({} where the checkpoint has no safetensors file)."""
    from safetensors import safe_open

    shapes = {}
    for file in _safetensors(where):
        with safe_open(file, framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 (a safe_open handle is no dict)
                shapes[key] = tuple(f.get_slice(key).get_shape())
    return shapes


def read_weights(where: str, names: list[str]) -> dict[str, torch.Tensor]:
    """The named tensors of the checkpoint."""
    from safetensors import safe_open

    out = {}
    for file in _safetensors(where):
        with safe_open(file, framework="pt") as f:
            out.update({k: f.get_tensor(k) for k in names if k in f.keys()})  # noqa: SIM118
    return out


def _safetensors(where: str) -> list[str]:
    from transformers.utils.hub import cached_file

    def find(name: str) -> str | None:
        if Path(where).is_dir():
            return str(Path(where) / name) if (Path(where) / name).is_file() else None
        return cached_file(where, name, _raise_exceptions_for_missing_entries=False)

    index = find("model.safetensors.index.json")
    if index is not None:
        files = sorted(set(json.loads(Path(index).read_text())["weight_map"].values()))
        return [f for f in (find(name) for name in files) if f is not None]
    single = find("model.safetensors")
    return [single] if single is not None else []


def choose_format(name: str, where: str, given: str | None, declared: bool) -> str:
    """The format a PRM is read in: `given`, else DECLARED where the folder declares one, else
    the hub id's, else the one format that fits the checkpoint; PRMFormatError where none is
    given and more than one (or none) could fit."""
    if given is not None:
        if given != DECLARED:
            hub_format(given)
        if declared and given != DECLARED:
            raise PRMFormatError(f"{name}: the folder declares its reading in prm_format.json, "
                                 f"and format={given} says another; drop one of them")
        if given == DECLARED and not declared:
            raise PRMFormatError(f"{name}: format=declared, but the folder holds no "
                                 "prm_format.json")
        return given
    if declared:
        return DECLARED
    if name in KNOWN_IDS:
        return KNOWN_IDS[name]
    archs = config_of(where).get("architectures") or []
    if QWEN_CLASS in archs:
        return "qwen-prm"
    if any(a.endswith("ForTokenClassification") for a in archs):
        return "trl"
    if any(a.endswith("ForCausalLM") for a in archs):
        if set(V_HEAD) <= set(weight_shapes(where)):
            return "value-head"
        raise PRMFormatError(
            f"{name} is a causal LM ({', '.join(archs)}) with no prm_format.json: it reads as "
            "math-shepherd (an 'ки' tag after each step) or rlhflow (each step a user turn, "
            f"'+' from the assistant); say which, e.g. prm:{name},format=math-shepherd")
    raise PRMFormatError(f"{name}: architecture {archs or 'unnamed'} is no PRM format's "
                         f"class; formats: {', '.join(HUB_FORMATS)} (or a prm_format.json)")


def load_head(where: str, fmt: HubFormat, *, trust_remote_code: bool = False,
              device: torch.device | None = None) -> Any:
    """The PRM in `where` loaded by `fmt`'s class, every check above passed (for `device`:
    see load_model)."""
    from transformers import AutoModel, AutoModelForCausalLM, AutoModelForTokenClassification

    archs = config_of(where).get("architectures") or []
    if fmt.head in (LM_PAIR, VALUE):
        _expect(archs, "ForCausalLM", fmt.name, where)
        model = load_model(AutoModelForCausalLM, where, fmt, trust_remote_code, device)
        return ValueHeadLM(model, _value_head(where, model)) if fmt.head == VALUE else model
    if fmt.head == TOKEN_CLASSES:
        _expect(archs, "ForTokenClassification", fmt.name, where)
        labels = len(config_of(where).get("id2label") or {0: 0, 1: 1})
        if labels != 2:
            raise PRMFormatError(f"{where}: format {fmt.name} reads a two-label token classifier "
                                 f"(TRL's PRMTrainer: 0 = wrong step, 1 = right); it has {labels}")
        return load_model(AutoModelForTokenClassification, where, fmt, trust_remote_code,
                          device)
    assert fmt.head == QWEN_HEAD
    if QWEN_CLASS not in archs:
        raise PRMFormatError(f"{where}: format {fmt.name} reads a {QWEN_CLASS}; config.json "
                             f"names {archs or 'no architecture'}")
    if not trust_remote_code:
        raise PRMFormatError(f"{where}: {QWEN_CLASS} is the checkpoint's own code (auto_map in "
                             "config.json), which runs only with trust_remote_code=true "
                             f"(prm:{where},format={fmt.name},trust_remote_code=true)")
    model = load_model(AutoModel, where, fmt, True, device)
    if type(model).__name__ != QWEN_CLASS:
        raise PRMFormatError(f"{where}: format {fmt.name} loads a {QWEN_CLASS}; the folder's "
                             f"code made a {type(model).__name__}")
    out = [m for m in model.score.modules() if isinstance(m, torch.nn.Linear)][-1]
    if out.out_features != 2:
        raise PRMFormatError(f"{where}: {QWEN_CLASS}'s reward head has {out.out_features} "
                             "outputs; the card reads two (softmax, the positive class)")
    return model


def _expect(archs: list[str], suffix: str, fmt: str, where: str) -> None:
    if not any(a.endswith(suffix) for a in archs):
        raise PRMFormatError(f"{where}: format {fmt} reads a *{suffix} model; config.json "
                             f"names {', '.join(archs) or 'no architecture'}")


def load_model(auto: Any, where: str, fmt: HubFormat | str, trust: bool,
               device: torch.device | None = None) -> Any:
    """auto.from_pretrained(where), refused where a weight of the class was missing from the
    checkpoint (newly initialised) or of another shape; 16-bit weights bound for the CPU
    (`device`) made fp32 where they fit, as the engine's (search.runtime.dtypes)."""
    from search.models import quiet_transformers
    from search.runtime import dtypes

    name = fmt if isinstance(fmt, str) else fmt.name
    try:
        model, info = quiet_transformers(lambda: auto.from_pretrained(
            where, trust_remote_code=trust, output_loading_info=True))
    except RuntimeError as err:  # transformers refuses weights of another shape
        raise PRMFormatError(f"{where}: its weights do not fit format {name}'s class: "
                             f"{str(err).splitlines()[0]}") from err
    check_loading(info, where, name)
    return (model if device is None else dtypes.fp32_for_cpu(model, device)).eval()


def check_loading(info: Mapping[str, Any], where: str, fmt: str) -> None:
    """Refuse a load whose report says weights were newly initialised or mismatched."""
    missing = sorted(info.get("missing_keys") or [])
    mismatched = sorted(str(k) for k in info.get("mismatched_keys") or [])
    what = ([f"missing from the checkpoint (they would be random): {missing[:6]}"] if missing
            else []) + ([f"of another shape: {mismatched[:6]}"] if mismatched else [])
    if what:
        raise PRMFormatError(f"{where} does not hold what format {fmt}'s class expects: "
                             f"weights {'; '.join(what)}")


def _value_head(where: str, model: Any) -> torch.nn.Linear:
    """Skywork's v_head.summary (hidden -> 1) read from the checkpoint, shapes checked."""
    hidden = int(model.config.hidden_size)
    shapes = weight_shapes(where)
    want = {V_HEAD[0]: (1, hidden), V_HEAD[1]: (1,)}
    found = {k: shapes.get(k) for k in want}
    if found != want:
        raise PRMFormatError(f"{where}: format value-head reads a value head "
                             f"v_head.summary of shape {want}; the checkpoint holds {found}")
    tensors = read_weights(where, list(want))
    head = torch.nn.Linear(hidden, 1)
    head.load_state_dict({"weight": tensors[V_HEAD[0]], "bias": tensors[V_HEAD[1]]})
    return head.float().eval()


class ValueHeadLM(torch.nn.Module):
    """A causal LM with a scalar head on its last hidden state (Skywork's PRM_MODEL, eval
    mode: its dropout is off): forward -> sigmoid(head(hidden)) [B, T]."""

    def __init__(self, lm: Any, head: torch.nn.Linear) -> None:
        super().__init__()
        self.lm, self.head = lm, head
        self.config = lm.config

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
                ) -> torch.Tensor:
        out = self.lm(input_ids=input_ids, attention_mask=attention_mask,
                      output_hidden_states=True)
        hidden = out.hidden_states[-1]
        return torch.sigmoid(self.head(hidden.to(self.head.weight.dtype)).squeeze(-1))


@dataclass(frozen=True)
class Rewards:
    """How a head's output becomes a per-position reward [B, T]."""

    head: str

    def __call__(self, model: Any, ids: torch.Tensor, mask: torch.Tensor,
                 pair: tuple[int, int] | None) -> torch.Tensor:
        if self.head == VALUE:
            return model(ids, attention_mask=mask).float()
        out = model(input_ids=ids, attention_mask=mask)
        # the logits: the output itself, its first item (a tuple) or .logits (a ModelOutput)
        logits = out if isinstance(out, torch.Tensor) else \
            out[0] if isinstance(out, tuple) else out.logits
        if self.head == LM_PAIR:
            assert pair is not None  # [B, T, 2] before the cast: a full vocab stays as it is
            return torch.softmax(logits[..., list(pair)].float(), -1)[..., 0]
        return torch.softmax(logits.float(), -1)[..., 1]  # two labels: the positive class
