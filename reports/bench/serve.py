"""Load test of search.serve on loopback: batching under concurrency, and a soak.

Starts `python -m search.serve` on 127.0.0.1 (an ephemeral port) and drives it with the
official openai client from threads of this process.

  c16   16 best-of-8 requests (seeds 0-15) sent one after another, then all at once:
        throughput ratio (target >= 4x) and p50 latency at concurrency 16 against a lone
        request's (target <= 3x); every concurrent answer must equal its sequential one.
  soak  --minutes at concurrency 32: good requests (a mix of searches, each checked against
        its first answer), 5% bad requests (each must get its 4xx), 5% clients that leave
        after 0.3 s; 0 failed or wrong responses, and the server's peak RSS after warm-up
        (the first fifth) within 5% of its peak RSS during it (sampled every 2 s).

    python -m reports.bench.serve [--part c16|soak|all] [--minutes 10] [--model tiny-arith]
"""

from __future__ import annotations

import json
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import httpx
import openai

from search.cli import parse

QUESTION = "What is 17 * 23 - 5?"
GOOD = [  # the soak's searches (extra fields): small budgets, several algorithms
    {"algo": "best_of_n", "knobs": {"n": 4}, "budget": {"tokens": 200}},
    {"algo": "beam", "scorer": "steps", "knobs": {"n": 4, "m": 2}, "budget": {"tokens": 200}},
    {"algo": "greedy"},
    {"algo": "first_finish", "knobs": {"n": 4}},
    {"algo": "rpc", "knobs": {"n": 4}, "budget": {"tokens": 200}},
    {"algo": "particle_filter", "scorer": "steps", "knobs": {"n": 4}, "budget": {"tokens": 200}},
]
SEEDS = 4  # each good search with seeds 0..3: 24 distinct requests
BAD = [  # (body, the status it must get)
    (json.dumps({"model": "{model}", "messages": [{"role": "user", "content": "1+1"}],
                 "algo": "bem"}).encode(), 400),
    (b'{"model": "{model}", "messages": [{"role": "user", "content": "\xff"}]}', 400),
    (json.dumps({"model": "{model}", "messages": [{"role": "user", "content": "1+1"}],
                 "budget": {"tokens": "ten"}}).encode(), 400),
    (b'{"model": ', 400),
    (b"x" * (2 << 20), 413),
]
LEAVER = {"knobs": {"n": 8}, "temperature": 3.0, "budget": {"tokens": 3000}}


