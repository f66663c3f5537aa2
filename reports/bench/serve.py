"""Load test of search.serve on loopback: throughput and latency on realistic requests, memory
once idle, and a soak.

Starts `python -m search.serve` on 127.0.0.1 (an ephemeral port) and drives it with the
official openai client from threads of this process.

  load  16 realistic requests: the demo's level-5 word problems (generator seed 2024), each
        under the next of the demo's searches at the next of its widths (4, 16; its knobs,
        scorer steps). After a warm-up, --rounds rounds of: the 16 one after another (c1),
        four at a time (c4), all at once (c16), then the same 16 through solve_many's
        Driver in this process, all at once. Prints one table: requests per second (median
        over rounds), p50 and p95 latency, and each way against solve_many (target: c16 >=
        0.9x); every answer must equal the in-process run's.
  idle  4 passes of the 16 at c16, 10% of the clients leaving after 0.1-1 s: once idle, the
        KV the server holds (target 0) and its RSS against the RSS after the first pass
        (target within 5%).
  soak  --minutes at concurrency 32: good requests (a mix of searches, each checked against
        its first answer), 5% bad requests (each must get its 4xx), 5% clients that leave
        after 0.3 s; 0 failed or wrong responses, and the server's peak RSS after warm-up
        (the first fifth, which runs the same mix) within 5% of its peak RSS during it
        (sampled every 2 s).

    python -m reports.bench.serve [--part load|idle|soak|all] [--rounds 2] [--minutes 10]
                                  [--model tiny-arith]
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
from dataclasses import dataclass
from typing import Any

import httpx
import openai

from search.cli import parse

QUESTION = "Tom has 12 apples. Tom buys 5 more apples. How many apples does Tom have now?"
DATA_SEED, WIDTHS, SCORER = 2024, (4, 16), "steps"  # the demo's problem set, widths, scorer
# the demo's searches with its knobs and its one final rule (reports.demo's ALGOS and
# knobs(SELECT), which a benchmark may not import: tests/test_serve_bench.py checks that they
# agree)
SEARCHES: dict[str, dict[str, Any]] = {
    "greedy": {}, "best_of_n": {"select": "weighted_vote"},
    "beam": {"select": "weighted_vote", "duplicates": "keep", "rounds": 4},
    "astar": {"select": "weighted_vote", "ties": "deep", "duplicates": "keep", "finalists": 4,
              "max_batches": 16, "rounds": 4},
    "particle_filter": {"select": "weighted_vote", "resample_finished": False, "rounds": 4},
    "particle_gibbs": {"select": "weighted_vote", "reference": "weight", "pool": "all"},
    "compute_optimal": {}}
LEVELS = (1, 4, 16)  # concurrency levels of the load part
TRIM_WAIT = 3.0  # seconds for the server's memory trim (every 2 s) once idle
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


def ask(c: openai.OpenAI, model: str, extra: dict[str, Any], prompt: str = QUESTION
        ) -> tuple[float, tuple[Any, ...]]:
    """(latency in seconds, what must match: text, answer, generated tokens)."""
    start = time.perf_counter()
    r = c.chat.completions.create(model=model, extra_body=extra,
                                  messages=[{"role": "user", "content": prompt}])
    s = r.choices[0].model_extra["search"]  # type: ignore[index]
    return time.perf_counter() - start, (r.choices[0].message.content, s["answer"],
                                         s["usage"]["generated_tokens"])


# -- load -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Request:
    """One realistic request: a level-5 word problem under one of the demo's searches at one
    of its widths (reports.eval.grid.make_grid: its knobs and token cap), scored by the step
    checker where the search consults a scorer."""

    problem: Any  # search.types.Problem
    algo: str
    knobs: dict[str, Any]
    tokens: int | None
    seed: int

    @property
    def scorer(self) -> str | None:
        from search import registry

        return SCORER if registry.uses_scorer(self.algo, self.knobs) else None

    def extra(self) -> dict[str, Any]:
        return {"algo": self.algo, "knobs": self.knobs, "seed": self.seed,
                **({"scorer": self.scorer} if self.scorer else {}),
                **({"budget": {"tokens": self.tokens}} if self.tokens else {})}


def requests(count: int) -> list[Request]:
    """`count` requests: the demo's problems (generator seed 2024, level 5) in order, each
    with the next of the demo's (algorithm, width) cells, seeds 0, 1, ..."""
    from problems import arith
    from reports.eval.grid import make_grid

    problems = arith.generate(count, seed=DATA_SEED, difficulty=arith.DEFAULT_DIFFICULTY)
    cells = make_grid(problems[:1], list(SEARCHES), WIDTHS,
                      knobs={a: k for a, k in SEARCHES.items() if k})
    return [Request(p, cells[i % len(cells)].algo, dict(cells[i % len(cells)].knobs),
                    cells[i % len(cells)].tokens, i) for i, p in enumerate(problems)]


