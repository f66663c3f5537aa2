"""`python -m search.serve` as a process: its checks before loading, and SIGTERM (no new
requests, the searches in flight finish or are cancelled after the grace period, exit 0)."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from conftest import REPO

from search.serve.__main__ import KERNEL_CACHE, KERNEL_CACHE_VARIABLES, kernel_cache

MODEL = "tiny-arith"
QUESTION = "Tom has 12 apples. Tom buys 5 more apples. How many apples does Tom have now?"
STARTUP_SECONDS = 300  # loading tiny-arith on a busy machine


def serve(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "search.serve", *args], cwd=REPO, env=env,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)


def lines_of(proc: subprocess.Popen[str]) -> queue.SimpleQueue[str | None]:
    """The process's stderr lines, read in a thread (so a wait can time out); None at its
    end."""
    out: queue.SimpleQueue[str | None] = queue.SimpleQueue()

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            out.put(line)
        out.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return out


@pytest.fixture
def server() -> Iterator[tuple[subprocess.Popen[str], str, queue.SimpleQueue[str | None]]]:
    proc = serve("--model", MODEL, "--port", "0", "--grace", "3")
    lines = lines_of(proc)
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        url = None
        while url is None:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            assert line is not None, "the server ended before serving"
            if m := re.search(r"on (http://127\.0\.0\.1:\d+)/v1", line):
                url = m[1]
        while True:  # the socket is bound; uvicorn listens once its app has started
            try:
                if httpx.get(url + "/health").status_code == 200:
                    break
            except httpx.ConnectError:
                assert time.monotonic() < deadline, "the server did not come up"
                time.sleep(0.2)
        yield proc, url, lines
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_bad_names_are_refused_before_the_model_loads():
    proc = serve("--model", MODEL, "--algo", "bem")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "did you mean 'beam'?" in err
    proc = serve("--model", MODEL, "--algo", "beam", "--knob", "wdth=3")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "beam() has no knob 'wdth'" in err


@pytest.mark.parametrize("given, environment, kept", [
    (None, None, str(KERNEL_CACHE)),  # the server's default
    (None, "64", "64"),  # the environment's choice stands
    (32, "64", "32"),  # --kernel-cache wins
])
def test_the_kernel_caches_are_capped_unless_the_environment_says(monkeypatch, given,
                                                                  environment, kept):
    for name in KERNEL_CACHE_VARIABLES:
        if environment is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, environment)
    kernel_cache(given)
    assert [os.environ[name] for name in KERNEL_CACHE_VARIABLES] == [kept, kept]


def test_sigterm_finishes_or_cancels_the_searches_in_flight_and_exits_0(server):
    proc, url, lines = server
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120)
    answers: dict[str, Any] = {}

    def ask(name: str, **extra: Any) -> None:
        try:
            answers[name] = client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": QUESTION}],
                extra_body=extra)
        except openai.APIStatusError as err:
            answers[name] = err

    # 512 rambling samples: ~40 s of work on a 2-core machine (16 had ended within the
    # grace period on a fast one, answered, not cancelled)
    endless = threading.Thread(target=ask, args=("endless",),
                               kwargs={"knobs": {"n": 512}, "temperature": 3.0})
    endless.start()
    deadline = time.monotonic() + 60
    while httpx.get(url + "/health").json()["in_flight"] < 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    # while it drains, the server still answers: /health with 503, a new search with 503
    deadline = time.monotonic() + 30
    while (health := httpx.get(url + "/health")).status_code == 200:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert health.status_code == 503 and health.json()["status"] == "shutting down"
    ask("late")
    late = answers["late"]
    assert isinstance(late, openai.APIStatusError) and late.status_code == 503
    assert proc.wait(timeout=120) == 0
    endless.join(timeout=30)
    got = answers["endless"]
    assert isinstance(got, openai.APIStatusError) and got.status_code == 503
    assert "cancelled" in got.message
    with pytest.raises(httpx.ConnectError):  # nothing listens any more
        httpx.get(url + "/health")
    said = list(iter(lambda: lines.get(timeout=30), None))
    assert any("search.serve: stopped" in line for line in said), said
