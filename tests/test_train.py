"""Training data for the embedded reasoners: what each batch teaches, checked by decoding it."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from problems import arith, codegen
from training import train


def learned(tok, ids, labels):
    """The characters a row is trained to predict, as one string per contiguous span."""
    spans, cur = [], []
    for i, lab in zip(ids.tolist(), labels.tolist()):
        if lab == -100:
            if cur:
                spans.append(tok.decode(cur))
                cur = []
            continue
        assert lab == i  # labels are the inputs (the model shifts them itself)
        cur.append(lab)
    if cur:
        spans.append(tok.decode(cur))
    return spans


def test_story_batches_learn_the_solution_and_eos_only():
    cfg = train.CONFIGS["tiny-arith"]
    tok = train.tokenizer_of(cfg)
    k = 0 if not train.is_drill(cfg, 0) else 1
    ids, mask, labels = train.batch_tensors(cfg, tok, 0, k)
    difficulty = cfg.difficulties[k % len(cfg.difficulties)]
    problems = arith.generate(cfg.batch_size, seed=train.data_seed(0, k), difficulty=difficulty)
    for row, p in enumerate(problems):
        n = int(mask[row].sum())
        assert tok.decode(ids[row, :n].tolist(), skip_special_tokens=True) == \
            f"{p.prompt}\n{p.metadata['solution']}"
        assert learned(tok, ids[row, :n], labels[row, :n]) == [p.metadata["solution"] + "<eos>"]
        assert (labels[row, n:] == -100).all()


def test_drill_batches_learn_true_results_only():
    cfg = train.CONFIGS["tiny-arith"]
    assert cfg.drill_every > 0
    tok = train.tokenizer_of(cfg)
    k = cfg.drill_every - 1
    assert train.is_drill(cfg, k) and not train.is_drill(cfg, k - 1)
    ids, mask, labels = train.batch_tensors(cfg, tok, 0, k)
    ops = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
           "/": lambda a, b: a / b}
    for row in range(ids.shape[0]):
        n = int(mask[row].sum())
        lines = tok.decode(ids[row, :n].tolist()).split("\n")
        assert len(lines) == cfg.drill_rows
        targets = learned(tok, ids[row, :n], labels[row, :n])
        assert targets == [" " + line.split(" = ")[1] for line in lines]
        for line in lines:
            m = re.fullmatch(r"(\d+) ([-+*/]) (\d+) = (\d+)", line)
            assert m is not None, line
            a, op, b, c = m.groups()
            assert ops[op](int(a), int(b)) == int(c)  # integer results only, / exact
            assert 2 <= int(c) <= arith.MAX_VALUE


def test_code_batches_learn_the_body_that_completes_the_stub():
    cfg = train.CONFIGS["tiny-code"]
    tok = train.tokenizer_of(cfg)
    ids, mask, labels = train.batch_tensors(cfg, tok, 0, 2)
    difficulty = cfg.difficulties[2 % len(cfg.difficulties)]
    problems = codegen.generate(cfg.batch_size, seed=train.data_seed(0, 2),
                                difficulty=difficulty)
    for row, p in enumerate(problems):
        n = int(mask[row].sum())
        assert tok.unk_token_id not in ids[row, :n].tolist()
        assert tok.decode(ids[row, :n - 1].tolist()) == p.metadata["solution"]
        [body] = learned(tok, ids[row, :n], labels[row, :n])
        assert p.prompt + body.removesuffix("<eos>") == p.metadata["solution"]


def test_batches_are_reproducible_and_never_use_evaluation_seeds():
    cfg = train.CONFIGS["tiny-arith"]
    tok = train.tokenizer_of(cfg)
    for k in (0, cfg.drill_every - 1):
        a, b = train.batch_tensors(cfg, tok, 3, k), train.batch_tensors(cfg, tok, 3, k)
        assert all((x == y).all() for x, y in zip(a, b))
    assert min(train.data_seed(s, k) for s in range(3) for k in range(10_000)) >= 1_000_000


def test_a_short_run_saves_a_loadable_model_with_its_record(tmp_path, monkeypatch):
    small = replace(train.CONFIGS["tiny-arith"], hidden=32, layers=1, heads=2, kv_heads=2,
                    intermediate=64, batch_size=2, drill_every=2, drill_rows=4,
                    phases=((3, 1e-3),), warmup=1)
    monkeypatch.setitem(train.CONFIGS, "tiny-test", small)
    out = train.train("tiny-test", seed=1, out=tmp_path / "m", threads=1, log_every=1)
    record = json.loads((out / "training.json").read_text())
    assert record["steps_done"] == 3 and not record["stopped_early"]
    assert record["config"]["drill_every"] == 2 and [c["step"] for c in record["loss_curve"]] == [1, 2, 3]
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(str(out))
    assert model.config.hidden_size == 32


def test_code_targets_refuse_a_reference_that_does_not_extend_the_prompt():
    cfg = train.CONFIGS["tiny-code"]
    p = codegen.generate(1, seed=0)[0]
    bad = replace(p, metadata={**p.metadata, "solution": "def g():\n    return 1\n"})
    with pytest.raises(ValueError, match="does not extend the prompt"):
        train.target(cfg, bad)
