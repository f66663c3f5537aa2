"""Teaching a PRM arithmetic: equation drills labelled by their own arithmetic (checked here by
an independent evaluation of each equation), and grown layers that leave the policy's
function unchanged (checked against a plain forward of the policy)."""

from __future__ import annotations

import bisect
import random
import re
from types import SimpleNamespace

import pytest
import torch

from problems import arith
from rewards.prm import MATH_SHEPHERD
from search.models import load_model
from training.arith_drills import LEVELS, SMALL, equation_drills, gold_steps, slip
from training.prm_grow import FRESH_LR_SCALE, drills_for, grow_layers
from training.prm_labels import LabelledPath
from training.prm_train import build, train

EQ = re.compile(r"(\d+) ([-+*/]) (\d+) = (\d+)")


def holds(text: str) -> bool:
    (a, op, b, c), = EQ.findall(text)
    return eval(f"{a} {op} {b}") == int(c)  # a literal equation of digits, never user input


def test_drill_labels_are_each_equations_own_arithmetic():
    drills = equation_drills(300, seed=7)
    assert len(drills) == 300
    gold = {sentence for sentence, _ in gold_steps(300 * 8 // (8 * len(LEVELS)), seed=7)}
    wrong = 0
    for path in drills:
        assert path.prompt == "" and len(path.steps) == 8
        assert path.correct == all(v == 1.0 for v in path.labels)
        for text, label in zip(path.steps, path.labels):
            assert text.endswith("\n\n")
            assert label == (1.0 if holds(text) else 0.0)
            if label:  # a right step is a gold solution's own sentence
                assert text[:-2] in gold
            wrong += label == 0.0
    # a path is clean with probability 0.4, else each step slips with probability 1/2
    assert 0.25 < wrong / (300 * 8) < 0.35
    assert 0.3 < sum(p.correct for p in drills) / 300 < 0.5


def test_drills_follow_their_seed():
    assert equation_drills(20, seed=3) == equation_drills(20, seed=3)
    assert equation_drills(20, seed=3) != equation_drills(20, seed=4)
    with pytest.raises(ValueError, match="clean"):
        equation_drills(5, seed=1, clean=1.5)


def test_gold_steps_are_the_generators_equations():
    for sentence, (a, op, b, c) in gold_steps(2, seed=11):
        assert EQ.findall(sentence) == [(str(a), op, str(b), str(c))]
        assert arith.apply(a, op, b) == c


def test_slips_are_wrong_non_negative_and_mostly_near():
    rng = random.Random(0)
    draws = [(v, slip(rng, v)) for v in [rng.randint(2, 999) for _ in range(4000)]]
    assert all(w != v and w >= 0 for v, w in draws)
    near = sum(abs(w - v) <= max(SMALL) for v, w in draws) / len(draws)
    assert 0.6 <= near <= 0.8  # 60% near misses, plus digit changes in the last place


def test_grown_layers_compute_the_policys_function():
    policy, tok, _ = load_model("tiny-arith")
    model, _ = build("tiny-arith", grow=2)
    assert model.config.num_hidden_layers == len(model.get_decoder().layers) == 8
    ids = torch.tensor([tok("Mia has 56 eggs. Mia now has 56 + 2 = 58 eggs.")["input_ids"]])
    with torch.no_grad():
        want = policy(ids).logits
        got = model.eval()(ids).logits[..., :want.shape[-1]]  # the step tag joined the vocab
    assert torch.allclose(got, want, atol=1e-5)
    with pytest.raises(ValueError, match="grow"):
        grow_layers(model, -1)


def test_grown_checkpoint_reloads_with_its_layers(tmp_path):
    from transformers import AutoModelForCausalLM

    model, tok = build("tiny-arith", grow=1)
    model.eval().save_pretrained(tmp_path)
    again = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert again.config.num_hidden_layers == len(again.model.layers) == 7
    ids = torch.tensor([tok("Ana has 9 * 3 = 27 cards.")["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(again(ids).logits, model(ids).logits, atol=1e-5)


def test_fresh_layers_learn_at_the_scaled_rate(monkeypatch):
    """train(fresh=k) puts the last k layers in their own group at FRESH_LR_SCALE x lr."""
    seen = []
    real = torch.optim.AdamW

    def spy(groups, **kw):
        seen.extend((len(g["params"]), g["lr"]) for g in groups)
        return real(groups, **kw)

    monkeypatch.setattr(torch.optim, "AdamW", spy)
    model, tok = build("tiny-arith", grow=1)
    drills = equation_drills(4, seed=2)
    train(model, tok, MATH_SHEPHERD, drills, drills, epochs=1, lr=1e-3, batch_size=4,
          fresh=1, progress=False)
    per_layer = len(list(model.get_decoder().layers[-1].parameters()))
    assert seen == [(len(list(model.parameters())) - per_layer, 1e-3),
                    (per_layer, 1e-3 * FRESH_LR_SCALE)]
    assert model.get_decoder().layers[-1].mlp.down_proj.weight.abs().sum() > 0  # it learned


def test_drills_refuse_a_task_without_equations():
    code = [SimpleNamespace(id="code/l3/s1/0")]
    with pytest.raises(ValueError, match="arithmetic task"):
        drills_for(code, 8, 1)  # type: ignore[arg-type]
    assert drills_for(code, 0, 1) == []  # type: ignore[arg-type]
    arith_problems = arith.generate(2, seed=1, difficulty=3)
    assert drills_for(arith_problems, 3, 5) == equation_drills(3, seed=5)


def test_equation_holds_by_hand():
    from reports.studies.prm_bounds import equation_holds

    assert equation_holds("Mia now has 58 / 2 = 29 eggs.\n\n") is True
    assert equation_holds("Mia now has 58 / 4 = 14 eggs.\n\n") is False  # 14 * 4 != 58
    assert equation_holds("Mia now has 5 / 0 = 0 eggs.") is False
    assert equation_holds("Ana has 3 + 4 = 7 cards.") is True
    assert equation_holds("Ana has 30 - 22 = 7 cards.") is False
    assert equation_holds("Ben has 29 * 3 = 87 toys.") is True
    assert equation_holds("The answer is 5.") is None
    assert equation_holds("2 + 2 = 4 and 3 + 3 = 6") is None


def test_arithmetic_auc_hand_computed():
    from reports.studies.prm_bounds import arithmetic_auc

    def path(*steps):
        return LabelledPath("p", "", "", steps, tuple(1.0 for _ in steps), False)

    paths = [path("a 1 + 1 = 2 b", "a 2 * 3 = 5 b", "The answer is 5."),
             path("a 9 - 2 = 6 b", "a 6 / 3 = 2 b")]
    # steps with one equation: right, wrong, (none), wrong, right
    assert arithmetic_auc([0.9, 0.2, 0.0, 0.4, 0.8], paths) == 1.0
    # the first right step now below one wrong one: 3 of the 4 (right, wrong) pairs in order
    assert arithmetic_auc([0.3, 0.2, 0.0, 0.4, 0.8], paths) == 0.75


def test_first_error_and_equation_holds_share_one_arithmetic():
    """problems.arith.holds decides both: a division is right only when exact, and one by 0
    is an error where first_error used to raise ZeroDivisionError."""
    from reports.studies.prm_bounds import equation_holds

    p = arith.generate(1, seed=3, difficulty=3)[0]
    gold = p.metadata["solution"].split("\n\n")
    assert arith.first_error(p, gold) is None
    a = p.metadata["equations"][0][0]
    for bad in (f"Tom has {a} / 0 = 0 eggs.", f"Tom has {a + 1} / 2 = {(a + 1) // 2} eggs."
                if a % 2 == 0 else f"Tom has {a} / 2 = {a // 2} eggs."):
        assert arith.first_error(p, [bad, *gold[1:]]) == 0
        assert equation_holds(bad) is False
    assert arith.holds(58, "/", 2, 29) and not arith.holds(58, "/", 4, 14)
    assert not arith.holds(5, "/", 0, 0) and arith.holds(3, "-", 1, 2)


# -- the step checker blurred on purpose (reports.studies.prm_eval --blur) -----------------
def test_blurred_checker_separates_steps_at_its_stated_auc():
    from reports.studies.prm_eval import Solution, blur, blur_auc

    # 4,000 solutions of one right (1.0) and one wrong (0.0) step: the blurred scores' AUC
    # between them, counted pair by pair, is Phi(1 / (sigma sqrt 2)) up to sampling error
    sols = [Solution(0, ("a", "b"), {"steps": (1.0, 0.0)}, "1", False, True, 1)
            for _ in range(4000)]
    for sigma, want in ((0.5, 0.9214), (1.0, 0.7602)):
        assert blur_auc(sigma) == pytest.approx(want, abs=1e-4)
        got = blur(sols, "steps", sigma, seed=3)
        right = sorted(s.scores[f"steps~{sigma:g}"][0] for s in got)
        wrong = [s.scores[f"steps~{sigma:g}"][1] for s in got]
        share = sum(len(right) - bisect.bisect_right(right, w) for w in wrong) / 4000 ** 2
        assert share == pytest.approx(want, abs=0.015)
        assert all(0 < v < 1 for s in got for v in s.scores[f"steps~{sigma:g}"])
        assert got[0].scores["steps"] == (1.0, 0.0)  # the base scores stay
    assert blur(sols[:5], "steps", 0.5, seed=3) == blur(sols[:5], "steps", 0.5, seed=3)
    with pytest.raises(ValueError, match="--blur needs the scorer 'steps'"):
        blur([Solution(0, ("a",), {"x": (1.0,)}, "1", True, True, None)], "steps", 0.5)
    with pytest.raises(ValueError, match="sigma must be > 0"):
        blur(sols[:1], "steps", 0.0)
