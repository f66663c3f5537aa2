"""search.serve through the official openai client, against a server on 127.0.0.1 (an
ephemeral port, uvicorn in a thread of this process): every answer is checked against
search.solve run here on the same engine (the request alone), bad requests against the
messages search.solve's own checks raise. tiny-arith reads word problems (search.models.Form);
SmolLM2 (slow) reads a chat through its template."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import httpx
import openai
import pytest
import uvicorn
from conftest import REPO

import search
from search import registry
from search.fit import BudgetTooSmall
from search.select import best_partial
from search.serve import app as app_module
from search.serve import service as service_module
from search.serve.app import create_app, listening
from search.serve.plan import Defaults
from search.serve.service import Service
from search.serve.text import ANSWER_PATTERN, TEXT
from search.types import Problem

MODEL = "tiny-arith"
QUESTION = "Tom has 12 apples. Tom buys 5 more apples. How many apples does Tom have now?"
OTHER = "Mia has 30 coins. Mia loses 4 coins. How many coins does Mia have now?"
LONG = {"knobs": {"n": 8}, "temperature": 3.0}  # rambling paths: seconds of work, no end soon
MAX_BODY = 64 << 10


@contextmanager
def serving(model: str) -> Iterator[tuple[str, Service]]:
    """A server of `model` on 127.0.0.1 (an ephemeral port), uvicorn in a thread."""
    service = Service.load(model, concurrency=8)
    app = create_app(service, Defaults(), names=[model], max_body=MAX_BODY)
    sock = listening("127.0.0.1", 0)
    srv = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not srv.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", service
    finally:
        srv.should_exit = True
        thread.join(timeout=30)
    assert not thread.is_alive()


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, Service]]:
    with serving(MODEL) as running:
        yield running


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server[0] + "/v1", api_key="none", max_retries=0, timeout=120)


def alone(service: Service, algo: str, **kwargs: Any) -> search.Result:
    """The request's search run here, alone, on the server's engine."""
    return search.solve(Problem(QUESTION, id="request"), algo, engine=service.driver.engine,
                        progress=False, **kwargs)


def ask(client: openai.OpenAI, **extra: Any) -> Any:
    return client.chat.completions.create(model=MODEL, extra_body=extra or None,
                                          messages=[{"role": "user", "content": QUESTION}])


def health(url: str) -> dict[str, Any]:
    return httpx.get(url + "/health").json()


def same(choice: Any, result: search.Result) -> None:
    """The choice is what the search alone found: text, answer, status, selection, cost."""
    extra = choice.model_extra["search"]
    assert choice.message.content == result.text
    assert (extra["answer"], extra["status"], extra["selected_by"], extra["seed"]) == \
        (result.answer, result.status, result.selected_by, result.seed)
    got, want = extra["usage"], result.usage.as_dict()
    for key in ("generated_tokens", "prefill_tokens", "forward_passes", "scorer_calls"):
        assert got[key] == want[key], key


def test_a_plain_request_is_one_sample_and_counts_tokens_as_the_api_does(server, client):
    _, service = server
    reply = client.chat.completions.create(model=MODEL, seed=4,
                                           messages=[{"role": "user", "content": QUESTION}])
    ref = alone(service, "best_of_n", n=1, select="vote", seed=4)
    same(reply.choices[0], ref)
    prompt = len(service.driver.engine.prompt_ids(Problem(QUESTION)))  # type: ignore[attr-defined]
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == \
        (prompt, ref.usage.generated_tokens)
    assert reply.usage.total_tokens == prompt + ref.usage.generated_tokens
    assert reply.choices[0].finish_reason == "stop" and reply.model == MODEL
    assert reply.model_extra["search"]["algo"] == "best_of_n"
    assert [m.id for m in client.models.list()] == [MODEL]


@pytest.mark.parametrize("algo", registry.names())
def test_every_algorithm_answers_as_it_does_alone(server, client, algo):
    _, service = server
    scorer = "steps" if registry.uses_scorer(algo, {}) else None
    try:
        ref = alone(service, algo, scorer=scorer, budget=search.Budget(tokens=300), seed=2)
    except BudgetTooSmall as refused:  # too narrow a budget: the same refusal, as a 400
        with pytest.raises(openai.BadRequestError) as err:
            ask(client, algo=algo, scorer=scorer, budget={"tokens": 300}, seed=2)
        assert str(refused) in str(err.value)
        return
    reply = ask(client, algo=algo, scorer=scorer, budget={"tokens": 300}, seed=2)
    same(reply.choices[0], ref)
    assert reply.model_extra["search"]["scorer"] == ref.scorer
    assert reply.usage is not None and reply.usage.completion_tokens <= 300


def test_n_temperature_max_tokens_and_stop_mean_what_the_api_says(server, client):
    _, service = server
    reply = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": QUESTION}], n=3, seed=7,
        temperature=1.2, max_tokens=40, stop=["answer"])
    refs = [alone(service, "best_of_n", n=1, select="vote", seed=7 + i, temperature=1.2,
                  budget=search.Budget(tokens=40), fit_budget=False) for i in range(3)]
    assert [c.index for c in reply.choices] == [0, 1, 2]
    for choice, ref in zip(reply.choices, refs):
        cut = ref.text.find("answer")
        assert choice.message.content == (ref.text[:cut] if cut >= 0 else ref.text)
        ended = any(c.finished for c in ref.candidates if c.text == ref.text)
        assert choice.finish_reason == ("stop" if cut >= 0 or ended else "length")
        assert ref.usage.generated_tokens <= 40
    assert reply.usage is not None
    assert reply.usage.completion_tokens == sum(r.usage.generated_tokens for r in refs)


def test_n_samples_of_a_new_prompt_compute_it_once(server, client):
    """A request's n searches of one prompt the engine has not seen: it is prefilled once,
    before them (as solve_many's), not by each of them at once."""
    _, service = server
    engine = service.driver.engine
    question = "Ada has 41 pens. Ada gives away 9 pens. How many pens does Ada have now?"
    prompt = len(engine.prompt_ids(Problem(question)))
    before = engine.kv.prefilled
    reply = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": question}], n=4, seed=3,
        max_tokens=30)
    assert len(reply.choices) == 4 and engine.kv.prefilled - before == prompt


