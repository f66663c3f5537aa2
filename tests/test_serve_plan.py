"""search.serve.plan: what a request body asks for, with the server's defaults (no model)."""

from __future__ import annotations

from typing import Any

import pytest

from search.serve.plan import SAMPLE, BadRequest, Defaults, plan
from search.types import Budget

MODEL = "tiny-arith"
USER = [{"role": "user", "content": "What is 2 + 3?"}]


PLAIN = Defaults()


def chat(defaults: Defaults = PLAIN, **fields: Any):
    return plan({"model": MODEL, "messages": USER, **fields}, chat=True, models=[MODEL],
                defaults=defaults)


def refused(words: str, **fields: Any) -> None:
    with pytest.raises(BadRequest) as err:
        chat(**fields)
    assert words in str(err.value)


def test_a_plain_request_is_one_sample_with_seed_0():
    p = chat()
    algo, knobs = SAMPLE
    assert (p.algo, dict(p.knobs), p.scorer, p.budget) == (algo, knobs, None, None)
    assert [(prob.prompt, seed) for prob, seed in p.runs] == [("What is 2 + 3?", 0)]
    assert not (p.stream or p.logprobs or p.stop)


def test_the_servers_defaults_fill_what_a_request_leaves_out():
    server = Defaults(algo="beam", knobs={"n": 4, "m": 2}, scorer="steps",
                      budget=Budget(tokens=500), seed=9)
    p = chat(server)
    assert (p.algo, dict(p.knobs), p.scorer, p.budget, p.runs[0][1]) == \
        ("beam", {"n": 4, "m": 2}, "steps", Budget(tokens=500), 9)
    # another algorithm: the server's knobs are not its knobs; a scorer it never consults
    # is not handed to it (the server's), but one the request names is refused
    p = chat(server, algo="greedy")
    assert (p.algo, dict(p.knobs), p.scorer) == ("greedy", {}, None)
    with pytest.raises(BadRequest, match="never consults a scorer"):
        chat(server, algo="greedy", scorer="steps")


def test_n_seed_max_tokens_temperature_and_stop_map_onto_the_search():
    p = chat(n=3, seed=5, max_tokens=100, temperature=0.5, top_p=0.9, stop="\n\n")
    assert [seed for _, seed in p.runs] == [5, 6, 7]
    assert p.budget == Budget(tokens=100)
    assert (p.knobs["temperature"], p.knobs["top_p"], p.stop) == (0.5, 0.9, ("\n\n",))
    # the smaller cap wins; the budget's other limits stay
    p = chat(max_tokens=100, max_completion_tokens=80, budget={"tokens": 90, "seconds": 5})
    assert p.budget == Budget(tokens=80, seconds=5)
    # knob lists (JSON has no tuples) become tuples, as the knob types want
    assert chat(algo="beam", scorer="steps", knobs={"stop": ["\n"]}).knobs["stop"] == ("\n",)


def test_text_completions_give_one_run_per_prompt_and_choice():
    p = plan({"model": MODEL, "prompt": ["1+1", "2+2"], "n": 2, "echo": True}, chat=False,
             models=[MODEL], defaults=Defaults())
    assert [(prob.prompt, seed) for prob, seed in p.runs] == \
        [("1+1", 0), ("1+1", 1), ("2+2", 0), ("2+2", 1)]
    assert p.echo and not p.chat


def test_what_a_search_cannot_honour_is_refused_by_name():
    refused("greedy has no temperature knob", algo="greedy", temperature=0.7)
    refused("disagree", temperature=0.7, knobs={"temperature": 0.9})
    refused("top_logprobs is not supported", logprobs=True, top_logprobs=3)
    refused("presence_penalty is not supported", presence_penalty=0.5)
    refused("logit_bias is not supported", logit_bias={"1": 5})
    refused("tools are not supported", tools=[{"type": "function"}])
    refused("stop must be", stop=["a", "b", "c", "d", "e"])
    refused("n must be between 1 and 16", n=17)
    refused("unknown field 'algorithm'; did you mean 'algo'?", algorithm="beam")
    refused("Budget has no field 'tokns'; did you mean 'tokens'?", budget={"tokns": 3})
    refused("budget must be an object", budget=5)
    chat(presence_penalty=0, logit_bias={}, user="me", response_format={"type": "text"})


def test_the_model_and_the_messages_are_checked():
    with pytest.raises(BadRequest) as err:
        plan({"model": "gpt-4", "messages": USER}, chat=True, models=[MODEL],
             defaults=Defaults())
    assert err.value.status == 404 and "'tiny-arith'" in str(err.value)
    for messages in ([], [{"content": "x"}], [{"role": "user", "content": 5}]):
        with pytest.raises(BadRequest, match="messages"):
            plan({"model": MODEL, "messages": messages}, chat=True, models=[MODEL],
                 defaults=Defaults())
    parts = [{"role": "user", "content": [{"type": "text", "text": "What is "},
                                          {"type": "text", "text": "2 + 3?"}]}]
    p = plan({"model": MODEL, "messages": parts}, chat=True, models=[MODEL],
             defaults=Defaults())
    assert p.runs[0][0].prompt == "What is 2 + 3?"
    conversation = [{"role": "system", "content": "Be brief."}, *USER]
    p = plan({"model": MODEL, "messages": conversation}, chat=True, models=[MODEL],
             defaults=Defaults())
    assert [dict(m) for m in p.runs[0][0].messages] == conversation
    with pytest.raises(BadRequest, match="no chat template"):
        plan({"model": MODEL, "messages": conversation}, chat=True, models=[MODEL],
             defaults=Defaults(), turns=False)
