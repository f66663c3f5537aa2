"""A PRM whose checkpoint does not fit its format is refused, loudly, before any search runs:
several broken variants of every format (a head missing or newly initialised, a head of the
wrong size, the wrong class, a tokenizer the format cannot read, an unknown architecture),
each an error naming what was expected and what was found."""

from __future__ import annotations

import copy as copying
import json
import shutil
from pathlib import Path

import pytest
from prm_checkpoints import BUILDERS, char_tok, qwen_prm, trl, value_head

import search
from rewards.prm_formats import PRMFormatError
from search import scoring
from search.types import Problem


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    root = tmp_path_factory.mktemp("good")
    return {name: build(root / name) for name, build in BUILDERS.items()}


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def drop_weights(folder: Path, prefix: str) -> Path:
    """The checkpoint without the tensors whose names start with `prefix`."""
    from safetensors.torch import load_file, save_file

    weights = load_file(folder / "model.safetensors")
    kept = {k: v for k, v in weights.items() if not k.startswith(prefix)}
    assert len(kept) < len(weights)
    save_file(kept, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def refused(spec: str, *match: str) -> str:
    with pytest.raises(PRMFormatError) as err:
        scoring.load(spec)
    for text in match:
        assert text in str(err.value), str(err.value)
    return str(err.value)


def test_the_issue_case_a_qwen_prm_named_plainly_is_refused_not_read_as_a_causal_lm(good):
    """The Qwen2.5-Math-PRM layout named with no options: refused (its class is the
    folder's code), where it used to load as a causal LM with a random lm_head."""
    refused(f"prm:{good['qwen-prm']}", "trust_remote_code", "Qwen2ForProcessRewardModel")
    refused(f"prm:{good['qwen-prm']},format=math-shepherd", "ForCausalLM",
            "Qwen2ForProcessRewardModel")
    refused(f"prm:{good['qwen-prm']},format=rlhflow", "ForCausalLM")
    refused(f"prm:{good['qwen-prm']},format=trl,trust_remote_code=true", "ForTokenClassification")


def test_qwen_prm_heads_that_do_not_fit(good, tmp_path):
    three = qwen_prm(tmp_path / "three", num_labels=3)
    refused(f"prm:{three},trust_remote_code=true", "3 outputs")
    headless = drop_weights(copy(good["qwen-prm"], tmp_path / "headless"), "score.")
    refused(f"prm:{headless},trust_remote_code=true", "missing from the checkpoint",
            "score.")
    refused(f"prm:{good['math-shepherd']},format=qwen-prm,trust_remote_code=true",
            "Qwen2ForProcessRewardModel", "MistralForCausalLM")


def test_causal_lm_formats_refuse_what_they_cannot_read(good, tmp_path):
    no_head = drop_weights(copy(good["math-shepherd"], tmp_path / "nohead"), "lm_head.")
    for fmt in ("math-shepherd", "rlhflow", "value-head"):
        refused(f"prm:{no_head},format={fmt}", "lm_head.weight")
    refused(f"prm:{good['math-shepherd']}", "format=math-shepherd", "rlhflow")  # which one?
    refused(f"prm:{good['trl']},format=math-shepherd", "ForCausalLM",
            "Qwen2ForTokenClassification")
    # RLHFlow reads a chat: a tokenizer without a template is refused at load
    refused(f"prm:{good['math-shepherd']},format=rlhflow", "chat template")
    # Math-Shepherd's "+ -" must be two tokens after BOS: a tokenizer that spells it in three
    plain = copy(good["rlhflow"], tmp_path / "plain")
    char_tok().save_pretrained(plain)
    refused(f"prm:{plain},format=math-shepherd", "encode('+ -')")


def test_token_classifiers_and_value_heads_of_the_wrong_shape(good, tmp_path):
    refused(f"prm:{trl(tmp_path / 'three', num_labels=3)}", "two-label", "3")
    headless = drop_weights(copy(good["trl"], tmp_path / "headless"), "score.")
    refused(f"prm:{headless}", "missing from the checkpoint", "score.")
    wide = value_head(tmp_path / "wide", shape=(2, 32))
    refused(f"prm:{wide}", "v_head.summary", "(2, 32)")
    no_v = drop_weights(copy(good["value-head"], tmp_path / "nov"), "v_head.")
    refused(f"prm:{no_v},format=value-head", "v_head.summary", "None")
    refused(f"prm:{no_v}", "format=math-shepherd")  # a plain causal LM again: say which


def test_unknown_architectures_and_formats(good, tmp_path):
    odd = copy(good["trl"], tmp_path / "odd")
    config = json.loads((odd / "config.json").read_text())
    (odd / "config.json").write_text(json.dumps({**config, "architectures": ["Qwen2Model"]}))
    refused(f"prm:{odd}", "Qwen2Model", "no PRM format")
    refused(f"prm:{good['trl']},format=qwen_prm", "unknown PRM format", "qwen-prm")
    with pytest.raises(ValueError, match="key=value"):
        scoring.parse(f"prm:{good['trl']},sep=x")
    with pytest.raises(ValueError, match="true or false"):
        scoring.parse(f"prm:{good['trl']},trust_remote_code=maybe")


def test_a_declared_format_with_a_headless_checkpoint(good, tmp_path):
    from rewards.prm import MATH_SHEPHERD, declare_format

    folder = drop_weights(copy(good["math-shepherd"], tmp_path / "declared"), "lm_head.")
    declare_format(folder, MATH_SHEPHERD)
    refused(f"prm:{folder}", "lm_head.weight")
    refused(f"prm:{folder},format=rlhflow", "prm_format.json")


def test_solve_refuses_before_the_search_runs(good, tiny_model, monkeypatch):
    """search.solve with a PRM that does not fit: the error comes from loading, and no
    search starts; a format name no row has is refused before any model loads."""
    from search import api
    from search.engines.hf import HFEngine

    model, tok = tiny_model
    started: list[int] = []
    monkeypatch.setattr(api, "run", lambda *a, **k: started.append(1))
    eng = HFEngine(copying.deepcopy(model), tok, chat=False, device="cpu")
    with pytest.raises(PRMFormatError, match="trust_remote_code"):
        search.solve(Problem(prompt="1+2="), "beam", engine=eng,
                     scorer=f"prm:{good['qwen-prm']}", progress=False)
    loads: list[str] = []
    monkeypatch.setattr(api, "get_engine", lambda *a, **k: loads.append("engine"))
    with pytest.raises(PRMFormatError, match="unknown PRM format"):
        search.solve(Problem(prompt="1+2="), "beam", engine=eng,
                     scorer=f"prm:{good['trl']},format=skywork", progress=False)
    assert started == [] and loads == []


def test_prm_spec_options_read_back():
    from search.scoring import ScorerSpec, parse, prm_spec

    want = ScorerSpec(prm="/ckpt/q", format="qwen-prm", trust_remote_code=True)
    assert parse("prm:/ckpt/q, format=qwen-prm ,trust_remote_code=TRUE") == want
    assert parse(prm_spec("/ckpt/q", format="qwen-prm", trust_remote_code=True)) == want
    assert parse("org/prm,trust_remote_code=false") == ScorerSpec(prm="org/prm")
    assert want.options() == {"format": "qwen-prm", "trust_remote_code": True}
    assert ScorerSpec(prm="x").options() == {}
