"""Unit-test sandbox: run untrusted Python against tests in an isolated process.

    report = run_tests("def add(a, b):\n    return a + b", ["assert add(1, 2) == 3"])
    report.passed_all, report.pass_rate, report.results[0].reason, report.error, report.isolation

Each test is a snippet run after the program, in a fresh copy of the program's namespace; it
fails by raising. HumanEval: `problem["test"] + f"\ncheck({entry_point})"`. Public vs hidden tests
are two calls (`run_public_hidden`); counting false positives is the caller's job.

Isolation, strongest available first (`isolation="auto"` probes once per process):
- "bwrap" (Debian package `bubblewrap`): new user, pid, net, ipc, uts and cgroup namespaces;
  the filesystem is /usr and the Python install read-only, size-capped tmpfs /tmp and /work
  (the working dir), a read-only /dev with null/zero/urandom, no /proc; the pid namespace dies
  with the run.
- "unshare": the harness builds namespaces itself with unshare(2): the host tree stays visible
  but read-only, nosuid and nodev; /tmp is a fresh capped tmpfs; /proc and the project, working
  and home dirs are covered. Other host files (e.g. /etc) stay readable.
- "rlimits": no namespaces (user namespaces disabled). The program runs with your uid in a temp
  dir and can read and write what you can and see /proc. A warning says so.
All modes add, in the child before the program runs: RLIMIT_CPU/AS/FSIZE/NOFILE/CORE; a seccomp
filter (x86_64) against fork/clone/exec, sockets, signal handlers, signals to and prlimit on other
processes, ptrace, mounts and namespaces; and an audit hook (below). Not RLIMIT_NPROC: it never
applies to uid 0, not even in a user namespace mapped to root (CI runs as root), and the
interpreter under /root cannot run as `nobody`; seccomp holds for every uid (RLIMIT_NPROC is the
fallback off x86_64). The parent adds a wall clock and an output cap, both of which kill the
process group, an empty stdin and a scrubbed environment.

Honest results: stdout and exit status decide nothing. The harness writes one record per test
to a pipe, each MAC'd with a per-run key that reached it through a file descriptor closed before
the program runs; missing or forged records count as failures, so exiting (os._exit, sys.exit),
crashing or being killed always fails. The audit hook blocks the ways to the key and to the
harness (sys._getframe, tb_frame/gi_frame, gc.get_objects/referrers, settrace, ctypes). Tests get
pristine builtins and private copies of common stdlib modules (math, re, random, collections...);
the program changing builtins or those modules (incl. their classes) counts as tampering, checked
after the program, after every call a test makes into it, and after each test. gc is off while
tests run, so no program code (finalizers) runs between those checks.

The `__eq__` hole (a function returning an object equal to everything): with `plain_returns=True`
(default) every program function a test calls must return plain data, exact builtin scalars and
containers, whose comparisons are trusted C code; lists/dicts/sets it was given must stay plain.
Functions returning generators or custom objects then fail: pass `plain_returns=False` for them
(and accept the hole). Classes defined by the program are not checked (LeetCode-style tests).

Known gaps: audit hooks are no security boundary (PEP 578); a memory bug in a C extension could
reach the key. Modules the program imports first, and state inside protected modules that is
not a module or class attribute (e.g. random's generator state), are not protected. A guard
handed to program code inside a container is not unwrapped. `timeout` covers the whole run;
tests after a hang count as not run. Threads are refused. No per-test process.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import json
import marshal
import os
import secrets
import select
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Isolation = Literal["auto", "bwrap", "unshare", "rlimits"]
RunError = Literal["syntax_error", "program_error", "timeout", "memory", "output_limit",
                   "crashed", "exited", "tampered", "sandbox_error"]

_HERE = Path(__file__).parent
_STARTUP_GRACE = 10.0  # seconds the sandbox may take to start before the timeout clock runs
_OUTPUT_KEPT = 16 * 1024  # bytes of program output kept in the report
_DISK_BYTES = 64 * 2**20  # tmpfs size and RLIMIT_FSIZE
_RECORD_MAX = 8 * 1024  # longest valid result record


@dataclass(frozen=True)
class TestResult:
    __test__ = False  # not a pytest test class

    passed: bool
    reason: str = ""  # why it failed, e.g. "AssertionError: ..." or "not run: timeout ..."


@dataclass(frozen=True)
class TestReport:
    __test__ = False

    results: tuple[TestResult, ...]  # one per test, in order
    error: RunError | None = None  # run-level failure; None if the run completed
    detail: str = ""  # human-readable reason for `error`
    isolation: str = ""  # layers in force, e.g. "bwrap,seccomp,audit,rlimits"
    output: str = ""  # head of the program's stdout and stderr
    seconds: float = 0.0

    @property
    def num_passed(self) -> int:
        return sum(r.passed for r in self.results)

    @property
    def pass_rate(self) -> float:
        return self.num_passed / len(self.results) if self.results else 0.0

    @property
    def passed_all(self) -> bool:
        """All tests passed and the run completed; an empty test list never passes."""
        return bool(self.results) and self.error is None and self.num_passed == len(self.results)


def run_tests(program: str, tests: Sequence[str], *, entry_point: str | None = None,
              timeout: float = 5.0, memory_mb: int = 512, max_output_bytes: int = 1 << 20,
              isolation: Isolation = "auto", site_packages: bool = False,
              plain_returns: bool = True) -> TestReport:
    """Run `program`, then each test snippet, in one sandboxed process; never raises on bad code.

    timeout: wall and CPU seconds for the program and all tests (sandbox start-up not counted).
    memory_mb: address-space limit. max_output_bytes: stdout+stderr beyond this kills the run.
    entry_point: the function under test (HumanEval); it is guarded even if it is not a plain
    function. site_packages: let the program import installed packages (slower start-up).
    """
    if isinstance(tests, str):
        raise TypeError("tests must be a sequence of snippets, not a single string")
    if isolation not in ("auto", "bwrap", "unshare", "rlimits"):
        raise ValueError(f"unknown isolation {isolation!r}")
    mode = available_isolation() if isolation == "auto" else isolation
    config = {"program": program, "tests": list(tests), "entry_point": entry_point,
              "timeout": float(timeout), "memory_bytes": int(memory_mb) << 20,
              "disk_bytes": _DISK_BYTES, "plain_returns": plain_returns, "mode": mode,
              "os_source": _source("_sandbox_os.py"),
              "hidden": _hidden_dirs(site_packages) if mode == "unshare" else []}
    return _run(config, max_output_bytes, site_packages)


def passes(program: str, tests: Sequence[str], **kwargs) -> bool:
    """True iff every test passes (keyword arguments as for `run_tests`)."""
    return run_tests(program, tests, **kwargs).passed_all


def run_public_hidden(program: str, public: Sequence[str], hidden: Sequence[str],
                      **kwargs) -> tuple[TestReport, TestReport]:
    """Two separate runs, so the hidden tests are never in the process the public ones ran in.
    A false positive is `public.passed_all and not hidden.passed_all`."""
    return run_tests(program, public, **kwargs), run_tests(program, hidden, **kwargs)


_resolved: list[Literal["bwrap", "unshare", "rlimits"]] = []
_resolve_lock = threading.Lock()


def available_isolation() -> Literal["bwrap", "unshare", "rlimits"]:
    """The mode "auto" uses: the first of bwrap, unshare that runs a trivial test, else rlimits."""
    with _resolve_lock:
        if not _resolved:
            for mode in ("bwrap", "unshare"):
                if mode == "bwrap" and not shutil.which("bwrap"):
                    continue
                if run_tests("x = 1", ["assert x == 1"], isolation=mode, timeout=10).passed_all:
                    _resolved.append(mode)
                    break
            else:
                _resolved.append("rlimits")
                warnings.warn("no namespace isolation (install bubblewrap or allow user "
                              "namespaces): untrusted code will run with your uid and files",
                              RuntimeWarning, stacklevel=2)
        return _resolved[0]


@functools.cache
def _source(name: str) -> str:
    return (_HERE / name).read_text()


def _python(site_packages: bool) -> str:
    # Without site-packages the real binary will do, and a venv's files need not be visible.
    return sys.executable if site_packages else os.path.realpath(sys.executable)


def _python_roots(site_packages: bool) -> set[str]:
    roots = {sys.base_prefix, sys.base_exec_prefix, str(Path(_python(site_packages)).parents[1])}
    if site_packages:
        roots |= {sys.prefix, sys.exec_prefix}
    return {os.path.realpath(r) for r in roots}


def _hidden_dirs(site_packages: bool) -> list[str]:
    """Directories the unshare mode covers with an empty tmpfs: the project, the caller's working
    and home dirs; not ones that hold the interpreter, and nothing under /tmp (replaced anyway)."""
    needed = _python_roots(site_packages)
    candidates = {str(Path(__file__).resolve().parents[1]), os.getcwd(), str(Path.home()),
                  "/home", "/root", "/srv", "/mnt", "/media"}
    hidden: list[str] = []
    for path in sorted(os.path.realpath(c) for c in candidates):
        inside = [p for p in (*hidden, "/tmp", "/proc") if path == p or path.startswith(p + "/")]
        holds_python = any(n == path or n.startswith(path + "/") for n in needed)
        if path != "/" and os.path.isdir(path) and not inside and not holds_python:
            hidden.append(path)
    return hidden


def _command(mode: str, site_packages: bool, workdir: str | None
             ) -> tuple[list[str], dict[str, str], str]:
    """argv (without the fd arguments), environment and host cwd for one run."""
    python = _python(site_packages)
    runner = [python, "-I", "-B", *([] if site_packages else ["-S"]), "-c", _source("_sandbox_runner.py")]
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",  # threads are refused: keep BLAS serial
           **dict.fromkeys(("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"), "1")}
    if mode == "rlimits":
        assert workdir is not None
        return runner, {**env, "HOME": workdir, "TMPDIR": workdir}, workdir
    if mode == "unshare":
        return runner, {**env, "HOME": "/tmp", "TMPDIR": "/tmp"}, "/"
    bwrap = shutil.which("bwrap")
    if mode != "bwrap" or bwrap is None:
        raise OSError(f"isolation {mode!r} is not available")
    binds: list[str] = []
    for top in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        if os.path.islink(top):  # merged-/usr systems: /lib -> usr/lib
            binds += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            binds += ["--ro-bind", top, top]
    for root in sorted(_python_roots(site_packages)):
        if root != "/usr" and not root.startswith("/usr/"):
            binds += ["--ro-bind", root, root]
    size = str(_DISK_BYTES)
    argv = [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
            "--uid", "65534", "--gid", "65534", "--hostname", "sandbox", *binds,
            "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache", "--dev", "/dev",
            "--size", size, "--tmpfs", "/tmp", "--size", size, "--tmpfs", "/work",
            "--chdir", "/work", "--remount-ro", "/dev", "--remount-ro", "/", "--", *runner]
    return argv, {**env, "HOME": "/work", "TMPDIR": "/tmp"}, "/"


@dataclass
class _Record:
    kind: str  # ready | program | test | end
    index: int
    status: str  # ok pass fail memory tampered error syntax
    reason: str


def _parse_record(line: bytes, key: bytes, seq: int) -> _Record | None:
    """The record if its MAC and sequence number check out, else None (forged or corrupt)."""
    fields = line.split(b" ")
    if len(fields) != 6:
        return None
    body = b" ".join(fields[:5])
    mac = hashlib.blake2b(body, key=key, digest_size=16).hexdigest().encode()
    if not hmac.compare_digest(mac, fields[5]) or fields[0] != str(seq).encode():
        return None
    kind, index, status = fields[1].decode(), int(fields[2]), fields[3].decode()
    return _Record(kind, index, status, bytes.fromhex(fields[4].decode()).decode(errors="replace"))


def _run(config: dict, max_output: int, site_packages: bool) -> TestReport:
    start = time.monotonic()
    workdir = tempfile.mkdtemp(prefix="tts-sandbox-") if config["mode"] == "rlimits" else None
    key = secrets.token_bytes(32)
    read_fd, write_fd = os.pipe()
    try:
        argv, env, cwd = _command(config["mode"], site_packages, workdir)
        proc, inner = _spawn(argv, env, cwd, {**config, "key": key.hex()}, write_fd,
                             bwrap=config["mode"] == "bwrap")
    except OSError as exc:
        os.close(read_fd)
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
        return _report(config, [], ("sandbox_error", f"cannot start sandbox: {exc}"), 0, b"",
                       time.monotonic() - start)
    finally:
        os.close(write_fd)  # the child holds the only write end: EOF means it is gone
    try:
        records, fault, output = _collect(proc, read_fd, key, config["timeout"], max_output,
                                          len(config["tests"]))
    finally:
        os.close(read_fd)
        returncode = _reap(proc, inner)
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
    if config["mode"] == "bwrap" and returncode > 128:  # bwrap reports a child's signal as 128+n
        returncode = 128 - returncode
    return _report(config, records, fault, returncode, output, time.monotonic() - start)


def _spawn(argv: list[str], env: dict[str, str], cwd: str, payload: dict, write_fd: int,
           bwrap: bool) -> tuple[subprocess.Popen, int | None]:
    """Start the sandbox; the payload (program, tests, key) travels in an unlinked file.
    Also returns, under bwrap, a pidfd for the sandbox's pid-namespace init (or None)."""
    info_read, info_write = os.pipe() if bwrap else (-1, -1)
    try:
        with tempfile.TemporaryFile() as file:
            file.write(marshal.dumps(payload))  # same interpreter reads it
            file.flush()
            file.seek(0)
            fds = (file.fileno(), write_fd)
            info = ["--info-fd", str(info_write)] if bwrap else []
            proc = subprocess.Popen(
                [argv[0], *info, *argv[1:], *map(str, fds), str(os.getpid())],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                pass_fds=(*fds, *([info_write] if bwrap else [])), start_new_session=True,
                env=env, cwd=cwd)
    except OSError:
        if bwrap:
            os.close(info_read)
        raise
    finally:
        if bwrap:
            os.close(info_write)
    return proc, _inner_pidfd(info_read) if bwrap else None


