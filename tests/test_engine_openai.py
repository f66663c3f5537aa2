"""The OpenAI-completions engine (search.engines.openai).

Fast tests drive a stub server (stdlib http.server on 127.0.0.1, in a thread) that answers like
llama.cpp: a scripted "model" per prompt and seed, stop strings cut off the text but kept in
the logprob tokens, usage counted by the stub itself. Faults on demand: 429, 500, hangs,
truncated JSON, wrong numbers of choices. A real server: tests/test_engine_openai_server.py.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

import search
from search.api import get_engine
from search.engines.base import subseed
from search.engines.openai import OpenAIEngine, parse_spec
from search.engines.openai.http_pool import RetryPolicy, ServerError
from search.types import Budget, Node, Problem, Step

FAST = RetryPolicy(retries=2, backoff=0.01, max_backoff=0.02, timeout=0.5)
EOS = object()


def scripted(prompt: str, seed: int) -> tuple[list[tuple[str, float]], bool]:
    """The stub's model: (tokens with logprobs, ends with EOS). Two reasoning steps, then
    "The answer is R." and EOS, R drawn from the seed (so samples differ)."""
    r = random.Random(seed).randint(2, 4)
    if prompt.count("\n\n") < 2:
        toks = ["Add", f" {r}", ".", "\n\n", "Then"]  # the stop token is followed by more
        return [(t, -0.25 * (i + 1) - 0.01 * r) for i, t in enumerate(toks)], False
    toks = ["The", " answer", " is", f" {r}", "."]
    return [(t, -0.1 - 0.01 * r) for t in toks], True


class Stub(ThreadingHTTPServer):
    """faults: what the next POSTs do, in order ("429", "500", "hang", "truncate", "cut",
    "bad_n", "400", "nologprobs"); then normal answers. ignore_n: answer one choice always."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.faults: list[str] = []
        self.ignore_n = False
        self.style = "llama"  # "vllm": stop_reason field and include the stop in the text
        self.cached = 0  # prompt tokens to report as cached, per answer
        # how usage is reported: "openai" (prompt_tokens_details.cached_tokens),
        # "llama-server" (timings.prompt_n/cache_n, /models meta.n_params), "llama-cpp-python"
        # (prompt and completion tokens only), "vllm-plain" (prompt_tokens_details null)
        self.shape = "openai"
        self.prefix_cache = False  # a single-slot cache: the previous prompt's longest prefix
        self.slot: list[str] = []
        self.evaluated = 0  # prompt tokens the stub "computed", of answers sent whole
        self.n_params = 1234
        self.bodies: list[dict[str, Any]] = []  # every POST body received
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0}  # of answers sent whole
        self.in_flight = self.peak = 0
        self.delay = 0.0
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt, n = body["prompt"], body.get("n", 1)
        stops, cap = body.get("stop") or [], body["max_tokens"]
        choices, completion = [], 0
        for j in range(1 if self.ignore_n else n):
            toks, eos = scripted(prompt, body.get("seed", 0) + 1000 * j)
            out, finish, matched = [], "length", None
            for tok in toks:
                if len(out) == cap:
                    break
                out.append(tok)
                hit = [s for s in stops if s in "".join(t for t, _ in out)]
                if hit:
                    finish, matched = "stop", hit[0]
                    break
            else:
                finish = "stop" if eos else "length"
            completion += len(out)
            text = "".join(t for t, _ in out)
            if matched and self.style == "llama":
                text = text[:text.index(matched)]
            if body.get("echo"):  # the prompt's "tokens" (words), the last one less likely
                words = re.findall(r"\S+\s*|\s+", prompt)
                out = [(w, -1.0) for w in words[:-1]] + [(words[-1], -2.0)] + out
                text = prompt + text
            choice: dict[str, Any] = {
                "index": j, "text": text, "finish_reason": finish,
                "logprobs": {"tokens": [t for t, _ in out],
                             "token_logprobs": [lp for _, lp in out],
                             "top_logprobs": [{t: lp, "zz": lp - 3.0} for t, lp in out]}}
            if self.style == "vllm":
                choice["stop_reason"] = matched
            choices.append(choice)
        words = ["<s>", *prompt.split()]  # the stub's prompt tokens
        cached = self.cached
        if self.prefix_cache:
            with self.lock:
                hit = next((i for i, (a, b) in enumerate(zip(words, self.slot)) if a != b),
                           min(len(words), len(self.slot)))
                cached = min(hit, len(words) - 1)  # the last token is always evaluated
                self.slot = words
        usage: dict[str, Any] = {"prompt_tokens": len(words), "completion_tokens": completion}
        data: dict[str, Any] = {"object": "text_completion", "choices": choices, "usage": usage,
                                "evaluated": len(words) - cached}
        if self.shape == "openai":
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        elif self.shape == "vllm-plain":
            usage["prompt_tokens_details"] = None
        elif self.shape == "llama-server":
            data["timings"] = {"prompt_n": len(words) - cached, "cache_n": cached,
                               "predicted_n": completion, "prompt_ms": 1.0}
            for c in choices:  # its chat-style logprobs, also on /v1/completions
                lp = c["logprobs"]
                c["logprobs"] = {"content": [
                    {"id": 0, "token": t, "bytes": list(t.encode()), "logprob": v,
                     "top_logprobs": [{"token": k, "logprob": x} for k, x in top.items()]}
                    for t, v, top in zip(lp["tokens"], lp["token_logprobs"],
                                         lp["top_logprobs"])]}
        return data


