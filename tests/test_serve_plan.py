"""search.serve.plan: what a request body asks for, with the server's defaults (no model)."""

from __future__ import annotations

from typing import Any

import pytest

from search.engines.prompts import PROMPT_FORM, RAW
from search.models import Form
from search.serve.plan import SAMPLE, BadRequest, Defaults, Reading, plan
from search.serve.text import ANSWER_PATTERN, TEXT
from search.types import Budget

MODEL = "tiny-arith"
USER = [{"role": "user", "content": "What is 2 + 3?"}]
ARITH = Reading(chat_template=False, form=Form(domain="math", step_delimiter=("\n\n",)))
CHAT = Reading()  # a chat template, no declared form (SmolLM2)


PLAIN = Defaults()


def chat(defaults: Defaults = PLAIN, reading: Reading = ARITH, **fields: Any):
    return plan({"model": MODEL, "messages": USER, **fields}, chat=True, models=[MODEL],
                defaults=defaults, reading=reading)


def refused(words: str, **fields: Any) -> None:
    with pytest.raises(BadRequest) as err:
        chat(**fields)
    assert words in str(err.value)


def test_a_plain_request_is_one_sample_with_seed_0():
    p = chat()
    algo, knobs = SAMPLE
    assert (p.algo, dict(p.knobs), p.scorer, p.budget) == \
        (algo, knobs, None, None)  # tiny-arith's delimiter is the searches' default
    assert [(prob.prompt, prob.domain, seed) for prob, seed in p.runs] == \
        [("What is 2 + 3?", "math", 0)]
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
             models=[MODEL], defaults=Defaults(), reading=ARITH)
    assert [(prob.prompt, seed) for prob, seed in p.runs] == \
        [("1+1", 0), ("1+1", 1), ("2+2", 0), ("2+2", 1)]
    assert p.echo and not p.chat
    assert PROMPT_FORM not in p.runs[0][0].metadata  # through the model's own template
    # a chat model continues the text as it stands (no template, no instruction)
    p = plan({"model": MODEL, "prompt": "Once upon"}, chat=False, models=[MODEL],
             defaults=Defaults(), reading=CHAT)
    assert (p.runs[0][0].metadata[PROMPT_FORM], p.runs[0][0].domain) == (RAW, TEXT)


def test_a_chat_model_gets_the_messages_as_they_are_and_free_text_steps_and_answers():
    conversation = [{"role": "system", "content": "Be brief."}, *USER,
                    {"role": "assistant", "content": "5"}, {"role": "user", "content": "And 3 + 4?"}]
    for messages in (USER, conversation):
        p = chat(reading=CHAT, messages=messages)
        problem = p.runs[0][0]
        assert [dict(m) for m in problem.messages] == messages and problem.prompt == ""
        assert problem.domain == TEXT and ANSWER_PATTERN not in problem.metadata
        assert p.knobs["stop"] is None  # no delimiter declared or asked for: none


def test_step_delimiter_and_answer_pattern_come_from_the_request():
    p = chat(reading=CHAT, step_delimiter="\n", answer_pattern=r"answer: (\w+)")
    assert p.knobs["stop"] == ("\n",)
    assert (p.runs[0][0].domain, p.runs[0][0].metadata[ANSWER_PATTERN]) == \
        (TEXT, r"answer: (\w+)")
    # the model's declared delimiter gives way to the request's, null included
    assert chat(step_delimiter=["\n", "."]).knobs["stop"] == ("\n", ".")
    assert chat(step_delimiter=None).knobs["stop"] is None
    # an answer pattern reads a declared-math model's answers as free text
    assert chat(answer_pattern=r"\d+").runs[0][0].domain == TEXT
    refused("step_delimiter must be", step_delimiter=[])
    refused("step_delimiter must be", step_delimiter=3)
    refused("disagree", algo="beam", scorer="steps", step_delimiter="\n",
            knobs={"stop": ["\n\n"]})
    refused("pgtd has no steps to delimit", algo="pgtd", step_delimiter="\n")
    refused("is not a regular expression", answer_pattern="(")
    refused("has 2 groups", answer_pattern="(a)(b)")


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
             defaults=Defaults(), reading=ARITH)
    assert p.runs[0][0].prompt == "What is 2 + 3?"
    conversation = [{"role": "system", "content": "Be brief."}, *USER]
    with pytest.raises(BadRequest, match="no chat template"):
        plan({"model": MODEL, "messages": conversation}, chat=True, models=[MODEL],
             defaults=Defaults(), reading=ARITH)


def test_free_text_answers_are_the_reply_or_what_the_pattern_captures():
    from search import answers
    from search.types import Problem

    free = Problem(prompt="Capital of France?", domain=TEXT)
    assert answers.extract(free, "  The capital is Paris.\n") == "The capital is Paris."
    assert answers.extract(free, " \n ") is None
    assert answers.vote_key(free, "Paris.") == answers.vote_key(free, " paris ") == "paris"
    grouped = Problem(prompt="x", domain=TEXT, metadata={ANSWER_PATTERN: r"= (\d+)"})
    assert answers.extract(grouped, "2 + 3 = 5\n5 * 2 = 10\nso 10") == "10"  # the last match
    assert answers.extract(grouped, "no equation") is None
    whole = Problem(prompt="x", domain=TEXT, metadata={ANSWER_PATTERN: r"^Answer: .+$"})
    assert answers.extract(whole, "think\nAnswer: Paris\n") == "Answer: Paris"


def test_a_raw_prompt_is_read_as_its_text_stands():
    from search.engines.prompts import PromptFormat
    from search.types import Problem

    class ChatTokenizer:  # has a chat template, which a raw prompt must not go through
        chat_template = "{{ messages }}"

        def __call__(self, text: str) -> dict[str, list[int]]:
            return {"input_ids": [ord(c) for c in text]}

        def apply_chat_template(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("a raw prompt went through the chat template")

    raw = Problem(prompt="Once upon", metadata={PROMPT_FORM: RAW})
    assert PromptFormat().ids(raw, ChatTokenizer()) == [ord(c) for c in "Once upon"]
    assert PromptFormat().text(raw, ChatTokenizer()) == "Once upon"