# -- the server -----------------------------------------------------------------------------------
@contextmanager
def server(model: str, concurrency: int) -> Iterator[tuple[str, int]]:
    """A search.serve process on 127.0.0.1: (its base URL, its pid), stopped by SIGTERM."""
    proc = subprocess.Popen([sys.executable, "-m", "search.serve", "--model", model,
                             "--port", "0", "--concurrency", str(concurrency), "--grace", "5"],
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        url = None
        for line in proc.stderr:
            if m := re.search(r"on (http://127\.0\.0\.1:\d+)/v1", line):
                url = m[1]
                break
        if url is None:
            raise RuntimeError("the server ended before serving")
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # drain
        deadline = time.monotonic() + 120
        while True:
            try:
                httpx.get(url + "/health").raise_for_status()
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield url, proc.pid
    finally:
        proc.terminate()
        print(f"server exit status after SIGTERM: {proc.wait(timeout=120)}")


def rss_kib(pid: int) -> int:
    """The process's resident memory now (VmRSS), KiB."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=600)


def ask(c: openai.OpenAI, model: str, extra: dict[str, Any]
        ) -> tuple[float, tuple[Any, ...], float]:
    """(latency in seconds, what must match: text, answer, generated tokens; the search's
    own seconds in the server)."""
    start = time.perf_counter()
    r = c.chat.completions.create(model=model, extra_body=extra,
                                  messages=[{"role": "user", "content": QUESTION}])
    seconds = time.perf_counter() - start
    s = r.choices[0].model_extra["search"]  # type: ignore[index]
    return seconds, (r.choices[0].message.content, s["answer"], s["usage"]["generated_tokens"]), \
        s["usage"]["seconds"]


# -- c16 --------------------------------------------------------------------------------------------
def c16(url: str, model: str, clients: int = 16, n: int = 8, ceiling: bool = False) -> None:
    c = client(url)
    reqs = [{"algo": "best_of_n", "knobs": {"n": n}, "seed": s} for s in range(clients)]
    ask(c, model, reqs[0])  # warm-up
    lone = statistics.median(ask(c, model, reqs[0])[0] for _ in range(3))
    start = time.perf_counter()
    one_by_one = [ask(c, model, r) for r in reqs]
    t_seq = time.perf_counter() - start
    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        at_once = list(pool.map(lambda r: ask(c, model, r), reqs))
    t_conc = time.perf_counter() - start
    wrong = sum(a[1] != b[1] for a, b in zip(one_by_one, at_once))
    p50 = statistics.median(a[0] for a in at_once)
    inside = statistics.median(a[2] for a in at_once)
    print(f"c{clients} best-of-{n} on {model} (load {os.getloadavg()[0]:.1f}):")
    print(f"  lone request      {lone:.3f} s (median of 3)")
    print(f"  one after another {t_seq:.2f} s  ({clients / t_seq:.2f} req/s)")
    print(f"  all at once       {t_conc:.2f} s  ({clients / t_conc:.2f} req/s)")
    print(f"  throughput ratio  {t_seq / t_conc:.2f}x   (target >= 4x)")
    print(f"  p50 at c{clients}        {p50:.3f} s = {p50 / lone:.2f}x a lone request's "
          f"(target <= 3x); the searches' own median {inside:.3f} s in the server")
    print(f"  answers that differ from one-after-another: {wrong} of {clients}")
    if ceiling:  # the engine's own batching, in this process, just after
        import search

        engine = search.get_engine(model)
        start = time.perf_counter()
        for s in range(clients):
            search.solve(QUESTION, "best_of_n", engine=engine, n=n, seed=s, progress=False)
        t_alone = time.perf_counter() - start
        start = time.perf_counter()
        search.solve_many([QUESTION], "best_of_n", engine=engine, n=n, seeds=range(clients),
                          concurrency=clients)
        t_many = time.perf_counter() - start
        print(f"  in-process reference (load {os.getloadavg()[0]:.1f}): solve x{clients} "
              f"{t_alone:.2f} s, solve_many {t_many:.2f} s: {t_alone / t_many:.2f}x")


# -- soak ---------------------------------------------------------------------------------------------
def soak(url: str, pid: int, model: str, minutes: float, workers: int = 32, seed: int = 0
         ) -> None:
    c = client(url)
    good = [{**g, "seed": s} for g in GOOD for s in range(SEEDS)]
    expected = {i: ask(c, model, g)[1] for i, g in enumerate(good)}  # also the warm-up
    counts: Counter[str] = Counter()
    problems: list[str] = []
    lock = threading.Lock()
    end = time.monotonic() + minutes * 60
    warm_until = time.monotonic() + minutes * 60 / 5
    rss: list[tuple[float, int]] = []

    def note(what: str, problem: str | None = None) -> None:
        with lock:
            counts[what] += 1
            if problem is not None and len(problems) < 20:
                problems.append(problem)

    def worker(k: int) -> None:
        rng = random.Random(seed * 1000 + k)
        while time.monotonic() < end:
            roll = rng.random()
            try:
                if roll < 0.05:
                    body, status = rng.choice(BAD)
                    r = httpx.post(url + "/v1/chat/completions",
                                   content=body.replace(b"{model}", model.encode()),
                                   timeout=120)
                    ok = r.status_code == status and "error" in r.json()
                    note("bad refused" if ok else "failed",
                         None if ok else f"bad request got {r.status_code}: {r.text[:200]}")
                elif roll < 0.10:
                    body = {"model": model, "messages": [{"role": "user", "content": QUESTION}],
                            **LEAVER}
                    try:
                        httpx.post(url + "/v1/chat/completions", json=body, timeout=0.3)
                        note("leaver answered")  # the search ended within 0.3 s: fine
                    except httpx.TimeoutException:
                        note("left")
                else:
                    i = rng.randrange(len(good))
                    got = ask(c, model, good[i])[1]
                    ok = got == expected[i]
                    note("good" if ok else "wrong",
                         None if ok else f"{good[i]}: {got} != {expected[i]}")
            except Exception as err:  # noqa: BLE001  # counted and shown, the soak goes on
                note("failed", f"{type(err).__name__}: {err}")

    def sample() -> None:
        while time.monotonic() < end:
            rss.append((time.monotonic(), rss_kib(pid)))
            time.sleep(2.0)

    threading.Thread(target=sample, daemon=True).start()
    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(worker, range(workers)))
    wall = time.perf_counter() - start
    time.sleep(1.0)
    health = httpx.get(url + "/health").json()
    at_warm = max(kib for t, kib in rss if t <= warm_until)  # the warm-up's peak
    peak = max(kib for t, kib in rss if t > warm_until)
    print(f"soak: {minutes:g} min at concurrency {workers} on {model} "
          f"(load {os.getloadavg()[0]:.1f}), {sum(counts.values())} requests in {wall:.0f} s")
    print("  " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    print(f"  failed or wrong: {counts['failed'] + counts['wrong']} (target 0)")
    print(f"  server: {json.dumps({k: health[k] for k in ('finished', 'cancelled', 'failed', 'in_flight', 'kv_cached_tokens')})}")
    print(f"  server peak RSS: {at_warm / 1024:.0f} MiB in the warm-up (first fifth), "
          f"{peak / 1024:.0f} MiB after it: growth {100 * (peak - at_warm) / at_warm:+.1f}% "
          f"(target < 5%)")
    begin = rss[0][0]
    fifths = [max((kib for t, kib in rss if (t - begin) * 5 // (minutes * 60) == k), default=0)
              for k in range(5)]
    print("  server peak RSS by fifth of the soak: " +
          ", ".join(f"{kib / 1024:.0f}" for kib in fifths) + " MiB")
    for p in problems:
        print("  ", p)


OPTIONS: dict[str, dict[str, Any]] = {
    "--part": dict(choices=("c16", "soak", "all"), default="all"),
    "--minutes": dict(type=float, default=10.0, help="the soak's length"),
    "--model": dict(default="tiny-arith"),
    "--ceiling": dict(action="store_true", help="also time the same 16 searches in this "
                      "process, search.solve one by one against search.solve_many"),
}


def main(argv: list[str] | None = None) -> None:
    args = parse("python -m reports.bench.serve", __doc__, OPTIONS, argv)
    print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    parts: list[Callable[[str, int], None]] = []
    if args.part in ("c16", "all"):
        parts.append(lambda url, pid: c16(url, args.model, ceiling=args.ceiling))
    if args.part in ("soak", "all"):
        parts.append(lambda url, pid: soak(url, pid, args.model, args.minutes))
    with server(args.model, concurrency=32) as (url, pid):
        for part in parts:
            part(url, pid)


if __name__ == "__main__":
    main()
