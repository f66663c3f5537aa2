"""HFConfig (search/engines/hf/config.py): the transformers engine's options in one frozen
object. Every rule refused with its message, the defaults (the engine's keyword defaults
before the config existed, written out here), and options against a config."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from helpers import tiny_llama

from search.engines.hf import HFConfig, HFEngine, SpecConfig
from search.engines.prompts import INSTRUCTIONS
from search.types import Problem

# HFEngine.__init__'s keyword defaults as they stood before HFConfig (git show b4f5f0f:
# search/engines/hf.py): the config must keep every one of them
OLD_DEFAULTS = dict(device=None, max_length=None, chat=None, system_prompt=None,
                    prompt_template="{prompt}\n", instructions=INSTRUCTIONS, name="",
                    keep_hidden=False, dtype=None, speculate=False, pack=None,
                    share_prefix=64, lean=True)
# options added since, at their defaults
NEW_DEFAULTS = dict(merge=None, tree_attention=True, prompt_cache=1 << 30, kv_cache=4 << 30,
                    kv_dtype=None)


def test_defaults_are_the_engines_old_keyword_defaults():
    cfg = HFConfig()
    got = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(HFConfig)}
    assert set(got) == set(OLD_DEFAULTS) | set(NEW_DEFAULTS)
    assert {k: dict(v) if k == "instructions" else v for k, v in got.items()} == \
        {**OLD_DEFAULTS, **NEW_DEFAULTS}
    assert cfg.spec is None and cfg.torch_device == torch.device(
        "cuda" if torch.cuda.is_available() else "cpu")
    assert HFConfig(speculate=True).spec == SpecConfig()
    mine = SpecConfig(tree=0)
    assert HFConfig(speculate=mine).spec is mine


def test_frozen_and_its_instructions_read_only():
    words = {"math": "M {prompt}"}
    cfg = HFConfig(instructions=words)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.share_prefix = 0  # type: ignore[misc]
    with pytest.raises(TypeError):
        cfg.instructions["math"] = "x"  # type: ignore[index]
    words["math"] = "changed later"  # the config took a copy
    assert cfg.instructions["math"] == "M {prompt}"


@pytest.mark.parametrize("options, error, message", [
    (dict(max_length=0), ValueError, "max_length must be an int >= 2"),
    (dict(max_length=1.5), ValueError, "max_length must be an int >= 2"),
    (dict(share_prefix=-1), ValueError, "share_prefix must be an int >= 0"),
    (dict(share_prefix=None), ValueError, "share_prefix must be an int >= 0"),
    (dict(speculate="yes"), TypeError, "speculate must be a bool or a SpecConfig"),
    (dict(merge="yes"), TypeError, "merge must be None, True or False"),
    (dict(dtype="float99"), ValueError, "dtype must be a floating torch dtype or its name"),
    (dict(dtype="int64"), ValueError, "dtype must be a floating torch dtype or its name"),
    (dict(dtype="int8", device="meta"), ValueError, "dtype='int8' is a CPU path.*on meta"),
    (dict(pack=True, device="meta"), ValueError, "pack=True, but no linear layer could be packed"),
    (dict(pack=True, device="cpu", dtype=torch.bfloat16), ValueError, "pack=True, but no linear"),
    (dict(pack=True, device="cpu", dtype="fp16"), ValueError, "it needs fp32 weights on a CPU"),
])
def test_each_rule_is_refused_with_its_message(options, error, message):
    with pytest.raises(error, match=message):
        HFConfig(**options)


@pytest.mark.parametrize("options", [
    dict(max_length=2), dict(share_prefix=0), dict(speculate=False),
    dict(dtype="int8", device="cpu"), dict(dtype="int8", device="cpu", pack=True),
    dict(pack=True, device="cpu", dtype="fp32"), dict(pack=False, device="meta"),
    dict(dtype="bf16", device="cpu")])
def test_what_the_rules_allow(options):
    cfg = HFConfig(**options)
    assert all(getattr(cfg, k) == v for k, v in options.items())


@pytest.mark.parametrize("options, message", [
    (dict(max_draft=0), "need 1 <= first_draft <= max_draft"),
    (dict(first_draft=9), "need 1 <= first_draft <= max_draft, got 9, 8"),
    (dict(first_draft=0), "need 1 <= first_draft <= max_draft"),
    (dict(ngram=()), "ngram must list context lengths >= 1"),
    (dict(ngram=(2, 0)), "ngram must list context lengths >= 1"),
    (dict(recycle_k=-1), "recycle_k, max_batch_tokens, tree must be >= 0"),
    (dict(tree=-1), "recycle_k, max_batch_tokens, tree must be >= 0"),
    (dict(table_limit=0), "table_limit >= 1"),
    (dict(min_prob=1.0), r"min_prob must be in \[0, 1\)"),
])
def test_spec_config_rules(options, message):
    with pytest.raises(ValueError, match=message):
        SpecConfig(**options)


def test_options_and_config():
    base = HFConfig(device="cpu", chat=False, share_prefix=4)
    assert HFConfig.of(base) is base
    assert HFConfig.of(None, share_prefix=4, device="cpu", chat=False) == base
    assert HFConfig.of(base, share_prefix=4, chat=False) is base  # agreeing options are fine
    assert HFConfig.of(HFConfig(), instructions=dict(INSTRUCTIONS)) == HFConfig()
    with pytest.raises(ValueError, match="option.s. chat, share_prefix given beside a config "
                                         "that says otherwise"):
        HFConfig.of(base, share_prefix=0, chat=True, device="cpu")
    with pytest.raises(TypeError, match="unknown engine option.s. share_min, tokens"):
        HFConfig.of(None, share_min=4, tokens=1)
    with pytest.raises(TypeError, match="config must be an HFConfig, got dict"):
        HFConfig.of({"chat": False})  # type: ignore[arg-type]


def test_the_engine_takes_a_config_or_its_options(tiny_model):
    """HFEngine(model, tok, config) and HFEngine(model, tok, **options) build the same engine:
    the same config, the same greedy tokens; a contradicting option is refused before the
    model is touched."""
    model, tok = tiny_model
    cfg = HFConfig(chat=False, device="cpu", share_prefix=1, max_length=40)
    a = HFEngine(copy.deepcopy(model), tok, cfg)
    b = HFEngine(copy.deepcopy(model), tok, chat=False, device="cpu", share_prefix=1, max_length=40)
    assert a.config == b.config == cfg and a.max_length == 40 and a.kv.share_prefix == 1
    outs = []
    for eng in (a, b):
        root = eng.root(Problem(prompt="12+34="))
        kids = eng.expand([root], 2, stop=None, max_tokens=6, temperature=0)[0]
        outs.append([None if k.step is None else k.step.token_ids for k in kids])
    assert outs[0] == outs[1]
    fresh, _ = tiny_llama(seed=1)
    before = copy.deepcopy(fresh.state_dict())
    with pytest.raises(ValueError, match="share_prefix given beside a config"):
        HFEngine(fresh, tok, cfg, share_prefix=0)
    with pytest.raises(TypeError, match="unknown engine option"):
        HFEngine(fresh, tok, share_min=0)
    after = fresh.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)


def test_load_fills_the_models_defaults_where_the_config_leaves_them(monkeypatch, tiny_model):
    """HFEngine.load: a model's own engine defaults (an embedded reasoner's prompt format)
    apply under options and under a config's defaults, never over what the config sets."""
    import search.models

    model, tok = tiny_model
    defaults = {"chat": False, "prompt_template": "Q: {prompt}\nA:"}
    monkeypatch.setattr(search.models, "load_model",
                        lambda name, **kw: (copy.deepcopy(model), tok, dict(defaults)))
    by_options = HFEngine.load("m", device="cpu")
    by_config = HFEngine.load("m", HFConfig(device="cpu"))
    assert by_options.config == by_config.config == HFConfig(device="cpu", name="m", **defaults)
    own = HFEngine.load("m", HFConfig(device="cpu", prompt_template="{prompt}="))
    assert own.config.prompt_template == "{prompt}=" and own.config.chat is False
    p = Problem(prompt="1+1")
    assert by_config.prompt_ids(p) == tok("Q: 1+1\nA:")["input_ids"]
    assert own.prompt_ids(p) == tok("1+1=")["input_ids"]
    with pytest.raises(ValueError, match="prompt_template given beside a config"):
        HFEngine.load("m", HFConfig(device="cpu"), prompt_template="{prompt}?")