def _inner_pidfd(info_fd: int) -> int | None:
    """bwrap reports its child, the namespace's init, as {"child-pid": N}. Once that process
    has exited, so has everything in its pid namespace. A pidfd cannot refer to a reused pid."""
    data = b""
    try:
        while select.select([info_fd], [], [], _STARTUP_GRACE)[0]:
            chunk = os.read(info_fd, 4096)
            if not chunk:
                break
            data += chunk
        return os.pidfd_open(json.loads(data)["child-pid"])
    except (OSError, ValueError, KeyError):
        return None
    finally:
        os.close(info_fd)


def _collect(proc: subprocess.Popen, read_fd: int, key: bytes, timeout: float, max_output: int,
             n_tests: int) -> tuple[list[_Record], tuple[RunError, str] | None, bytes]:
    """Read output and records until both pipes close, a limit is hit or time runs out."""
    assert proc.stdout is not None
    deadline = time.monotonic() + _STARTUP_GRACE + timeout
    records: list[_Record] = []
    pending, output, output_total = b"", bytearray(), 0
    fault: tuple[RunError, str] | None = None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ, "output")
        selector.register(read_fd, selectors.EVENT_READ, "records")
        while selector.get_map() and fault is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                started = any(r.kind == "ready" for r in records)
                fault = ("timeout", f"time limit of {timeout:g}s exceeded" if started else
                         f"sandbox did not start within {_STARTUP_GRACE:g}s")
                break
            for ready, _ in selector.select(remaining):
                data = os.read(ready.fd, 1 << 16)
                if not data:
                    selector.unregister(ready.fileobj)
                elif ready.data == "output":
                    output += data[: max(0, _OUTPUT_KEPT - len(output))]
                    output_total += len(data)
                    if output_total > max_output:
                        fault = ("output_limit", f"more than {max_output} bytes of output")
                else:
                    *lines, pending = (pending + data).split(b"\n")
                    for line in lines:
                        record = _parse_record(line, key, len(records))
                        if record is None:
                            fault = ("tampered", "forged or corrupted result record")
                            break
                        records.append(record)
                        if record.kind == "ready":  # the clock starts when the program does
                            deadline = time.monotonic() + timeout
                    if len(pending) > _RECORD_MAX or len(records) > n_tests + 4:
                        fault = ("tampered", "unexpected data on the result channel")
    if fault is None and _wait_exit(proc, deadline):
        fault = ("timeout", f"time limit of {timeout:g}s exceeded")
    return records, fault, bytes(output)


