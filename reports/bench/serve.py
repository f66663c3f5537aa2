"""Load test of search.serve on loopback: batching under concurrency, and a soak.

Starts `python -m search.serve` on 127.0.0.1 (an ephemeral port) and drives it with the
official openai client from threads of this process.

  c16   16 best-of-8 requests (seeds 0-15), after one warm-up pass each way, in --rounds
        rounds of: a lone request (median of 3), the 16 one after another, then all at once.
        Throughput ratio (target >= 4x) and p50 latency at concurrency 16 against the round's
        lone request (target <= 3x), medians over the rounds; every answer must equal the
        first pass's. Why the ratio is what it is: the server's CPU seconds each way (the CPU
        batching saves) and the cores it kept busy each way (ratio = their product).
        --ceiling: the same 16 searches in this process without HTTP.
  soak  --minutes at concurrency 32: good requests (a mix of searches, each checked against
        its first answer), 5% bad requests (each must get its 4xx), 5% clients that leave
        after 0.3 s; 0 failed or wrong responses, and the server's peak RSS after warm-up
        (the first fifth, which runs the same mix) within 5% of its peak RSS during it
        (sampled every 2 s).

    python -m reports.bench.serve [--part c16|soak|all] [--rounds 3] [--ceiling]
                                  [--minutes 10] [--model tiny-arith]
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
@dataclass(frozen=True)
class Round:
    """One round of c16: a lone request's latency (median of 3), the 16 requests one after
    another and all at once (seconds), the median latency at once, the searches' own median
    seconds inside the server at once, and the server's CPU seconds one after another and at
    once."""

    load: float
    lone: float
    t_seq: float
    t_conc: float
    p50: float
    inside: float
    cpu_seq: float
    cpu_conc: float
    client_conc: float  # this process's CPU seconds at once (the 16 clients)

    @property
    def ratio(self) -> float:
        """t_seq / t_conc = (cpu_seq / cpu_conc) x (cores at once / cores one by one)."""
        return self.t_seq / self.t_conc


def cpu_seconds(pid: int) -> float:
    """The process's CPU time so far (user + system), seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def c16(url: str, pid: int, model: str, clients: int = 16, n: int = 8, rounds: int = 3,
        ceiling: bool = False) -> None:
    c = client(url)
    reqs = [{"algo": "best_of_n", "knobs": {"n": n}, "seed": s} for s in range(clients)]
    pool = ThreadPoolExecutor(clients)
    # warm-up: both ways once (the engine's kernels for these batch shapes, the connections)
    first = [ask(c, model, r)[1] for r in reqs]
    list(pool.map(lambda r: ask(c, model, r), reqs))
    done: list[Round] = []
    wrong = 0
    for _ in range(rounds):  # each round: lone, one after another, at once, back to back
        lone = statistics.median(ask(c, model, reqs[0])[0] for _ in range(3))
        start, cpu = time.perf_counter(), cpu_seconds(pid)
        one_by_one = [ask(c, model, r) for r in reqs]
        t_seq, cpu_seq = time.perf_counter() - start, cpu_seconds(pid) - cpu
        start, cpu, mine = time.perf_counter(), cpu_seconds(pid), cpu_seconds(os.getpid())
        at_once = list(pool.map(lambda r: ask(c, model, r), reqs))
        t_conc, cpu_conc = time.perf_counter() - start, cpu_seconds(pid) - cpu
        client_conc = cpu_seconds(os.getpid()) - mine
        wrong += sum(a[1] != f or b[1] != f for a, b, f in zip(one_by_one, at_once, first))
        done.append(Round(os.getloadavg()[0], lone, t_seq, t_conc,
                          statistics.median(a[0] for a in at_once),
                          statistics.median(a[2] for a in at_once), cpu_seq, cpu_conc,
                          client_conc))
    pool.shutdown()
    print(f"c{clients} best-of-{n} on {model}, {rounds} rounds (each: a lone request x3, the "
          f"{clients} one after another, then all at once):")
    print("  load  lone s   one-by-one s  at once s  throughput  p50 at once s  p50/lone  "
          "searches' own p50 s  server CPU s: one-by-one, at once")
    for r in done:
        print(f"  {r.load:4.1f}  {r.lone:6.3f}  {r.t_seq:12.2f}  {r.t_conc:9.2f}  "
              f"{r.ratio:9.2f}x  {r.p50:13.3f}  {r.p50 / r.lone:7.2f}x  {r.inside:19.3f}  "
              f"{r.cpu_seq:6.2f}, {r.cpu_conc:.2f}")
    ratio = statistics.median(r.ratio for r in done)
    slow = statistics.median(r.p50 / r.lone for r in done)
    print(f"  median over rounds: throughput ratio {ratio:.2f}x (target >= 4x), p50 at "
          f"c{clients} {slow:.2f}x a lone request's (target <= 3x)")
    print(f"  answers that differ from the first one-after-another pass: {wrong} of "
          f"{2 * rounds * clients}")
    # over all rounds: the ratio is the CPU batching saves times the cores the server keeps
    # busy at once against one after another (its CPU seconds over the wall seconds)
    seq, conc = sum(r.t_seq for r in done), sum(r.t_conc for r in done)
    cpu_seq, cpu_conc = sum(r.cpu_seq for r in done), sum(r.cpu_conc for r in done)
    print(f"  why, over all rounds ({seq / conc:.2f}x): the server spent {cpu_seq / cpu_conc:.2f}x "
          f"the CPU on the searches one after another that it spent on them at once, and kept "
          f"{cpu_seq / seq:.2f} cores busy one after another against {cpu_conc / conc:.2f} at "
          f"once (of {os.cpu_count()}): {seq / conc:.2f} = {cpu_seq / cpu_conc:.2f} x "
          f"{(cpu_conc / conc) / (cpu_seq / seq):.2f}; the {clients} clients in this process "
          f"took {sum(r.client_conc for r in done) / conc:.2f} cores at once")
    if ceiling:
        engine_ceiling(model, clients, n)


