"""Value head: features from the engine, logistic fit, AUC, scorer plumbing (tiny model)."""

from __future__ import annotations

import pytest
import torch

from rewards.value_head import ValueHeadScorer, auc, fit, load, save
from search.engines.hf import HFEngine
from search.types import Problem


def test_auc_against_hand_computed():
    assert auc([0.9, 0.8, 0.3, 0.1], [True, True, False, False]) == 1.0
    assert auc([0.1, 0.2, 0.8, 0.9], [True, True, False, False]) == 0.0
    # pairs (pos, neg): (.5,.5) tie -> .5, (.5,.2) win, (.1,.5) loss, (.1,.2) loss -> 1.5 / 4
    assert auc([0.5, 0.1, 0.5, 0.2], [True, True, False, False]) == pytest.approx(0.375)
    with pytest.raises(ValueError):
        auc([0.1], [True])


def test_head_learns_a_label_the_features_encode(tiny_model, tmp_path):
    """Label: the step's second-to-last token is a digit. The feature (the hidden state that
    read that token) encodes it, so a fitted head must beat chance on held-out steps."""
    model, tok = tiny_model
    eng = HFEngine(model, tok, chat=False, device="cpu", keep_hidden=True)
    eng.eos_ids = frozenset()
    digits = {tok.convert_tokens_to_ids(c) for c in "0123456789"}
    roots = [eng.root(Problem(prompt=p)) for p in ("1+2=", "9*9=", "a b", "7-3=")]
    kids = [k for ks in eng.expand(roots, 60, stop=None, max_tokens=4, seed=1) for k in ks]
    x = torch.stack([eng.step_features[k] for k in kids])
    y = torch.tensor([float(k.steps()[-1].token_ids[-2] in digits) for k in kids])
    assert 0.1 < y.mean() < 0.9  # both classes present
    head = fit(x[:160], y[:160])
    with torch.no_grad():
        held_out = auc(head(x[160:]).tolist(), (y[160:] > 0.5).tolist())
    assert held_out > 0.75
    save(head, tmp_path, {"test": True})
    again = load(tmp_path)
    scorer = ValueHeadScorer(eng, again)
    assert scorer.score(roots[0].problem, kids[:3]) == pytest.approx(head(x[:3]).tolist())
    assert scorer.meter.scorer_calls == 3


def test_scorer_needs_features(tiny_model, tmp_path):
    model, tok = tiny_model
    plain = HFEngine(model, tok, chat=False, device="cpu")
    head = fit(torch.randn(8, model.config.hidden_size), torch.rand(8))
    with pytest.raises(ValueError, match="keep_hidden"):
        ValueHeadScorer(plain, head)
    eng = HFEngine(model, tok, chat=False, device="cpu", keep_hidden=True)
    root = eng.root(Problem(prompt="1+1="))
    (forced,) = eng.extend([root], ["22"])
    with pytest.raises(ValueError, match="no step features"):
        ValueHeadScorer(eng, head).score(root.problem, [forced])
    with pytest.raises(FileNotFoundError, match="no value head"):
        load(tmp_path)


def test_registry_value_scorer_loads_the_head_next_to_the_model(tiny_model, tmp_path):
    """scorer="value": the head saved in the model's folder, with the engine switched to
    recording step features; no head there is a clear error."""
    from rewards.registry import load as load_scorer

    model, tok = tiny_model
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    eng = HFEngine.load(str(tmp_path), chat=False, device="cpu")
    assert not eng.kv.keep_hidden
    with pytest.raises(FileNotFoundError, match="no value head"):
        load_scorer("value", engine=eng)
    head = fit(torch.randn(16, model.config.hidden_size), torch.rand(16))
    save(head, tmp_path, {"test": True})
    scorer = load_scorer("value", engine=eng)
    assert eng.kv.keep_hidden
    root = eng.root(Problem(prompt="1+2="))
    kids = eng.expand([root], 3, stop=None, max_tokens=3, seed=0)[0]
    x = torch.stack([eng.step_features[k] for k in kids])
    with torch.no_grad():
        assert scorer.score(root.problem, kids) == pytest.approx(head(x).tolist())
