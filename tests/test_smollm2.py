"""The embedded SmolLM2-135M end to end (slow: loads a real 135M model, ~20 s)."""

from __future__ import annotations

import pytest
import torch
from helpers import status_from_tree

import search
from search.session import Session
from search.types import Budget, Problem

pytestmark = pytest.mark.slow


def test_chat_prompt_uses_the_template(smollm2_engine):
    p = Problem(prompt="What is 2 + 3?")
    ids = smollm2_engine.prompt_ids(p)
    text = smollm2_engine.decode(ids, skip_special=False)
    assert text.startswith("<|im_start|>system") and text.endswith("<|im_start|>assistant\n")
    assert "What is 2 + 3?" in text


def test_greedy_steps_match_generate_on_smollm2(smollm2_engine):
    eng = smollm2_engine.bind(Session())  # a session of its own, ended below
    a = eng.root(Problem(prompt="List the numbers from 1 to 20, one per line."))
    b = eng.root(Problem(prompt="Name three colours of the rainbow, one per line."))
    ((a1,),) = eng.expand([a], 1, stop=("\n",), max_tokens=24, temperature=0)
    assert not a1.finished, a1.step
    nodes = [a1, b]  # rows of different lengths in one batch
    kids = eng.expand(nodes, 1, stop=("\n",), max_tokens=24, temperature=0)
    for node, (kid,) in zip(nodes, kids):
        ids = node.token_ids()
        with torch.no_grad():
            x = torch.tensor([ids])
            ref = eng.model.generate(x, attention_mask=torch.ones_like(x), do_sample=False,
                                     max_new_tokens=len(kid.step.token_ids))[0, len(ids):]
            lp = eng.model(torch.tensor([kid.token_ids()])).logits[0].log_softmax(-1)
        assert ref.tolist() == list(kid.step.token_ids)
        full = kid.token_ids()
        want = [lp[i - 1, full[i]].item() for i in range(len(ids), len(full))]
        assert max(abs(x - y) for x, y in zip(kid.step.logprobs, want)) < 1e-4
    eng.session.kv.close()  # the engine is the module's: the next tests start with no KV held


@pytest.mark.parametrize("algo,knobs", [("best_of_n", dict(n=4, step_tokens=48, max_depth=4)),
                                         ("beam", dict(n=4, m=2, step_tokens=48, max_depth=4)),
                                         ("greedy", dict(step_tokens=48, max_depth=4)),
                                         pytest.param("beam", dict(n=4, m=2, step_tokens=48,
                                                                   max_depth=4, lookahead=1),
                                                      id="beam-lookahead")])
def test_solve_end_to_end(smollm2_engine, algo, knobs):
    res = search.solve("What is 17 * 23 - 5?", algo=algo, engine=smollm2_engine,
                       budget=Budget(tokens=600), seed=0, **knobs)
    assert res.usage.generated_tokens > 0
    # at most one batch over: n rows (greedy's one path) of a step each
    assert res.usage.generated_tokens <= 600 + knobs.get("n", 1) * knobs["step_tokens"]
    assert res.usage.prefill_tokens == len(res.tree.prompt_ids)
    assert res.candidates and all(c.text for c in res.candidates)
    assert res.status == status_from_tree(res, Budget(tokens=600))
    assert smollm2_engine.cached_tokens == 0  # solve frees the KV cache of its tree


def test_cli_on_default_model(capsys):
    from search.__main__ import main

    assert main(["What is 2 + 2?", "--algo", "best_of_n", "--knob", "n=2",
                 "--knob", "step_tokens=32", "--knob", "max_depth=3", "--json"]) == 0
    out = capsys.readouterr().out
    assert '"usage"' in out and '"generated_tokens"' in out
