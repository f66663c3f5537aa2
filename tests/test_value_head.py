"""Value head: features from the engine, logistic fit, AUC, scorer plumbing (tiny model)."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from rewards.value_head import CONFIDENCE, ValueHeadScorer, confidence, features, load
from search.engines.hf import HFEngine
from search.types import Node, Problem, Step
from training.value_train import auc, fit, held_out, save


def test_auc_against_hand_computed():
    assert auc([0.9, 0.8, 0.3, 0.1], [True, True, False, False]) == 1.0
    assert auc([0.1, 0.2, 0.8, 0.9], [True, True, False, False]) == 0.0
    # pairs (pos, neg): (.5,.5) tie -> .5, (.5,.2) win, (.1,.5) loss, (.1,.2) loss -> 1.5 / 4
    assert auc([0.5, 0.1, 0.5, 0.2], [True, True, False, False]) == pytest.approx(0.375)
    with pytest.raises(ValueError):
        auc([0.1], [True])


def test_confidence_figures_against_hand_computed():
    root = Node(problem=Problem(prompt="q"), prompt_ids=(1, 2))
    a = Node(parent=root, step=Step("x", (3, 4), (-0.1, -2.0), "stop"))
    b = Node(parent=a, step=Step("y", (5, 6, 7), (-0.5, float("-inf"), -0.3), "stop"))
    assert confidence(a) == pytest.approx([-2.0, -1.05, -2.0, 1.0, 1.0])
    # path log-probabilities -0.1 -2 -0.5 -30 -0.3 (-inf clamped): below log(1/2) = -0.693: 2
    assert confidence(b) == pytest.approx([-30.0, -32.9 / 5, -30.0, 2.0, 2.0])
    assert len(confidence(b)) == len(CONFIDENCE)
    with pytest.raises(ValueError, match="root"):
        confidence(root)
    bad = Node(parent=a, step=Step("z", (8,), (math.nan,), "stop"))
    with pytest.raises(ValueError, match="NaN"):
        confidence(bad)


def test_held_out_report_separates_signal_from_baselines():
    """Steps whose label is carried by one confidence column (the path's min log-probability)
    and not by the hidden state: the full head and that column rank test steps well, the
    hidden-state-only head does not; within-group AUC averages over groups with both classes."""
    g = torch.Generator().manual_seed(0)

    def split(n: int) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
        hid = torch.randn(n, 8, generator=g)
        conf = torch.randn(n, len(CONFIDENCE), generator=g)
        y = (conf[:, 0] + 0.3 * torch.randn(n, generator=g) > 0).float()
        return torch.cat([hid, conf], 1), y, [i % 3 for i in range(n)]

    head, report = held_out(split(400), split(200), l2=1e-2)
    assert report["test_auc"] > 0.9 and report["baselines"]["path_min_logprob"] > 0.9
    assert report["test_auc_within_difficulty"] > 0.9
    assert 0.35 < report["baselines"]["hidden_state_only"] < 0.65
    assert head.mean.shape == (8 + len(CONFIDENCE),)


def test_head_learns_a_label_the_features_encode(tiny_model, tmp_path):
    """Label: the step's second-to-last token is a digit. The feature (the hidden state that
    read that token) encodes it, so a fitted head must beat chance on held-out steps."""
    model, tok = tiny_model
    eng = HFEngine(copy.deepcopy(model), tok, chat=False, device="cpu", keep_hidden=True)
    eng.eos_ids = frozenset()
    digits = {tok.convert_tokens_to_ids(c) for c in "0123456789"}
    roots = [eng.root(Problem(prompt=p)) for p in ("1+2=", "9*9=", "a b", "7-3=")]
    kids = [k for ks in eng.expand(roots, 60, stop=None, max_tokens=4, seed=1) for k in ks]
    x = features(eng, kids)
    assert torch.equal(x[:, :-len(CONFIDENCE)], torch.stack([eng.step_features[k] for k in kids]))
    assert x[0, -len(CONFIDENCE):].tolist() == pytest.approx(confidence(kids[0]))
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
    plain = HFEngine(copy.deepcopy(model), tok, chat=False, device="cpu")
    head = fit(torch.randn(8, model.config.hidden_size + len(CONFIDENCE)), torch.rand(8))
    with pytest.raises(ValueError, match="keep_hidden"):
        ValueHeadScorer(plain, head)
    eng = HFEngine(copy.deepcopy(model), tok, chat=False, device="cpu", keep_hidden=True)
    root = eng.root(Problem(prompt="1+1="))
    (forced,) = eng.extend([root], ["22"])
    with pytest.raises(ValueError, match="no step features"):
        ValueHeadScorer(eng, head).score(root.problem, [forced])
    sampled = eng.expand([root], 1, stop=None, max_tokens=2, seed=0)[0]
    other = fit(torch.randn(8, model.config.hidden_size), torch.rand(8))  # another model's
    with pytest.raises(ValueError, match="another model"):
        ValueHeadScorer(eng, other).score(root.problem, sampled)
    with pytest.raises(FileNotFoundError, match="no value head"):
        load(tmp_path)


def test_registry_value_scorer_loads_the_head_next_to_the_model(tiny_model, tmp_path):
    """scorer="value": the head saved in the model's folder, with the engine switched to
    recording step features; no head there is a clear error."""
    from search.scoring import load as load_scorer

    model, tok = tiny_model
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    eng = HFEngine.load(str(tmp_path), chat=False, device="cpu")
    assert not eng.kv.keep_hidden
    with pytest.raises(FileNotFoundError, match="no value head"):
        load_scorer("value", engine=eng)
    head = fit(torch.randn(16, model.config.hidden_size + len(CONFIDENCE)), torch.rand(16))
    save(head, tmp_path, {"test": True})
    assert not eng.config.keep_hidden
    scorer = load_scorer("value", engine=eng)
    assert eng.kv.keep_hidden and eng.config.keep_hidden  # its public switch, said in its config
    root = eng.root(Problem(prompt="1+2="))
    kids = eng.expand([root], 3, stop=None, max_tokens=3, seed=0)[0]
    x = features(eng, kids)
    with torch.no_grad():
        assert scorer.score(root.problem, kids) == pytest.approx(head(x).tolist())


@pytest.mark.slow
def test_committed_tiny_arith_head_ranks_fresh_steps_above_chance():
    """The head committed next to tiny-arith, on steps of 40 problems it never saw (levels
    3-7, labels from fresh rollouts; AUC 0.68 when written): better than chance, and usable
    as search's "value" scorer."""
    import search
    from problems import arith
    from training import reasoners
    from training.value_train import rollout_labels

    folder = reasoners.MODELS_DIR / "tiny-arith"
    if not (folder / "value_head.safetensors").is_file():
        pytest.skip("no value head next to tiny-arith (python -m training.value_train)")
    eng = HFEngine.load("tiny-arith", device="cpu", keep_hidden=True)
    head = load(folder)
    problems = [p for lv in (3, 4, 5, 6, 7) for p in arith.generate(8, seed=20_000, difficulty=lv)]
    x, y, _ = rollout_labels(eng, problems, seed=7)
    with torch.no_grad():
        assert auc(head(x).tolist(), (y > 0.5).tolist()) > 0.6
    res = search.solve(problems[0], algo="beam", engine=eng, scorer="value", n=4, seed=0)
    assert res.status == "ok" and all(0.0 <= c.score <= 1.0 for c in res.candidates)
