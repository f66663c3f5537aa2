"""The committed embedded reasoners load by name and still do what metrics.json says."""

from __future__ import annotations

import pytest

from problems import reasoners

pytestmark = pytest.mark.skipif(
    not (reasoners.MODELS_DIR / "tiny-arith" / "model.safetensors").is_file(),
    reason="tiny-arith is not trained yet (python -m problems.train tiny-arith)")


@pytest.fixture(scope="module")
def arith_engine():
    from search.engines.hf import HFEngine

    return HFEngine.load("tiny-arith", device="cpu")


def test_files_and_records():
    folder = reasoners.model_dir("tiny-arith")
    for name in ("config.json", "model.safetensors", "tokenizer.json", "training.json",
                 "metrics.json"):
        assert (folder / name).is_file(), name
    assert (folder / "model.safetensors").stat().st_size <= 25 * 2**20
    record = reasoners.training_record("tiny-arith")
    assert {"seed", "config", "threads", "data", "minutes"} <= set(record)
    assert record["minutes"] <= 60


def test_loads_by_name_in_the_trained_format(arith_engine):
    from problems import arith
    from search.models import load_model

    _, tok, kwargs = load_model("tiny-arith")
    assert kwargs["chat"] is False
    assert kwargs["prompt_template"] == reasoners.training_record("tiny-arith")["config"][
        "prompt_template"]
    # a problem and its solution tokenise with nothing unknown and decode back exactly
    p = arith.generate(1, seed=3)[0]
    text = p.prompt + "\n" + p.metadata["solution"]
    ids = tok(text)["input_ids"]
    assert tok.unk_token_id not in ids
    assert tok.decode(ids) == text
    assert arith_engine.chat is False


def test_reproduces_recorded_greedy_accuracy(arith_engine):
    """The fixed 50-problem set, decoded greedily in one batch exactly as at evaluation."""
    from problems import evaluate

    recorded = reasoners.metrics("tiny-arith")["fixed_set"]["greedy"]
    measured = evaluate.greedy_accuracy(arith_engine, evaluate.fixed_set())
    assert abs(measured - recorded) <= 0.02, (measured, recorded)


def test_greedy_solutions_use_the_step_format(arith_engine):
    from problems import arith

    p = arith.generate(1, seed=4)[0]
    root = arith_engine.root(p)
    step = arith_engine.expand([root], 1, temperature=0.0, max_tokens=80)[0][0]
    assert step.step is not None and step.step.stop_reason == "stop"  # ends at "\n\n"
    assert arith.EQUATION.search(step.step.text)


@pytest.mark.slow
def test_best_of_n_beats_greedy_on_tiny_arith():
    """Sixteen samples cover more problems than one greedy solution, and their majority
    vote is right at least as often (measured on 20 problems at the default level)."""
    import search
    from problems import arith, evaluate
    from search.engines.hf import HFEngine
    from verifiers.math import verify

    level = next(lv for lv in reasoners.metrics("tiny-arith")["levels"]
                 if lv["difficulty"] == arith.DEFAULT_DIFFICULTY)
    if level["pass@16"] - level["greedy"] < 0.1:
        pytest.skip(f"recorded pass@16 {level['pass@16']:.0%} is not clearly above greedy "
                    f"{level['greedy']:.0%}: nothing for search to win on 20 problems")
    engine = HFEngine.load("tiny-arith", device="cpu")
    problems = arith.generate(20, seed=4242)
    greedy = evaluate.greedy_accuracy(engine, problems) * len(problems)
    voted = covered = 0
    for p in problems:
        res = search.solve(p, algo="best_of_n", engine=engine, n=16, temperature=1.0, seed=1)
        voted += bool(res.answer is not None and verify(str(p.answer), res.answer).correct)
        covered += any(c.answer is not None and verify(str(p.answer), c.answer).correct
                       for c in res.candidates)
    assert covered > greedy
    assert voted >= greedy