def test_concurrent_requests_of_a_new_prompt_compute_it_once(server, client):
    """Requests of one prompt the engine has not seen, sent at once: it is prefilled once
    (the first request's prefill claims it, the others wait for it: PromptCache.claim)."""
    from concurrent.futures import ThreadPoolExecutor

    _, service = server
    engine = service.driver.engine
    question = "Bo has 23 cups. Bo breaks 8 cups. How many cups does Bo have now?"
    prompt = len(engine.prompt_ids(Problem(question)))
    before = engine.kv.prefilled

    def one(seed: int) -> Any:
        return client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": question}], seed=seed,
            max_tokens=20)

    with ThreadPoolExecutor(4) as pool:
        replies = list(pool.map(one, range(4)))
    assert all(len(r.choices) == 1 for r in replies)
    assert engine.kv.prefilled - before == prompt


def test_logprobs_are_the_chosen_paths_tokens(server, client):
    _, service = server
    reply = client.chat.completions.create(model=MODEL, logprobs=True, seed=5,
                                           messages=[{"role": "user", "content": QUESTION}])
    ref = alone(service, "best_of_n", n=1, select="vote", seed=5)
    leaf = max(ref.tree.walk(), key=lambda n: n.depth)  # one sample: one path
    choice = reply.choices[0]
    assert choice.logprobs is not None and choice.logprobs.content is not None
    tokens = choice.logprobs.content
    assert "".join(t.token for t in tokens) == choice.message.content == leaf.text
    assert sum(t.logprob for t in tokens) == pytest.approx(leaf.cum_logprob, abs=1e-4)
    with pytest.raises(openai.BadRequestError, match="top_logprobs is not supported"):
        client.chat.completions.create(model=MODEL, logprobs=True, top_logprobs=2,
                                       messages=[{"role": "user", "content": QUESTION}])