def engine_ceiling(model: str, clients: int, n: int) -> None:
    """The same searches in this process, without HTTP: one after another through the
    engine's lanes (the server's path) and inline (search.solve outside serving), against all
    at once (search.solve_many)."""
    import search
    from search.runtime.sched import SCHED
    from search.serve.__main__ import SWITCH_INTERVAL

    sys.setswitchinterval(SWITCH_INTERVAL)  # as the server runs
    engine = search.get_engine(model)

    def each() -> float:
        start = time.perf_counter()
        for s in range(clients):
            search.solve(QUESTION, "best_of_n", engine=engine, n=n, seed=s, progress=False)
        return time.perf_counter() - start

    def many() -> float:
        start = time.perf_counter()
        search.solve_many([QUESTION], "best_of_n", engine=engine, n=n, seeds=range(clients),
                          concurrency=clients)
        return time.perf_counter() - start

    many()  # warm-up
    with SCHED.serving():
        each()
        t_lanes = each()
    t_many = many()
    t_inline = each()
    print(f"  in-process reference (load {os.getloadavg()[0]:.1f}): {clients} at once "
          f"(solve_many) {t_many:.2f} s; one after another through the lanes {t_lanes:.2f} s "
          f"({t_lanes / t_many:.2f}x), inline {t_inline:.2f} s ({t_inline / t_many:.2f}x)")


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
    "--rounds": dict(type=int, default=3, help="c16's rounds"),
    "--ceiling": dict(action="store_true", help="also time the same 16 searches in this "
                      "process, one by one (through the lanes, and inline) against "
                      "search.solve_many"),
}


def main(argv: list[str] | None = None) -> None:
    args = parse("python -m reports.bench.serve", __doc__, OPTIONS, argv)
    print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    parts: list[Callable[[str, int], None]] = []
    if args.part in ("c16", "all"):
        parts.append(lambda url, pid: c16(url, pid, args.model, rounds=args.rounds,
                                              ceiling=args.ceiling))
    if args.part in ("soak", "all"):
        parts.append(lambda url, pid: soak(url, pid, args.model, args.minutes))
    with server(args.model, concurrency=32) as (url, pid):
        for part in parts:
            part(url, pid)


if __name__ == "__main__":
    main()
