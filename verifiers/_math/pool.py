"""A small pool of sympy worker processes with a hard per-call timeout.

sympy can hang (simplifying a hostile expression) or eat all memory (10**10**10), and neither
can be interrupted from inside a thread: `signal.alarm` only works in the main thread. So every
comparison runs in a separate process; on timeout that process is SIGKILLed and replaced.
Workers are plain `python -c` subprocesses speaking JSON lines over pipes (no fork of a threaded
parent, and unlike multiprocessing's "spawn" they never re-import the caller's unguarded
`__main__`). They import sympy once and then serve many calls. The call's timeout counts from
when a ready worker received the job.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

STARTUP_TIMEOUT = 60.0  # starting python and importing sympy: about a second, more on busy CI
MEMORY_LIMIT = 2 << 30  # bytes of address space per worker; a bigger answer is not an answer

_ROOT = str(Path(__file__).resolve().parents[2])  # the directory holding the verifiers package
_BOOT = f"import sys; sys.path.insert(0, {_ROOT!r}); from verifiers._math.pool import serve; serve()"


def serve() -> None:
    """Worker main loop: read [gold, pred, rel_tol] lines, write [equal, reason] lines."""
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout = sys.stderr  # stray prints from libraries must not corrupt the protocol
    try:
        import resource

        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard == resource.RLIM_INFINITY or hard > MEMORY_LIMIT:
            resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    except (ImportError, ValueError, OSError):
        pass  # no resource module (Windows) or not allowed: the timeout still applies
    from verifiers._math.compare import compare

    out.write('"ready"\n')
    out.flush()
    for line in sys.stdin:
        try:
            result = compare(*json.loads(line))
        except MemoryError:
            result = (False, "out of memory while comparing")
        except RecursionError:
            result = (False, "expression nested too deeply")
        except Exception as exc:  # a sympy bug must not take the worker down
            result = (False, f"comparison failed ({type(exc).__name__})")
        out.write(json.dumps(result) + "\n")
        out.flush()


class _Worker:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _BOOT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,  # a Ctrl-C meant for the caller is the caller's to handle
        )
        self.ready = False

    def send(self, args: tuple[Any, ...]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(args) + "\n")
        self.proc.stdin.flush()

    def receive(self, timeout: float) -> Any:
        """The next message, or raise TimeoutError / EOFError."""
        assert self.proc.stdout is not None
        if not wait([self.proc.stdout.fileno()], timeout):
            raise TimeoutError
        line = self.proc.stdout.readline()
        if not line:
            raise EOFError
        return json.loads(line)

    def wait_ready(self, timeout: float) -> bool:
        try:
            self.ready = self.ready or self.receive(timeout) == "ready"
        except (TimeoutError, EOFError, OSError, ValueError):
            return False
        return self.ready

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):  # stuck in the kernel: leave it
                self.proc.wait(timeout=5)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


class Pool:
    """Up to `size` workers shared by all threads; a call waits for a free one."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._idle: list[_Worker] = []
        self._count = 0
        self._cond = threading.Condition()
        self._all: set[_Worker] = set()  # busy ones too, so close() can stop a runaway sympy
        # seconds calls have spent waiting for a worker's start-up (python + sympy import),
        # which no call's timeout covers: callers and tests can tell it from the call itself
        self.startup_wait = 0.0
        atexit.register(self.close)

    def close(self) -> None:
        """Kill every worker (at interpreter exit: a busy one would otherwise run on)."""
        with self._cond:
            workers, self._all, self._idle, self._count = list(self._all), set(), [], 0
        for worker in workers:
            worker.kill()

    def run(self, args: tuple[Any, ...], timeout: float) -> tuple[bool, str]:
        worker = self._take()
        if worker is None:
            return False, "could not start a sympy worker process"
        try:
            worker.send(args)
            equal, reason = worker.receive(timeout)
            self._give(worker)
            return bool(equal), str(reason)
        except TimeoutError:
            reason = f"timed out after {timeout:g}s"
        except (EOFError, OSError, ValueError):
            reason = "worker process died (out of memory?)"
        self._replace(worker)
        return False, reason

    def _take(self) -> _Worker | None:
        with self._cond:
            while not self._idle and self._count >= self._size:
                self._cond.wait()
            if self._idle:
                worker = self._idle.pop()
            else:
                worker = _Worker()
                self._count += 1
                self._all.add(worker)
        start = time.monotonic()
        ready = worker.wait_ready(STARTUP_TIMEOUT)
        with self._cond:
            self.startup_wait += time.monotonic() - start
        if ready:
            return worker
        self._replace(worker, restart=False)
        return None

    def _give(self, worker: _Worker) -> None:
        with self._cond:
            self._idle.append(worker)
            self._cond.notify()

    def _replace(self, worker: _Worker, restart: bool = True) -> None:
        """Kill a worker; start its successor now, so the next call finds it (nearly) ready."""
        worker.kill()
        with self._cond:
            self._count -= 1
            self._all.discard(worker)
            if restart:
                successor = _Worker()
                self._idle.append(successor)
                self._all.add(successor)
                self._count += 1
            self._cond.notify()


_pool: Pool | None = None
_pool_lock = threading.Lock()


def pool() -> Pool:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = Pool(size=max(1, min(4, os.cpu_count() or 1)))
        return _pool