def ask_request(c: openai.OpenAI, model: str, r: Request) -> tuple[float, tuple[Any, ...]]:
    """(latency in seconds, what must match the in-process run: text, answer, tokens)."""
    return ask(c, model, r.extra(), r.problem.prompt)


def in_process(model: str, reqs: list[Request]) -> tuple[Callable[[], float], list[Any]]:
    """solve_many's machinery (search.many.Driver, all at once) over the same requests in
    this process: a timer of one pass, and each run's (text shown, answer, tokens)."""
    from search.many import Driver
    from search.serve.reply import shown_text

    drivers = {s: Driver.load(model, s, concurrency=len(reqs)) for s in {r.scorer for r in reqs}}
    out: list[Any] = [None] * len(reqs)

    def one(r: Request, cancel: threading.Event) -> Any:
        from search.types import Budget

        return drivers[r.scorer].solve(r.problem, r.algo, Budget(tokens=r.tokens) if r.tokens
                                       else None, seed=r.seed, cancel=cancel, **r.knobs)

    def timed() -> float:
        start = time.perf_counter()
        for i, res in drivers[reqs[0].scorer].map(one, reqs):
            if isinstance(res, BaseException):
                raise res
            out[i] = (shown_text(res), res.answer, res.usage.generated_tokens)
        return time.perf_counter() - start

    return timed, out


def load(url: str, pid: int, model: str, count: int = 16, rounds: int = 2) -> None:
    """Throughput at c1, c4 and c16 and their p50/p95 latency, against the same requests
    through solve_many's Driver in this process, measured alternately in each round."""
    c, reqs = client(url), requests(count)
    timed, ref = in_process(model, reqs)
    pools = {k: ThreadPoolExecutor(k) for k in LEVELS}

    def at(k: int) -> tuple[float, list[float], list[Any]]:
        start = time.perf_counter()
        got = list(pools[k].map(lambda r: ask_request(c, model, r), reqs))
        return time.perf_counter() - start, [g[0] for g in got], [g[1] for g in got]

    at(count)  # warm-up: the server's kernels for these shapes, the connections
    timed()
    walls: dict[Any, list[float]] = {k: [] for k in (*LEVELS, "solve_many")}
    lat: dict[int, list[float]] = {k: [] for k in LEVELS}
    wrong = 0
    for _ in range(rounds):
        for k in LEVELS:
            wall, latencies, answers = at(k)
            walls[k].append(wall)
            lat[k] += latencies
            wrong += sum(a != b for a, b in zip(answers, ref))
            if k == count:  # solve_many right after c16, on the same machine load
                walls["solve_many"].append(timed())
    for pool in pools.values():
        pool.shutdown()
    best = {k: statistics.median(v) for k, v in walls.items()}
    algos = Counter(r.algo for r in reqs)
    print(f"load: {count} level-5 tiny-arith problems (seed {DATA_SEED}) under the demo's "
          f"searches at widths {', '.join(map(str, WIDTHS))} ({', '.join(f'{a} x{n}' for a, n in algos.items())}), "
          f"scorer {SCORER}; {rounds} rounds after a warm-up, load {os.getloadavg()[0]:.1f}")
    print("| way | requests/s | p50 latency s | p95 latency s | vs solve_many |")
    print("|---|---|---|---|---|")
    for k in LEVELS:
        q = statistics.quantiles(lat[k], n=20, method="inclusive")
        print(f"| server, c{k} | {count / best[k]:.2f} | {statistics.median(lat[k]):.2f} | "
              f"{q[18]:.2f} | {best['solve_many'] / best[k]:.2f}x |")
    print(f"| solve_many in-process, all at once | {count / best['solve_many']:.2f} | | | 1.00x |")
    print(f"  per round, c{count} against solve_many: " + ", ".join(
        f"{a:.2f} s / {b:.2f} s" for a, b in zip(walls[count], walls["solve_many"])))
    print(f"  answers that differ from the in-process run: {wrong} of {rounds * len(LEVELS) * count}")


