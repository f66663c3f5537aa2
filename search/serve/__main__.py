"""python -m search.serve: an OpenAI-compatible server of searches (see search.serve).

    python -m search.serve --model tiny-arith [--scorer steps] [--algo beam] --port 8000

Binds 127.0.0.1 unless --host says otherwise. Names and knobs are checked before the model
loads. On SIGTERM (or Ctrl-C) it starts no new searches (503; /health answers 503), lets the
searches in flight finish for up to --grace seconds, cancels the rest (their clients get a
503), stops accepting connections, and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import sys
from collections.abc import Sequence
from typing import Any

try:
    import uvicorn
except ImportError as missing:  # the serve extra is not installed
    raise SystemExit(f"python -m search.serve needs FastAPI and uvicorn: pip install -e "
                     f"'.[serve]' ({missing})") from None

from search import registry
from search.cli import parse
from search.types import Budget

KERNEL_CACHE = 256  # oneDNN kernels kept for reuse (kernel_cache)
# oneDNN's primitive cache and ideep's (in torch), each read once, when it is first used
KERNEL_CACHE_VARIABLES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")
OPTIONS: dict[str, dict[str, Any]] = {
    "--model": dict(default=None, help="model name or path (default: search.solve's)"),
    "--scorer": dict(default=None, help="the server's scorer for searches that consult one "
                     "(a registered name, or a PRM, loaded once); default: search.solve's"),
    "--algo": dict(default=None, help="the server's search for requests that name none "
                   "(default: plain sampling, one sample)"),
    "--knob": dict(action="append", default=[], metavar="NAME=VALUE",
                   help="a knob of --algo, e.g. --knob n=8"),
    "--tokens": dict(type=int, default=None, help="default budget: generated tokens"),
    "--seconds": dict(type=float, default=None, help="default budget: wall seconds"),
    "--scorer-calls": dict(type=int, default=None, help="default budget: scorer calls"),
    "--flops": dict(type=float, default=None, help="default budget: model FLOPs"),
    "--seed": dict(type=int, default=0, help="the seed of requests that give none"),
    "--host": dict(default="127.0.0.1", help="address to bind (default 127.0.0.1: this "
                   "machine only)"),
    "--port": dict(type=int, default=8000, help="port (0: any free one, printed)"),
    "--concurrency": dict(type=int, default=32, help="searches run at once (the engine "
                          "batches them); more wait for a slot"),
    "--max-n": dict(type=int, default=16, help="most choices (n) one request may ask for"),
    "--max-body-bytes": dict(type=int, default=1 << 20, help="largest request body"),
    "--grace": dict(type=float, default=30.0, help="seconds the searches in flight get to "
                    "finish on SIGTERM before they are cancelled"),
    "--threads": dict(type=int, default=None, help="torch CPU threads (default: torch's)"),
    "--kernel-cache": dict(type=int, default=None, metavar="N", help="CPU GEMM kernels kept "
                           "for reuse, one per batch shape (~0.5 MiB each; default: "
                           f"{KERNEL_CACHE}, or the environment's, see kernel_cache)"),
    "--access-log": dict(action="store_true", help="log every request (uvicorn's access log)"),
}
JOIN_SECONDS = 10.0  # after the grace period: for cancelled searches to end and answer
# seconds a thread that wants the interpreter lock waits before the holder is asked to give it
# up (Python's default: 0.005). A lane's forward runs in TorchScript pieces without the lock
# and takes it back between them, while dozens of request and search threads want it too:
# a shorter wait hands it back to the lane sooner (16 searches at once finish sooner)
SWITCH_INTERVAL = 0.0005


def _check(args: argparse.Namespace) -> str | None:
    if args.concurrency < 1 or args.max_n < 1 or args.max_body_bytes < 1 or args.grace < 0:
        return "--concurrency, --max-n and --max-body-bytes must be positive, --grace >= 0"
    if args.kernel_cache is not None and args.kernel_cache < 1:
        return "--kernel-cache must be positive"
    return None


def kernel_cache(entries: int | None) -> None:
    """Cap the CPU GEMM kernels the process keeps (call it before torch first runs one). The
    packed linears (search.runtime.packed) run on oneDNN, which builds a kernel for each
    input shape it meets (rows x features: a forward's token count, for each weight shape) and
    keeps it in two caches of 1,024 entries each, oneDNN's own and ideep's in torch, about
    0.5 MiB an entry. A server's forwards merge whichever searches are in flight, so new row
    counts keep appearing long after start, and its RSS grows with them up to both caches'
    size (docs/serve.md). Capped, the caches keep the shapes used most recently; one met
    again after it was dropped is rebuilt (about a millisecond). Results do not change: the
    kernel depends on the shape alone. An environment that sets the variables keeps its
    values, unless `entries` is given (--kernel-cache)."""
    for name in KERNEL_CACHE_VARIABLES:
        if entries is not None:
            os.environ[name] = str(entries)
        else:
            os.environ.setdefault(name, str(KERNEL_CACHE))


def defaults_of(args: argparse.Namespace) -> Any:
    """The server's Defaults from the parsed options, checked (names, knobs, budget) before
    anything loads."""
    from search.api import check_engine, check_scorer
    from search.serve.plan import Defaults

    knobs: dict[str, Any] = {}
    if args.algo is not None:
        texts = dict(k.partition("=")[::2] for k in args.knob)
        knobs = registry.parse_knobs(args.algo, texts)
    elif args.knob:
        raise ValueError("--knob needs --algo (the knobs are that algorithm's)")
    limits = dict(tokens=args.tokens, seconds=args.seconds, scorer_calls=args.scorer_calls,
                  flops=args.flops)
    budget = Budget(**limits) if any(v is not None for v in limits.values()) else None
    check_engine(args.model)
    if args.scorer is not None:
        check_scorer(args.scorer)
    return Defaults(algo=args.algo, knobs=knobs, scorer=args.scorer, budget=budget,
                    seed=args.seed, max_n=args.max_n)


def _stop(signum: int, frame: Any) -> None:
    """SIGTERM/SIGINT outside uvicorn's own handling (while loading, and the signal uvicorn
    raises again once it has shut down): leave with status 0."""
    del signum, frame
    raise SystemExit(0)


def main(argv: Sequence[str] | None = None) -> int:
    from search.api import default_model
    from search.serve.app import create_app, listening
    from search.serve.service import Service

    ap_args = parse("python -m search.serve", __doc__, OPTIONS, argv, _check)
    kernel_cache(ap_args.kernel_cache)  # before torch loads (with the model, below)
    sys.setswitchinterval(SWITCH_INTERVAL)
    if ap_args.threads is not None:
        from search.runtime.omp import use_threads

        use_threads(ap_args.threads)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stop)
    try:
        defaults = defaults_of(ap_args)
    except (TypeError, ValueError, KeyError, FileNotFoundError) as err:
        print(f"python -m search.serve: {err}", file=sys.stderr)
        return 2
    model = ap_args.model or default_model()
    service = Service.load(model, ap_args.scorer, concurrency=ap_args.concurrency)
    app = create_app(service, defaults, names=[model], max_body=ap_args.max_body_bytes)
    sock = listening(ap_args.host, ap_args.port)
    host, port = sock.getsockname()[:2]
    config = uvicorn.Config(app, log_level="warning", access_log=ap_args.access_log,
                            timeout_graceful_shutdown=int(ap_args.grace + JOIN_SECONDS) + 1)
    server = Server(config, service, ap_args.grace)
    print(f"search.serve: {model} on http://{host}:{port}/v1 (algo "
          f"{defaults.algo or 'plain sampling'}, scorer {defaults.scorer or 'default'})",
          file=sys.stderr, flush=True)
    try:
        server.run(sockets=[sock])
    finally:
        print("search.serve: stopped", file=sys.stderr, flush=True)
    return 0


class Server(uvicorn.Server):
    """uvicorn's server, whose shutdown first drains the service while it still answers: no
    new searches (503), /health 503, those in flight get `grace` seconds, then are cancelled
    so that their requests answer (503); then uvicorn stops accepting and waits for the
    connections to close."""

    def __init__(self, config: uvicorn.Config, service: Any, grace: float) -> None:
        super().__init__(config)
        self.service, self.grace = service, grace

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await asyncio.to_thread(self.service.drain, self.grace)
        await super().shutdown(sockets)


if __name__ == "__main__":
    sys.exit(main())