def _wait_exit(proc: subprocess.Popen, deadline: float) -> bool:
    """Wait, without reaping, until the child exits; True if the deadline passed first."""
    while os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is None:
        if time.monotonic() >= deadline:
            return True
        time.sleep(0.002)
    return False


def _reap(proc: subprocess.Popen, inner: int | None) -> int:
    """Kill everything and return only once it is all gone. Under bwrap the namespace's init
    goes first and is waited for (its exit implies its namespace's); then the process group.
    The leader is not reaped before killpg, so its pid (the group id) cannot have been reused."""
    if inner is not None:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(inner, signal.SIGKILL)
        select.select([inner], [], [], 5.0)  # a pidfd turns readable when its process exits
        os.close(inner)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    if proc.stdout is not None:
        proc.stdout.close()
    try:
        return proc.wait(timeout=5.0)
    except subprocess.TimeoutExpired:  # unkillable (D state): leave it, report the failure
        return -signal.SIGKILL


def _report(config: dict, records: list[_Record], fault: tuple[RunError, str] | None,
            returncode: int, output: bytes, seconds: float) -> TestReport:
    error, detail = fault or _run_error(records, returncode)
    results: list[TestResult | None] = [None] * len(config["tests"])
    for r in records:
        if r.kind == "test" and 0 <= r.index < len(results):
            results[r.index] = TestResult(r.status == "pass", r.reason)
    not_run = TestResult(False, f"not run: {error}: {detail}".rstrip(": "))
    ready = [r.reason for r in records if r.kind == "ready"]
    return TestReport(tuple(r or not_run for r in results), error, detail,
                      ready[0] if ready else config["mode"], output.decode(errors="replace"),
                      seconds)


def _run_error(records: list[_Record], returncode: int) -> tuple[RunError | None, str]:
    """Classify a run whose pipes closed in time."""
    kinds = {r.kind for r in records}
    for r in records:
        if r.kind == "program" and r.status == "syntax":
            return "syntax_error", r.reason
        if r.status == "memory":
            return "memory", r.reason
        if r.status == "tampered":
            return "tampered", r.reason
        if r.kind == "program" and r.status != "ok":
            return "program_error", r.reason
    if "end" in kinds:
        return None, ""
    if returncode < 0:
        if -returncode == signal.SIGXCPU:
            return "timeout", "CPU time limit exceeded"
        return "crashed", f"killed by {signal.Signals(-returncode).name}"
    if "ready" not in kinds:
        return "sandbox_error", f"sandbox failed to start (exit status {returncode})"
    return "exited", f"process exited early with status {returncode}"
