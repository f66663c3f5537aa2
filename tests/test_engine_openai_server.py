"""The OpenAI-completions engine against real servers (slow): llama-cpp-python's server
(`pip install 'tts-search[llamacpp]'`, see .ci/run) and, where its binary is found
($LLAMA_SERVER or llama-server on PATH), llama.cpp's own llama-server, each serving the
SmolLM2-135M GGUF on 127.0.0.1 behind a recording proxy that reads the server's answers off
the wire. Full search.solve runs (best_of_n, beam) through them; prefill checked against each
server's own count of the prompt tokens it evaluated (llama-server: timings.prompt_n and its
/metrics; llama-cpp-python, which reports none in its answers: its verbose log); logprobs
checked against the transformers engine on the same weights."""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import warnings
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


class Backend:
    """A server process on 127.0.0.1 writing its log to `log` (appended to across starts).
    llama-cpp-python's server is known to die now and then under load (a segfault in its
    bindings, as its own issue tracker reports): `restart` starts it again on the same port,
    and `crashes` keeps each death's exit code and log tail for the module's report."""

    def __init__(self, command: Any, log: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.command, self.log = command, log
        self.crashes: list[str] = []
        self._lock = threading.Lock()
        self.proc = self._start()

    def _start(self) -> subprocess.Popen:
        import httpx

        with self.log.open("a") as out:
            proc = subprocess.Popen(self.command(self.port), stdout=out,
                                    stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the server exited ({proc.returncode}): {self.tail()}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/v1/models",
                             timeout=5).status_code == 200:
                    return proc
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"the server did not start: {self.tail()}")
            time.sleep(0.5)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def restart_if_dead(self, seen: subprocess.Popen) -> bool:
        """Start the server again if process `seen` died (once, whichever thread asks
        first) -> whether the server was or is now restarted."""
        with self._lock:
            if self.proc is not seen:
                return True  # another request's thread restarted it
            if seen.poll() is None:
                return False  # alive: the failure was not its death
            self.crashes.append(f"exit code {seen.returncode}; its log ended: {self.tail()}")
            self.proc = self._start()
            return True

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


class Recorder(ThreadingHTTPServer):
    """A proxy in front of a real server that sums the usage of every answer it passes on:
    the server's own counts, read off the wire (the engine's parsing is not involved)."""

    daemon_threads = True

    def __init__(self, backend: Backend) -> None:
        super().__init__(("127.0.0.1", 0), Forward)
        self.backend = backend
        self.upstream = f"127.0.0.1:{backend.port}"
        self.usage: list[dict[str, int]] = []
        self.prompts: list[str] = []
        self.answers: list[dict[str, Any]] = []
        self.log: Path | None = backend.log  # the server's own log

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def total(self, key: str, since: int = 0) -> int:
        return sum(u[key] for u in self.usage[since:])


