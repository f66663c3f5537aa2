"""The server's steady throughput: many more requests than clients, each client sending its
next request when its last is answered (a closed loop), against the same requests one after
another.

reports.bench.serve's load part sends 16 requests at once: its c16 wall is a burst's, as long
as its slowest search, the last part of it with one or two searches left on two cores. Here
`count` requests (the load's kinds: reports.bench.serve.requests) go through `clients`
clients, so the server holds `clients` searches until the last `clients` drain; the same
requests one by one, alternately, `rounds` rounds (medians printed, and each round's). Every
answer must equal the first one-by-one round's.

    python -m reports.bench.steady [--count 64] [--clients 16] [--rounds 3] [--model tiny-arith]
"""

from __future__ import annotations

import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from reports.bench.serve import ask_request, client, requests, server
from search.cli import parse


def refusal(count: int, clients: int, rounds: int) -> str | None:
    """What makes these arguments measure nothing (None: nothing): one client is one by one."""
    if clients < 2:
        return f"--clients must be at least 2 (one client is one by one), got {clients}"
    return next((f"--{k} must be at least 1, got {v}" for k, v in
                 (("count", count), ("rounds", rounds)) if v < 1), None)


def steady(url: str, model: str, count: int = 64, clients: int = 16, rounds: int = 3) -> None:
    """Print `count` requests' throughput at `clients` clients in a closed loop against one
    by one (see the module doc)."""
    if (why := refusal(count, clients, rounds)) is not None:
        raise ValueError(why)
    c, reqs = client(url), requests(count)
    walls: dict[int, list[float]] = {1: [], clients: []}
    first: list[Any] | None = None
    wrong = 0

    def ask(r: Any) -> Any:
        return ask_request(c, model, r)[1]

    with ThreadPoolExecutor(clients) as pool:
        for _ in range(rounds):
            for k in walls:
                start = time.perf_counter()
                got = list(map(ask, reqs) if k == 1 else pool.map(ask, reqs))
                walls[k].append(time.perf_counter() - start)
                first = first or got
                wrong += sum(a != b for a, b in zip(got, first))
    one, many = (statistics.median(walls[k]) for k in walls)
    print(f"steady: {count} requests (the load's kinds), {clients} clients in a closed loop "
          f"against one by one, {rounds} rounds (load {os.getloadavg()[0]:.1f}): "
          f"{count / many:.2f} against {count / one:.2f} requests/s, {one / many:.2f}x (aim >= 3x)")
    print("  per round, one by one / closed loop: " + ", ".join(
        f"{a:.1f} s / {b:.1f} s" for a, b in zip(walls[1], walls[clients])))
    print(f"  answers that differ from the first one-by-one round: {wrong} of "
          f"{rounds * 2 * count}")


def main(argv: list[str] | None = None) -> None:
    args = parse("python -m reports.bench.steady", __doc__, {
        "--count": dict(type=int, default=64), "--clients": dict(type=int, default=16),
        "--rounds": dict(type=int, default=3), "--model": dict(default="tiny-arith")}, argv,
        lambda a: refusal(a.count, a.clients, a.rounds))
    with server(args.model, concurrency=32) as (url, _):
        steady(url, args.model, args.count, args.clients, args.rounds)


if __name__ == "__main__":
    main()