def test_text_completions_take_several_prompts_and_echo(server, client):
    _, service = server
    prompts = [QUESTION, OTHER]
    reply = client.completions.create(model=MODEL, prompt=prompts, n=2, echo=True,
                                      extra_body={"algo": "greedy"})
    assert len(reply.choices) == 4
    for i, choice in enumerate(reply.choices):
        ref = search.solve(Problem(prompts[i // 2]), "greedy", engine=service.driver.engine,
                           seed=i % 2, progress=False)
        assert choice.index == i and choice.text == prompts[i // 2] + ref.text


def test_streaming_sends_the_same_text_and_usage_with_progress_before(server, client,
                                                                         monkeypatch):
    url, _ = server
    extra = {"algo": "beam", "scorer": "steps", "knobs": {"n": 4, "m": 2}, "seed": 3}
    whole = ask(client, **extra)
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": QUESTION}], stream=True,
        stream_options={"include_usage": True}, extra_body=extra)
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    last = [c for c in chunks if c.choices][-1].choices[0]
    assert last.finish_reason == whole.choices[0].finish_reason
    assert last.model_extra["search"]["answer"] == whole.choices[0].model_extra["search"]["answer"]
    assert chunks[-1].usage is not None and whole.usage is not None
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    # progress: SSE comment lines (clients skip them) while the search runs
    monkeypatch.setattr(app_module, "PROGRESS_EVERY", 0.02)
    monkeypatch.setattr(service_module, "PROGRESS_EVERY", 0.02)
    body = {"model": MODEL, "messages": [{"role": "user", "content": QUESTION}],
            "stream": True, "budget": {"tokens": 400}, **LONG}
    lines = httpx.post(url + "/v1/chat/completions", json=body, timeout=120).text.splitlines()
    progress = [ln for ln in lines if ln.startswith(": 0: search  best_of_n on tiny-arith")]
    assert progress and " tokens · " in progress[-1]
    assert "data: [DONE]" in lines[-2:]


def solve_error(**kwargs: Any) -> str:
    """The message search.solve raises for the same mistake."""
    with pytest.raises((TypeError, ValueError)) as err:
        search.solve(QUESTION, engine=MODEL, progress=False, **kwargs)
    return str(err.value)


BAD = [  # (request's extra fields, search.solve's arguments with the same mistake, words)
    ({"algo": "bem"}, {"algo": "bem"}, "did you mean 'beam'?"),
    ({"algo": "beam", "knobs": {"mm": 3}}, {"algo": "beam", "mm": 3}, "did you mean 'm'?"),
    ({"algo": "beam", "knobs": {"n": "3"}}, {"algo": "beam", "n": "3"}, "takes an int"),
    ({"algo": "beam", "scorer": "stepz"}, {"algo": "beam", "scorer": "stepz"},
     "did you mean 'steps'?"),
    ({"algo": "greedy", "scorer": "steps"}, {"algo": "greedy", "scorer": "steps"},
     "never consults a scorer"),
    ({"budget": {"tokens": "10"}}, None, "Budget.tokens must be an int or None, got '10'"),
    ({"budget": {"tokens": -1}}, None, "Budget.tokens must be positive, got -1"),
    ({"seed": 1.5}, None, "seed must be an integer, got 1.5"),
]


@pytest.mark.parametrize("extra,mistake,words", BAD)
def test_bad_search_fields_get_400_with_solves_messages(server, client, extra, mistake, words):
    with pytest.raises(openai.BadRequestError) as err:
        ask(client, **extra)
    message = err.value.body["message"]  # type: ignore[index]
    assert words in message
    if mistake is not None:
        assert message == solve_error(**mistake)
    if "budget" in extra:  # the Budget's own check, word for word
        with pytest.raises((TypeError, ValueError)) as want:
            search.Budget(**extra["budget"])
        assert message == str(want.value)


def test_malformed_bodies_get_4xx_and_touch_nothing(server, client):
    url, service = server
    post = lambda content, **kw: httpx.post(url + "/v1/chat/completions", content=content,  # noqa: E731
                                            timeout=30, **kw)
    good = {"model": MODEL, "messages": [{"role": "user", "content": QUESTION}]}
    latin = b'{"model": "tiny-arith", "messages": [{"role": "user", "content": "\xff"}]}'
    cases = [
        (post(latin), 400, f"byte 0xff at position {latin.index(0xff)} is not UTF-8"),
        (post(b'{"model": '), 400, "the request body is not JSON"),
        (post(json.dumps({**good, "messages": [{"role": "user", "content": "\ud800"}]})),
         400, Problem.__name__ + ".prompt is not valid text"),
        (post(json.dumps({**good, "filler": "x" * MAX_BODY})), 413, "larger than this server"),
        (post(json.dumps({**good, "model": "gpt-4"})), 404, "does not exist"),
        (post(json.dumps({**good, "algorithm": "beam"})), 400, "did you mean 'algo'"),
        (post(json.dumps({**good, "n": 99})), 400, "n must be between 1 and 16"),
        (post(json.dumps({**good, "algo": "greedy", "temperature": 0.5})), 400,
         "greedy has no temperature knob"),
        (post(json.dumps({**good, "budget": {"tokns": 5}})), 400, "did you mean 'tokens'"),
        (post(json.dumps([1, 2])), 400, "must be a JSON object"),
        (post(json.dumps({**good, "messages": [{"role": "system", "content": "Be brief."},
                                                *good["messages"]]})),
         400, "this model has no chat template"),
        # tiny-arith's alphabet has no "W": it would read its unknown token there
        (post(json.dumps({**good, "messages": [{"role": "user", "content": "What is 2 + 3?"}]})),
         400, "the model 'tiny-arith' cannot read 'W': its tokenizer has no token for it; it "
              "reads arithmetic word problems"),
    ]
    for response, status, words in cases:
        assert response.status_code == status, response.text
        assert words in response.json()["error"]["message"]
    with pytest.raises(ValueError) as want:  # the same words as the Problem's own check
        Problem("\ud800")
    assert str(want.value) == cases[2][0].json()["error"]["message"]
    assert health(url)["failed"] == 0 and ask(client).choices[0].message.content


@pytest.mark.parametrize("stream", [False, True])
def test_a_cut_search_returns_its_best_partial_path_as_length(server, client, stream):
    _, service = server
    ref = alone(service, "best_of_n", n=1, select="vote", seed=1,
                budget=search.Budget(tokens=12), fit_budget=False)
    partial = best_partial(ref.candidates)
    assert ref.text == "" and partial is not None and partial.text  # no path ended
    reply = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": QUESTION}], seed=1, max_tokens=12,
        stream=stream)
    if stream:
        chunks = [c for c in reply if c.choices]
        text = "".join(c.choices[0].delta.content or "" for c in chunks)
        reason = chunks[-1].choices[0].finish_reason
    else:
        text, reason = reply.choices[0].message.content, reply.choices[0].finish_reason
    assert (text, reason) == (partial.text, "length")


def test_answer_pattern_and_step_delimiter_shape_the_search(server, client):
    _, service = server
    extra = {"algo": "best_of_n", "knobs": {"n": 4}, "seed": 3, "step_delimiter": "\n",
             "answer_pattern": r"(\d+) apples\.$"}
    reply = ask(client, **extra)
    problem = Problem(QUESTION, id="request", domain=TEXT,
                      metadata={ANSWER_PATTERN: extra["answer_pattern"]})
    ref = search.solve(problem, "best_of_n", engine=service.driver.engine, n=4, seed=3,
                       stop=("\n",), progress=False)
    same(reply.choices[0], ref)
    assert ref.answer is not None and ref.answer.isdigit()  # "N apples." read as N
    assert all(len(n.step.text.split("\n")) <= 2 for n in ref.tree.walk() if n.step)


def test_a_client_that_leaves_cancels_its_search_and_frees_its_kv(server, client):
    """Two clients leave (a plain request, a stream) while others are answered: once nothing
    runs, the engine holds no KV at once (each search frees its own as it ends, cancelled
    too; no garbage collection is waited for)."""
    url, service = server
    body = {"model": MODEL, "messages": [{"role": "user", "content": QUESTION}], **LONG,
            "budget": {"tokens": 60000}}  # (more than the leavers can spend before they go)
    before = health(url)
    with ThreadPoolExecutor(3) as pool:  # answered meanwhile: a load around the leavers
        answered = pool.map(lambda s: ask(client, algo="best_of_n", knobs={"n": 4}, seed=s),
                            range(3))
        with pytest.raises(httpx.ReadTimeout):  # a plain request: its client gives up
            httpx.post(url + "/v1/chat/completions", json=body, timeout=1.5)
        with httpx.stream("POST", url + "/v1/chat/completions", json={**body, "stream": True},
                          timeout=30) as r:  # a stream: its client stops reading, after progress
            lines = r.iter_lines()
            while not next(lines).startswith(": 0: search"):
                pass
        assert all(a.choices[0].message.content for a in answered)
    deadline = time.monotonic() + 60
    while (now := health(url))["in_flight"] or now["cancelled"] < before["cancelled"] + 2:
        assert time.monotonic() < deadline, (before, now)
        time.sleep(0.1)
    assert now["kv_cached_tokens"] == 0, now
    assert now["finished"] == before["finished"] + 3, (before, now)


def test_concurrent_clients_get_what_each_gets_alone(server, client):
    url, _ = server
    requests = [dict(algo=a, seed=s, budget={"tokens": 200},
                     **({"scorer": "steps"} if a in ("beam", "best_of_n") else {}))
                for a in ("beam", "best_of_n", "rpc", "first_finish") for s in (0, 1)]

    def one(extra: dict[str, Any]) -> Any:
        return ask(client, **extra)

    one_by_one = [one(r) for r in requests]
    with ThreadPoolExecutor(len(requests)) as pool:
        at_once = list(pool.map(one, requests))
    for a, b in zip(one_by_one, at_once):
        assert a.choices[0].message.content == b.choices[0].message.content
        sa, sb = a.choices[0].model_extra["search"], b.choices[0].model_extra["search"]
        assert (sa["answer"], sa["usage"]["generated_tokens"], sa["usage"]["prefill_tokens"]) \
            == (sb["answer"], sb["usage"]["generated_tokens"], sb["usage"]["prefill_tokens"])
    assert health(url)["batching"]["widest"] >= 2  # forwards of several searches merged


def test_the_servers_connections_send_without_waiting_for_acks():
    """Every connection accepted on the server's socket has TCP_NODELAY, as uvicorn's asyncio
    transport sees it: else a kept-alive connection's response waits out the client's delayed
    ACK between its headers and its body (Nagle)."""
    seen: list[int] = []

    class Note(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            sock = transport.get_extra_info("socket")
            seen.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    async def accept_two() -> None:
        srv = await asyncio.get_running_loop().create_server(
            Note, sock=listening("127.0.0.1", 0))
        port = srv.sockets[0].getsockname()[1]
        for k in range(2):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            while len(seen) <= k:
                await asyncio.sleep(0.01)
            writer.close()
        srv.close()

    asyncio.run(asyncio.wait_for(accept_two(), 30))
    assert len(seen) == 2 and all(seen), seen


CONVERSATION = [{"role": "system", "content": "You are a helpful assistant. Answer in one "
                                               "short sentence."},
                {"role": "user", "content": "Hi! I have a geography question."},
                {"role": "assistant", "content": "Sure, ask away."},
                {"role": "user", "content": "What is the capital of France?"}]


@pytest.mark.slow
def test_a_chat_model_answers_a_conversation_as_its_template_reads_it():
    """SmolLM2 has a chat template: the system turn and the earlier turns reach it as they
    are (no instruction added), its reply is free text (no math answer forced), and a cut
    request shows the text so far."""
    model = "smollm2-135m"
    with serving(model) as (url, service):
        c = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=300)
        reply = c.chat.completions.create(model=model, messages=CONVERSATION,  # type: ignore[arg-type]
                                          temperature=0, seed=0)
        cut = c.chat.completions.create(model=model, messages=CONVERSATION,  # type: ignore[arg-type]
                                        temperature=0, seed=0, max_tokens=4)
        problem = Problem(messages=tuple(CONVERSATION), id="request", domain=TEXT)
        ref = search.solve(problem, "best_of_n", engine=service.driver.engine, n=1,
                           select="vote", temperature=0.0, stop=None, progress=False)
        engine = service.driver.engine
        # the prompt is the model's own chat template over the messages, nothing else
        rendered = engine.tokenizer.apply_chat_template(  # type: ignore[attr-defined]
            CONVERSATION, tokenize=False, add_generation_prompt=True)
        assert engine.decode(ref.tree.prompt_ids, skip_special=False) == rendered  # type: ignore[attr-defined]
        idle = health(url)
    content = reply.choices[0].message.content
    assert content and "Paris" in content and reply.choices[0].finish_reason == "stop"
    same(reply.choices[0], ref)
    assert ref.answer == content.strip() and ref.status == "ok"
    assert cut.choices[0].finish_reason == "length"
    assert cut.choices[0].message.content and content.startswith(cut.choices[0].message.content)
    assert cut.usage is not None and cut.usage.completion_tokens <= 4
    assert (idle["in_flight"], idle["kv_cached_tokens"]) == (0, 0)


def test_the_docs_first_example_answers_its_question(server):
    """docs/serve.md's first client block, run against this server (its URL swapped in)."""
    url, _ = server
    text = (REPO / "docs" / "serve.md").read_text(encoding="utf-8")
    block = text.split("```python\n", 1)[1].split("```", 1)[0]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block.replace("http://127.0.0.1:8000", url), "docs/serve.md", "exec"),
             {"__name__": "__main__"})
    solution = out.getvalue().split("\n{")[0]  # the content, before the search field's line
    assert solution.startswith("Mia has 5 * 8 = 40 apples.")
    assert solution.rstrip().endswith("The answer is 161.")