def test_a_16_bit_checkpoint_bound_for_the_cpu_loads_as_fp32_where_it_fits(tmp_path,
                                                                             monkeypatch):
    """HFEngine.load with no dtype: a bf16 checkpoint (transformers loads a checkpoint in its
    own dtype) bound for the CPU becomes fp32, the dtype of the packed GEMMs and the attention
    kernel, so its searches merge into shared forwards; asked for bf16 it stays bf16, and so
    it does where fp32 would not fit, said by a warning (as for a bf16 model given as is)."""
    from search.runtime import dtypes, lean

    model, tok = tiny_llama()
    model.to(torch.bfloat16).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    eng = HFEngine.load(str(tmp_path), device="cpu", chat=False)
    assert next(eng.model.parameters()).dtype == torch.float32 and eng.packed
    assert isinstance(eng.forward, lean.LeanLlama) and eng.forward.merges
    asked = HFEngine.load(str(tmp_path), device="cpu", chat=False, dtype="bfloat16")
    assert next(asked.model.parameters()).dtype == torch.bfloat16 and not asked.packed
    with pytest.warns(UserWarning, match="16-bit weights on the CPU"):
        HFEngine(copy.deepcopy(asked.model), tok, device="cpu", chat=False)
    huge = torch.nn.Linear(1, 1).to("meta")
    huge.weight = torch.nn.Parameter(torch.empty(10**12, device="meta"))
    assert dtypes.fp32_fits(eng.model) and not dtypes.fp32_fits(huge)  # (6 TB)
    monkeypatch.setattr(dtypes, "fp32_fits", lambda m: False)
    with pytest.warns(UserWarning, match="dtype='float32' converts them"):
        big = HFEngine.load(str(tmp_path), device="cpu", chat=False)
    assert next(big.model.parameters()).dtype == torch.bfloat16
    assert dtypes.cpu_16bit(big.model, torch.device("cpu"), None)
    assert not dtypes.cpu_16bit(big.model, torch.device("cpu"), "bfloat16")