class Forward(BaseHTTPRequestHandler):
    server: Recorder

    def log_message(self, *args: Any) -> None:
        del args

    def _exchange(self, method: str, body: bytes | None) -> tuple[int, bytes]:
        import http.client

        conn = http.client.HTTPConnection(self.server.upstream, timeout=600)
        try:
            conn.request(method, self.path, body=body,
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def _relay(self, method: str) -> None:
        import http.client

        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        backend = self.server.backend
        seen = backend.proc
        try:
            status, data = self._exchange(method, body)
        except (OSError, http.client.HTTPException):
            if not backend.restart_if_dead(seen):
                raise
            status, data = self._exchange(method, body)  # the same request, once more
        if method == "POST" and status == 200:
            self.server.answers.append(json.loads(data))
            self.server.usage.append(json.loads(data)["usage"])
            self.server.prompts.append(json.loads(body or b"{}")["prompt"])
        self.send_response(status)
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
    yield from serve(tmp_path_factory, lambda port: [
        sys.executable, "-m", "llama_cpp.server", "--model", str(smollm2_gguf()),
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--seed", "0",
        "--verbose", "true",  # its per-request prompt counts go to the log, not the answers
        "--n_threads", "1"])  # one thread: ggml threads spin-wait, so crawl on shared CPUs


@pytest.fixture(scope="module")
def llamacpp_server(tmp_path_factory) -> Iterator[Recorder]:
    """llama.cpp's own llama-server (one slot, /metrics on) with SmolLM2-135M."""
    binary = os.environ.get("LLAMA_SERVER") or shutil.which("llama-server")
    if not binary:
        pytest.skip("llama.cpp's llama-server is not found: set $LLAMA_SERVER or put it on PATH")
    yield from serve(tmp_path_factory, lambda port: [
        binary, "--model", str(smollm2_gguf()), "--host", "127.0.0.1", "--port", str(port),
        "--ctx-size", "2048", "--parallel", "1", "--threads", "1", "--metrics", "--seed", "0"])


def serve(tmp_path_factory, command) -> Iterator[Recorder]:
    """The server `command(port)` starts, behind a Recorder; a death of the server under
    the module's tests (restarted: Backend) is reported as a warning when they end."""
    backend = Backend(command, tmp_path_factory.mktemp("llama") / "server.log")
    try:
        proxy = Recorder(backend)
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        yield proxy
        proxy.shutdown()
        proxy.server_close()
        for crash in backend.crashes:
            warnings.warn(f"the server died under the tests and was restarted: {crash}",
                          stacklevel=1)
    finally:
        backend.stop()


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
    since, logged = len(proxy.usage), log_size(proxy)
    problem = Problem.of("What is 17 * 23 - 5?")
    result = search.solve(problem, algo, Budget(tokens=600), engine=eng, seed=0,
                          step_tokens=96, **knobs)
    used = result.usage
    # usage is the server's own count, as read off the wire by the proxy; the search stops
    # at the budget, overshooting by at most one expansion batch (n steps)
    assert 0 < used.generated_tokens == proxy.total("completion_tokens", since) \
        <= 600 + knobs["n"] * 96
    # llama-cpp-python's answers say nothing of its prefix cache: every prompt token is
    # charged, and flagged; its log says what it really evaluated, never more than that
    requests = len(proxy.usage) - since
    assert used.prefill_tokens == proxy.total("prompt_tokens", since) > 0
    assert result.stats["server"]["prompt_cache_unreported"] == requests
    assert result.stats["server"]["cached_prompt_tokens"] == 0
    evaluated, reused = logged_prompt_counts(proxy, logged)
    assert len(evaluated) == requests  # one count per request, in the server's own words
    assert sum(evaluated) + reused == used.prefill_tokens  # every prompt token accounted for
    assert 0 < sum(evaluated) < used.prefill_tokens  # its cache hit, unreported: upper bound
    # FLOPs: 2 * the tokenizer-given model's parameters per processed token
    assert eng.n_params is None or used.flops == 2.0 * eng.n_params * (
        used.prefill_tokens + used.generated_tokens)
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


def log_size(proxy: Recorder) -> int:
    assert proxy.log is not None
    return proxy.log.stat().st_size


def logged_prompt_counts(proxy: Recorder, since: int) -> tuple[list[int], int]:
    """llama-cpp-python's own counts, from its verbose log after byte `since`: the prompt
    tokens it evaluated per request ("llama_perf_context_print: prompt eval time = ... / M
    tokens") and the prompt tokens it took from its KV prefix in all ("Llama.generate: N
    prefix-match hit")."""
    import re

    assert proxy.log is not None
    text = proxy.log.read_bytes()[since:].decode(errors="replace")
    evaluated = [int(m) for m in re.findall(r"prompt eval time\s*=\s*[\d.]+ ms /\s*(\d+) tokens",
                                            text)]
    reused = sum(int(n) for n in re.findall(r"Llama\.generate: (\d+) prefix-match hit", text))
    return evaluated, reused


@pytest.mark.parametrize(("algo", "knobs"), [("best_of_n", {"n": 4}),
                                             ("beam", {"n": 4, "m": 2})])
def test_real_llama_server_prefill_is_its_own_count(llamacpp_server, smollm2_tokenizer, algo,
                                                     knobs):
    """llama.cpp's llama-server reports the prompt tokens it evaluated (timings.prompt_n) and
    sums them in /metrics: prefill is that count, below the prompt tokens sent whenever its
    slot cache hit; FLOPs use the parameter count it reports."""
    import httpx

    proxy = llamacpp_server
    root = proxy.url[:-len("/v1")]

    def processed() -> float:
        text = httpx.get(f"{root}/metrics", timeout=30).text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("llamacpp:prompt_tokens_total"))

    n_params = httpx.get(f"{proxy.url}/models", timeout=30).json()["data"][0]["meta"]["n_params"]
    eng = OpenAIEngine(proxy.url, tokenizer=smollm2_tokenizer, extra_body=PLAIN_SAMPLING,
                       concurrency=4)
    since, before = len(proxy.answers), processed()
    result = search.solve(Problem.of("What is 17 * 23 - 5?"), algo, Budget(tokens=600),
                          engine=eng, seed=0, step_tokens=96, **knobs)
    used, answers = result.usage, proxy.answers[since:]
    wire = sum(a["timings"]["prompt_n"] for a in answers)
    assert used.prefill_tokens == wire == processed() - before > 0
    assert used.prefill_tokens < sum(a["usage"]["prompt_tokens"] for a in answers)  # cache hits
    assert result.stats["server"]["prompt_cache_unreported"] == 0
    assert (eng.n_params, eng.n_params_source) == (n_params, "server")
    assert used.flops == 2.0 * n_params * (used.prefill_tokens + used.generated_tokens)
    assert result.status in ("ok", "budget_exhausted", "no_answer") and result.candidates


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