class Handler(BaseHTTPRequestHandler):
    server: Stub

    def log_message(self, *args: Any) -> None:
        del args

    def _send(self, code: int, data: bytes, *, length: int | None = None,
              headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data) if length is None else length))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.endswith("/models"):
            meta = {"meta": {"n_params": self.server.n_params, "n_vocab": 50}} \
                if self.server.shape == "llama-server" else {}
            self._send(200, json.dumps({"data": [{"id": "stub-model", **meta}]}).encode())
        elif self.path == "/metrics":
            self._send(200, b"# HELP x\nvllm:prefix_cache_queries_total 40.0\n"
                            b"vllm:prefix_cache_hits_total 30.0\nvllm:other 1\n")
        else:
            self._send(404, b"{}")

    def do_POST(self) -> None:
        s = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with s.lock:
            s.bodies.append(body)
            fault = s.faults.pop(0) if s.faults else "ok"
            s.in_flight += 1
            s.peak = max(s.peak, s.in_flight)
        try:
            time.sleep(s.delay)
            self._answer(fault, body)
        finally:
            with s.lock:
                s.in_flight -= 1

    def _answer(self, fault: str, body: dict[str, Any]) -> None:
        s = self.server
        if fault in ("429", "500", "400"):
            self._send(int(fault), b'{"error": "' + fault.encode() + b' says the stub"}',
                       headers={"Retry-After": "0"} if fault == "429" else None)
            return
        if fault == "hang":
            time.sleep(FAST.timeout * 3)
            return
        data = s.complete(body)
        evaluated = data.pop("evaluated")  # the stub's own count: not on the wire
        if fault == "bad_n":
            data["choices"] = data["choices"][:-1]
        if fault == "nologprobs":
            for c in data["choices"]:
                c["logprobs"] = None
        raw = json.dumps(data).encode()
        if fault == "truncate":  # a complete HTTP answer whose JSON is cut short
            self._send(200, raw[:len(raw) // 2])
        elif fault == "cut":  # the connection drops mid-body
            self._send(200, raw[:len(raw) // 2], length=len(raw))
            self.close_connection = True
        else:
            with s.lock:
                for k in s.usage:
                    s.usage[k] += data["usage"][k]
                s.evaluated += evaluated
            self._send(200, raw)


@pytest.fixture
def stub() -> Iterator[Stub]:
    server = Stub()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def engine_for(stub: Stub, **kw: Any) -> OpenAIEngine:
    return OpenAIEngine(stub.url, "stub-model", **{"retry": FAST, **kw})


def step(node: Node) -> Step:
    assert node.step is not None, node
    return node.step


PROBLEM = Problem(prompt="What is 1 + 2 ?", id="p", answer="3")


# -- requests and steps -------------------------------------------------------------------------
def test_requests_carry_the_call_and_steps_follow_the_server(stub):
    eng = engine_for(stub, extra_body={"top_k": 0})
    root = eng.root(PROBLEM)
    kids = eng.expand([root], 3, stop=["\n\n"], max_tokens=9, temperature=0.7, top_p=0.9,
                      seed=5)[0]
    (body,) = stub.bodies
    assert body == {"model": "stub-model", "prompt": "What is 1 + 2 ?\n", "n": 3, "max_tokens": 9,
                    "temperature": 0.7, "top_p": 0.9, "stop": ["\n\n"], "logprobs": 1,
                    "seed": subseed(5, 0), "top_k": 0}
    for j, kid in enumerate(kids):  # the stub's own script, stop string kept as HFEngine does
        toks, _ = scripted(body["prompt"], body["seed"] + 1000 * j)
        assert step(kid).text == "".join(t for t, _ in toks[:4]) and step(kid).text.endswith("\n\n")
        assert step(kid).logprobs == tuple(lp for _, lp in toks[:4])
        assert step(kid).stop_reason == "stop" and not kid.finished
        assert eng.decode(step(kid).token_ids) == step(kid).text
    # the next call sends each node's whole text; EOS ends the path
    grand = eng.expand(kids[:2], 1, seed=6)
    # the two requests go out concurrently, so they may arrive in either order
    sent = sorted((b["prompt"], b["seed"]) for b in stub.bodies[1:])
    assert sent == sorted(("What is 1 + 2 ?\n" + step(k).text, subseed(6, i))
                          for i, k in enumerate(kids[:2]))
    last = eng.expand([grand[0][0]], 1, max_tokens=50)[0][0]
    assert step(last).text.startswith("The answer is") and step(last).stop_reason == "eos"
    assert last.finished
    cut = eng.expand([grand[0][0]], 1, max_tokens=2)[0][0]
    assert (step(cut).text, step(cut).stop_reason) == ("The answer", "max_tokens")


def test_vllm_style_stop_reason_and_included_stop(stub):
    stub.style = "vllm"
    eng = engine_for(stub)
    kid = eng.expand([eng.root(PROBLEM)], 1, seed=1)[0][0]
    assert step(kid).text.endswith("\n\n") and step(kid).text.count("\n\n") == 1
    assert step(kid).stop_reason == "stop"
    leaf = eng.expand(eng.expand([kid], 1)[0], 1)[0][0]
    assert step(leaf).stop_reason == "eos" and leaf.finished


def test_usage_is_the_servers_count_and_cached_tokens_are_not_prefill(stub):
    stub.cached = 2
    eng = engine_for(stub)
    nodes = [eng.root(PROBLEM), eng.root(Problem(prompt="Another one here", id="q"))]
    kids = eng.expand(nodes, 2, seed=3)
    eng.expand([k for ks in kids for k in ks], 2, seed=4)
    used = eng.meter.usage()
    assert used.generated_tokens == stub.usage["completion_tokens"] == 2 * 2 * 4 + 4 * 2 * 4
    assert used.prefill_tokens == stub.usage["prompt_tokens"] - 2 * len(stub.bodies)
    assert eng.server_stats["cached_prompt_tokens"] == 2 * len(stub.bodies)
    assert eng.server_stats["prompt_tokens"] == stub.usage["prompt_tokens"]
    assert eng.cache_metrics() == {"vllm:prefix_cache_queries_total": 40.0,
                                   "vllm:prefix_cache_hits_total": 30.0}


def test_model_found_from_the_server_and_names_by_spec(stub):
    eng = OpenAIEngine(stub.url, retry=FAST)
    eng.expand([eng.root(PROBLEM)], 1)
    assert eng.model == "stub-model" and stub.bodies[0]["model"] == "stub-model"
    assert parse_spec("openai:http://h:1/v1/#m") == ("http://h:1/v1", "m")
    by_name = get_engine(f"openai:{stub.url}#stub-model")
    assert isinstance(by_name, OpenAIEngine) and by_name.name == f"openai:{stub.url}#stub-model"
    assert (by_name.base_url, by_name.model) == (stub.url, "stub-model")
    with pytest.raises(ValueError, match="http"):
        parse_spec("openai:127.0.0.1:8080#m")
    nobody = OpenAIEngine("http://127.0.0.1:9/v1", retry=FAST)  # nothing listens there
    with pytest.raises(ServerError, match="GET http://127.0.0.1:9/v1/models: ConnectError"):
        nobody.expand([nobody.root(PROBLEM)], 1)
    nobody.model = "m"
    with pytest.raises(ServerError, match="failed after 3 attempts; last: ConnectError"):
        nobody.expand([nobody.root(PROBLEM)], 1)


def test_concurrency_limit(stub):
    stub.delay = 0.05
    eng = engine_for(stub, concurrency=2)
    roots = [eng.root(Problem(prompt=f"Question {i}", id=str(i))) for i in range(6)]
    assert len(eng.expand(roots, 1)) == 6 and len(stub.bodies) == 6
    assert stub.peak <= 2


# -- n ------------------------------------------------------------------------------------------
def test_ignored_n_falls_back_to_separate_requests_with_the_same_steps(stub):
    stub.ignore_n = True
    eng = engine_for(stub)
    first = eng.expand([eng.root(PROBLEM)], 3, seed=9)[0]
    assert eng.native_n is False and eng.server_stats["n_ignored"] == 1
    assert [b["n"] for b in stub.bodies] == [3, 1, 1]
    # the two follow-up requests go out concurrently: their arrival order is the server's
    assert stub.bodies[0]["seed"] == subseed(9, 0)
    assert sorted(b["seed"] for b in stub.bodies[1:]) == sorted([subseed(9, 0, 1),
                                                                subseed(9, 0, 2)])
    again = eng.expand([eng.root(PROBLEM)], 3, seed=9)[0]
    assert [b["n"] for b in stub.bodies[3:]] == [1, 1, 1]
    known = engine_for(stub, n_mode="separate")
    third = known.expand([known.root(PROBLEM)], 3, seed=9)[0]
    texts = [[step(k).text for k in ks] for ks in (first, again, third)]
    assert texts[0] == texts[1] == texts[2] and len(set(texts[0])) > 1
    assert eng.meter.generated_tokens == stub.usage["completion_tokens"] - \
        known.meter.generated_tokens


def test_refused_n_falls_back_to_separate_requests(stub):
    """llama-server answers HTTP 400 for n above its slot count: the samples come from
    separate requests instead, the very steps of an engine told n_mode="separate"."""
    stub.faults = ["400"]
    eng = engine_for(stub)
    kids = eng.expand([eng.root(PROBLEM)], 3, seed=9)[0]
    assert eng.native_n is False and eng.server_stats["n_refused"] == 1
    assert [b["n"] for b in stub.bodies] == [3, 1, 1, 1]
    plain = engine_for(stub, n_mode="separate")
    ref = plain.expand([plain.root(PROBLEM)], 3, seed=9)[0]
    assert [step(k).text for k in kids] == [step(k).text for k in ref]
    stub.faults = ["400"]
    with pytest.raises(ServerError, match="HTTP 400"):  # once known, a 400 is an error
        eng.expand([eng.root(PROBLEM)], 3)


@pytest.mark.parametrize("mode", ["auto", "native"])
def test_wrong_number_of_choices_is_an_error(stub, mode):
    stub.faults = ["bad_n"]
    eng = engine_for(stub, n_mode=mode)
    with pytest.raises(ServerError, match="asked for n=3 choices, the server returned 2"):
        eng.expand([eng.root(PROBLEM)], 3)
    stub.ignore_n = True
    if mode == "native":  # told the server honours n: one choice for three is wrong too
        with pytest.raises(ServerError, match="returned 1"):
            eng.expand([eng.root(PROBLEM)], 3)


# -- faults -------------------------------------------------------------------------------------
@pytest.mark.parametrize("fault", ["429", "500", "hang", "truncate", "cut"])
def test_transient_faults_are_retried(stub, fault):
    stub.faults = [fault, fault]  # two failures, then an answer (retries=2)
    eng = engine_for(stub)
    reference = engine_for(stub)
    kids = eng.expand([eng.root(PROBLEM)], 2, seed=4)[0]
    assert len(stub.bodies) == 3 and eng.server_stats["retries"] == 2
    ref = reference.expand([reference.root(PROBLEM)], 2, seed=4)[0]
    assert [k.step for k in kids] == [k.step for k in ref]
    assert eng.meter.usage().generated_tokens == reference.meter.usage().generated_tokens > 0


@pytest.mark.parametrize(("fault", "cause"), [
    ("429", "HTTP 429"), ("500", "HTTP 500"), ("hang", "timed out"),
    ("truncate", "a body that is not complete JSON"), ("cut", "RemoteProtocolError")])
def test_persistent_faults_end_in_a_clear_error(stub, fault, cause):
    stub.faults = [fault] * 3
    eng = engine_for(stub)
    with pytest.raises(ServerError, match=f"failed after 3 attempts; last: {cause}"):
        eng.expand([eng.root(PROBLEM)], 1)
    assert len(stub.bodies) == 3


def test_one_failed_request_fails_the_call_but_the_others_are_charged(stub):
    stub.faults = ["ok", "400"]
    eng = engine_for(stub, concurrency=1)
    roots = [eng.root(PROBLEM), eng.root(Problem(prompt="Second", id="s"))]
    with pytest.raises(ServerError, match="1 of 2 requests failed.*HTTP 400: .*400 says the stub"):
        eng.expand(roots, 1)
    assert len(stub.bodies) == 2  # a 4xx is not retried
    assert eng.meter.generated_tokens == stub.usage["completion_tokens"] > 0


def test_missing_logprobs_is_an_error_not_a_free_step(stub):
    stub.faults = ["nologprobs"]
    eng = engine_for(stub)
    with pytest.raises(ServerError, match="without per-token logprobs"):
        eng.expand([eng.root(PROBLEM)], 1)


# -- token-level moves --------------------------------------------------------------------------
def test_topk_then_forcing_and_echo(stub):
    eng = engine_for(stub)
    root = eng.root(PROBLEM)
    (top,) = eng.topk_next([root], 2)
    toks, _ = scripted("What is 1 + 2 ?\n", 0)
    assert [eng.decode([i]) for i, _ in top] == [toks[0][0], "zz"]
    assert [lp for _, lp in top] == [toks[0][1], toks[0][1] - 3.0]
    sent = len(stub.bodies)
    (kid,) = eng.extend([root], [[top[1][0]]], generated=True)
    assert (step(kid).text, step(kid).logprobs) == ("zz", (top[1][1],)) and len(stub.bodies) == sent
    assert eng.next_logprobs([root], [i for i, _ in top]) == [[lp for _, lp in top]]
    with pytest.raises(NotImplementedError, match=r"OpenAIEngine\.extend: .*echo"):
        eng.extend([root], [" free text"])
    with pytest.raises(NotImplementedError, match=r"OpenAIEngine\.next_logprobs"):
        eng.next_logprobs([kid], [top[0][0]])
    echo = engine_for(stub, echo=True)
    (forced,) = echo.extend([echo.root(PROBLEM)], ["Go on"])
    assert stub.bodies[-1]["echo"] is True and stub.bodies[-1]["prompt"] == "What is 1 + 2 ?\nGo on"
    # the stub's prompt tokens are words: "Go " and "on" (the last one at -2)
    assert step(forced).text == echo.decode(step(forced).token_ids) == "Go on"
    assert step(forced).logprobs == (-1.0, -2.0)


# -- through search.solve -----------------------------------------------------------------------
@pytest.mark.parametrize("algo", ["best_of_n", "beam"])
def test_solve_through_the_stub(stub, algo):
    eng = engine_for(stub)
    result = search.solve(PROBLEM, algo, Budget(tokens=500), engine=eng, seed=1, n=4)
    assert result.status == "ok" and result.answer in {"2", "3", "4"}
    assert result.usage.generated_tokens == stub.usage["completion_tokens"] > 0
    assert result.usage.prefill_tokens == stub.usage["prompt_tokens"]
    again = search.solve(PROBLEM, algo, Budget(tokens=500), engine=engine_for(stub), seed=1, n=4)
    assert (again.answer, again.text) == (result.answer, result.text)


def test_concurrent_searches_send_concurrent_requests(stub):
    """solve_many on the OpenAI engine: the searches' requests overlap at the server (what
    lets vLLM, SGLang or llama.cpp batch them), and each Result and its usage (the server's
    own counts) is what the search gets alone."""
    eng = engine_for(stub)
    probs = [Problem(prompt=f"What is {i} + {i} ?", id=f"p{i}", answer=str(2 * i))
             for i in range(6)]
    kw: dict[str, Any] = dict(n=2, select="weighted_vote")
    stub.delay = 0.02
    alone = [search.solve(p, "best_of_n", engine=eng, scorer="logprob", seed=1, **kw)
             for p in probs]
    one, stub.peak = stub.peak, 0  # a search alone: at most its own nodes' requests at once
    many = search.solve_many(probs, "best_of_n", engine=eng, scorer="logprob", seeds=(1,),
                             concurrency=6, **kw)
    assert stub.peak > one
    for a, b in zip(alone, many):
        assert (a.answer, a.text, a.status) == (b.answer, b.text, b.status)
        assert [(c.text, c.score) for c in a.candidates] == [(c.text, c.score) for c in b.candidates]
        assert {k: v for k, v in a.usage.as_dict().items() if k != "seconds"} == \
            {k: v for k, v in b.usage.as_dict().items() if k != "seconds"}
        # the server counts of its own requests, not of the searches that ran beside it
        assert a.stats["server"] == b.stats["server"] and b.stats["server"]["requests"] > 0
        assert b.stats["server"]["completion_tokens"] == b.usage.generated_tokens
    assert sum(r.usage.generated_tokens for r in many) * 2 == stub.usage["completion_tokens"]
    assert sum(r.stats["server"]["requests"] for r in many) * 2 == eng.server_stats["requests"]