def idle(url: str, pid: int, model: str, count: int = 16, passes: int = 4,
         leave: float = 0.1, seed: int = 0) -> None:
    """After a load of `passes` x `count` requests at concurrency `count`, a `leave` share of
    whose clients go after a random 0.1-1 s: the KV the server holds once idle (target 0)
    and its RSS against the RSS after the first pass (the warm-up; target within 5%)."""
    c, reqs, rng = client(url), requests(count), random.Random(seed)

    def one(r: Request) -> str:
        if rng.random() >= leave:
            ask_request(c, model, r)
            return "answered"
        hasty = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0,
                              timeout=rng.uniform(0.1, 1.0))
        try:
            ask_request(hasty, model, r)
            return "answered"
        except openai.APITimeoutError:
            return "left"

    counts: Counter[str] = Counter()
    warm = 0
    with ThreadPoolExecutor(count) as pool:
        for k in range(passes):
            counts.update(pool.map(one, reqs))
            if k == 0:
                warm = rss_kib(pid)
    deadline = time.monotonic() + 120
    while (health := httpx.get(url + "/health", timeout=120).json())["in_flight"]:
        assert time.monotonic() < deadline, health
        time.sleep(0.2)
    time.sleep(TRIM_WAIT)  # the server hands freed memory back every 2 s
    now = rss_kib(pid)
    print(f"idle after {passes} x {count} requests at c{count}, {leave:.0%} of clients leaving "
          f"({counts['left']} left): {health['kv_cached_tokens']} KV tokens held (target 0), "
          f"{health['cancelled']} searches cancelled, {health['failed']} failed; RSS "
          f"{now / 1024:.0f} MiB against {warm / 1024:.0f} MiB after the warm-up pass: "
          f"{100 * (now - warm) / warm:+.1f}% (target within 5%)")


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
    "--part": dict(choices=("load", "idle", "soak", "all"), default="all"),
    "--minutes": dict(type=float, default=10.0, help="the soak's length"),
    "--model": dict(default="tiny-arith"),
    "--rounds": dict(type=int, default=2, help="the load part's rounds"),
}


def main(argv: list[str] | None = None) -> None:
    args = parse("python -m reports.bench.serve", __doc__, OPTIONS, argv)
    print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    parts: dict[str, Callable[[str, int], None]] = {
        "load": lambda url, pid: load(url, pid, args.model, rounds=args.rounds),
        "idle": lambda url, pid: idle(url, pid, args.model),
        "soak": lambda url, pid: soak(url, pid, args.model, args.minutes)}
    with server(args.model, concurrency=32) as (url, pid):
        for name, part in parts.items():
            if args.part in (name, "all"):
                part(url, pid)


if __name__ == "__main__":
    main()
