"""The caller's side of verifiers.code: start the two processes of a run, watch them, reap them.

One run = the program's sandbox (bwrap / unshare / rlimits around runner.py) and the
trusted judge (judge.py), joined by two pipes the caller creates: requests (judge ->
program) and answers (program -> judge). The judge reports to the caller on a third pipe;
each writes its output to a pipe of its own (the judge's verdict never waits on a pipe the
program can fill or make non-blocking), which the caller caps. The caller holds the wall clock
(the judge enforces it to the call; the caller kills a run still alive a little later) and,
at the end, kills both processes and waits until every process of the run is gone, pid
namespaces included, so nothing is left running or unreaped.
"""

from __future__ import annotations

import contextlib
import functools
import json
import marshal
import os
import select
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from verifiers._sandbox.files import package_masks
from verifiers._sandbox.image import entries as image_entries
from verifiers._sandbox.image import image_root, library_path

_HERE = Path(__file__).parent
STARTUP_GRACE = 10.0  # seconds the processes may take to start before the run's clock runs
JUDGE_SLACK = 1.0  # seconds past the deadline before the caller kills a judge still running
OUTPUT_KEPT = 16 * 1024  # bytes of output kept in the report
DISK_BYTES = 64 * 2**20  # size of each tmpfs and RLIMIT_FSIZE
DISK_INODES = 4096  # files and dirs in each tmpfs (unshare; bwrap 0.8 cannot cap them)
DEVICES = ("null", "zero", "full", "random", "urandom")


@functools.cache
def source(name: str) -> str:
    return (_HERE / name).read_text()


@functools.cache
def compiled(*names: str):
    """The sources of `names`, joined and compiled once per caller: the payloads carry code
    objects (marshal takes them; both processes run this interpreter), so no sandbox process
    compiles its code at each start."""
    return compile("".join(source(name) for name in names), f"<sandbox {'+'.join(names)}>",
                   "exec", dont_inherit=True)


def python(site_packages: bool) -> str:
    # Without site-packages the real binary will do, and a venv's files need not be visible.
    return sys.executable if site_packages else os.path.realpath(sys.executable)


def _python_roots(site_packages: bool) -> set[str]:
    roots = {sys.base_prefix, sys.base_exec_prefix, str(Path(python(site_packages)).parents[1])}
    if site_packages:
        roots |= {sys.prefix, sys.exec_prefix}
    return {os.path.realpath(r) for r in roots}


def layout(site_packages: bool, use_image: bool = True) -> list[tuple[str, ...]]:
    """The sandbox's file system, for bwrap and unshare alike: the image (image.py: the
    interpreter and what it loads, on a tmpfs) or, where there is none, the host's system
    dirs and the interpreter, read-only; a few device nodes, capped tmpfs /tmp and /work;
    with site_packages, the installed packages' code from the host; nothing else.
    use_image=False: the host's dirs (rlimits: what Landlock lets it read, by host path)."""
    # the tmpfs first: a bind below /tmp (a venv there) then lands on it, not under it
    entries: list[tuple[str, ...]] = [("tmpfs", "/tmp"), ("tmpfs", "/work")]
    root = image_root() if use_image else None
    if root is not None:
        entries += image_entries(root)
    else:
        for top in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64"):
            if os.path.islink(top):  # merged-/usr systems: /lib -> usr/lib
                entries.append(("symlink", os.readlink(top), top))
            elif os.path.isdir(top):
                entries.append(("ro-bind", top, top))
        entries.append(("ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"))
    for where in sorted(_python_roots(site_packages) if root is None or site_packages else ()):
        if where != "/usr" and not where.startswith("/usr/") and not (
                root is not None and os.path.exists(root + where)):
            entries.append(("ro-bind", where, where))
    if site_packages:  # code only: every data file (datasets, tests) hidden
        for packages in sorted({os.path.realpath(p) for p in site.getsitepackages()}):
            entries += package_masks(packages) if os.path.isdir(packages) else ()
    return [*entries, ("dev", "/dev")]


def gaps(mode: str, site_packages: bool) -> tuple[str, ...]:
    """What a run in `mode` does not isolate here as to host caches: "host_caches" where the
    program reads host files (page-cache residency, dentries, access times it can move and
    time: no image, or site_packages), "host_dentries" under rlimits with the image (its
    reads reach the image only, but its path lookups reach the host's file systems)."""
    if site_packages or image_root() is None:
        return ("host_caches",)
    return ("host_dentries",) if mode == "rlimits" else ()


@functools.cache
def bwrap_nests() -> bool:
    """Whether a process inside bwrap may make a user namespace of its own (not under Ubuntu's
    AppArmor profile for bwrap, for one). Where it may, the runner caps its tmpfs's inodes
    and hides site-packages' data files itself (confine.finish_bwrap); where not, bwrap
    hides them (a bind each, slower) and the tmpfs are capped in size only."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return False
    probe = "import ctypes, sys; sys.exit(ctypes.CDLL(None).unshare(0x10000000) != 0)"
    try:
        # --as-pid-1: no init of bwrap's own, which bwrap may exit before reaping (a zombie
        # for the host's pid 1, one per caller)
        done = subprocess.run([bwrap, "--unshare-all", "--unshare-user", "--die-with-parent",
                               "--as-pid-1", "--ro-bind", "/", "/", "--proc", "/proc", "--",
                               python(False), "-I", "-S", "-c", probe],
                              capture_output=True, timeout=STARTUP_GRACE)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _bwrap_args(entries: list[tuple[str, ...]], nests: bool) -> list[str]:
    # nests: the runner mounts the capped tmpfs and the masks (finish_bwrap); it needs /proc
    # for its uid map, which it then covers
    args: list[str] = ["--proc", "/proc"] if nests else []
    for kind, *rest in entries:
        if kind == "tmpfs":
            args += ["--size", str(DISK_BYTES), "--tmpfs", rest[0]]
        elif kind == "mask" and not nests:
            args += ["--size", "4096", "--tmpfs", rest[0], "--remount-ro", rest[0]]
        elif kind == "mask-file" and not nests:
            args += ["--ro-bind", "/dev/null", rest[0]]
        elif kind not in ("mask", "mask-file"):
            args += [f"--{kind}", *rest]
    return [*args, "--chdir", "/work", "--remount-ro", "/dev", "--remount-ro", "/"]


def readable(entries: list[tuple[str, ...]]) -> list[str]:
    """What Landlock lets the rlimits mode read: the sources of the same binds."""
    paths = [rest[0] for kind, *rest in entries if kind in ("ro-bind", "ro-bind-try")]
    return paths + [f"/dev/{name}" for name in DEVICES]


def _env(home: str, tmp: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": home, "TMPDIR": tmp,
            # threads are refused: keep BLAS serial
            **dict.fromkeys(("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"), "1")}


# Both processes start as this bootstrap: read the payload (an unlinked file's fd, argv[1]),
# exec the wire format, then the process's own code from the payload, and call its main with
# the config, the wire format and the other fd arguments. The marker names the role.
BOOT = """# tts-sandbox-{role} (verifiers/_sandbox/host.py)
import marshal, os, sys
chunks, fd = [], int(sys.argv[1])
while chunk := os.read(fd, 1 << 16):
    chunks.append(chunk)
os.close(fd)
config = marshal.loads(b"".join(chunks))
wire, code = {{"__name__": "sandbox_wire"}}, {{"__name__": "sandbox_{role}"}}
exec(config.pop("wire_source"), wire)
exec(config.pop("main_source"), code)
code["main"](config, wire, [int(arg) for arg in sys.argv[2:]])
"""


def _interpreter(site_packages: bool, role: str) -> list[str]:
    return [python(site_packages), "-I", "-B", *([] if site_packages else ["-S"]), "-c",
            BOOT.format(role=role)]


@dataclass
class Run:
    """The processes and pipes of one run, and what came back."""

    mode: str
    sandbox: subprocess.Popen | None = None
    judge: subprocess.Popen | None = None
    inner: int | None = None  # pidfd of the sandbox's pid-namespace init (bwrap, unshare)
    records: list[dict] = field(default_factory=list)
    output: bytearray = field(default_factory=bytearray)
    fault: tuple[str, str] | None = None  # a limit the caller enforced: (error, detail)
    returncode: int = 0  # the sandbox's exit status; -n for a signal n
    exited: bool = False  # the sandbox exited by itself (else the caller killed it)
    gaps: tuple[str, ...] = ()  # what the mode does not isolate here (TestReport.gaps)
    ready_at: float | None = None  # time.monotonic() when the program was ready


def start(run: Run, program_payload: dict, judge_payload: dict, site_packages: bool,
          workdir: str | None) -> tuple[int, tuple[int, int]]:
    """Start the judge, then the sandbox; returns the caller's ends (results, (the program's
    output, the judge's)). The
    command lines end with the fds each process uses and this process's pid."""
    request_r, request_w = os.pipe()
    answer_r, answer_w = os.pipe()
    results_r, results_w = os.pipe()
    output_r, output_w = os.pipe()  # the program's stdout and stderr
    judge_out_r, judge_out_w = os.pipe()  # the judge's: a pipe the program never holds
    info_r, info_w = os.pipe() if run.mode != "rlimits" else (-1, -1)
    parent, started = os.getpid(), False
    try:
        judge_payload["main_source"] = compiled("calls.py", "judge.py")
        program_payload["main_source"] = compiled("runner.py")
        run.judge = _popen(_interpreter(site_packages, "judge"), judge_payload,
                           [request_w, answer_r, results_w, parent], judge_out_w,
                           _env("/", "/tmp"), "/")
        runner = _interpreter(site_packages, "runner")
        fds = [request_r, answer_w, info_w if run.mode == "unshare" else -1, parent]
        program_payload["parent"] = parent  # the runner dies with it
        if run.mode == "rlimits":
            assert workdir is not None
            argv, env, cwd = runner, _env(workdir, workdir), workdir
            root = image_root() if not site_packages else None
            if root is not None:  # the image's interpreter: Landlock lets it read the image only
                argv = [root + runner[0], *runner[1:]]
                env["LD_LIBRARY_PATH"] = library_path(root)
        elif run.mode == "unshare":
            argv, env, cwd = runner, _env("/work", "/tmp"), "/"
        else:
            bwrap = shutil.which("bwrap")
            if bwrap is None:
                raise OSError("bwrap is not installed")
            # no --disable-userns: the runner may need a user namespace (finish_bwrap);
            # seccomp denies namespaces to the program
            argv = [bwrap, "--info-fd", str(info_w), "--unshare-all", "--unshare-user",
                    "--die-with-parent", "--as-pid-1", "--uid", "65534", "--gid", "65534",
                    "--hostname", "sandbox",
                    *_bwrap_args(program_payload["layout"], program_payload["bwrap_nests"]),
                    "--", *runner]
            env, cwd = _env("/work", "/tmp"), "/"
            program_payload["parent"] = 0  # its parent is bwrap's init; --die-with-parent
        run.sandbox = _popen(argv, program_payload, fds, output_w, env, cwd,
                             extra=(info_w,) if run.mode == "bwrap" else ())
        started = True
    finally:
        ours = (request_r, request_w, answer_r, answer_w, results_w, output_w, judge_out_w, info_w)
        for fd in ours if started else (*ours, results_r, output_r, judge_out_r, info_r):
            if fd >= 0:
                os.close(fd)
    if info_r >= 0:
        run.inner = _inner_pidfd(info_r)
    return results_r, (output_r, judge_out_r)


def _popen(argv: list[str], payload: dict, args: list[int], output: int, env: dict[str, str],
           cwd: str, extra: tuple[int, ...] = ()) -> subprocess.Popen:
    """Start one process with argv + [payload fd, *args]; the payload travels in an unlinked
    file. args are the fds it inherits (-1: none) and, last, this process's pid."""
    with tempfile.TemporaryFile() as file:
        file.write(marshal.dumps(payload))  # the same interpreter reads it
        file.flush()
        file.seek(0)
        fds = (file.fileno(), *(fd for fd in args[:-1] if fd >= 0), *extra)
        return subprocess.Popen([*argv, str(file.fileno()), *map(str, args)],
                                stdin=subprocess.DEVNULL, stdout=output, stderr=output,
                                pass_fds=fds, start_new_session=True, env=env, cwd=cwd)


def _inner_pidfd(info_fd: int) -> int | None:
    """bwrap (or the unshare runner) reports its pid namespace's init as {"child-pid": N}.
    Once that process has exited, so has everything in its namespace. A pidfd cannot refer
    to a reused pid."""
    data = b""
    try:
        while _wait([info_fd], STARTUP_GRACE):
            chunk = os.read(info_fd, 4096)
            if not chunk:
                break
            data += chunk
        return os.pidfd_open(json.loads(data)["child-pid"])
    except (OSError, ValueError, KeyError):
        return None
    finally:
        os.close(info_fd)


def _wait(fds: list[int], seconds: float) -> list[int]:
    """The fds of `fds` ready to read (or closed) within `seconds`; poll, not select: select
    cannot take an fd over 1023, and the caller may hold more."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    return [fd for fd, _ in poller.poll(max(0, int(seconds * 1000 + 0.999)))]


def collect(run: Run, results_fd: int, output_fds: tuple[int, int], timeout: float,
            max_output: int) -> None:
    """Read the judge's records and both processes' output (the program's, the judge's: two
    pipes, so the program cannot block or break the judge's) until the judge is done, a
    limit is hit or the clock (started when the program is ready) runs out."""
    deadline = time.monotonic() + STARTUP_GRACE
    pending, total = b"", 0
    kept = {fd: bytearray() for fd in output_fds}
    open_fds = {results_fd, *output_fds}
    while results_fd in open_fds and run.fault is None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            started = any(r.get("kind") == "ready" for r in run.records)
            run.fault = ("timeout", f"time limit of {timeout:g}s exceeded" if started else
                         f"sandbox did not start within {STARTUP_GRACE:g}s")
            break
        for fd in _wait(list(open_fds), remaining):
            data = os.read(fd, 1 << 16)
            if not data:
                open_fds.discard(fd)
            elif fd in kept:
                kept[fd] += data[: max(0, OUTPUT_KEPT - len(kept[fd]))]
                total += len(data)
                if total > max_output:
                    run.fault = ("output_limit", f"more than {max_output} bytes of output")
            else:
                *lines, pending = (pending + data).split(b"\n")
                for line in lines:
                    run.records.append(json.loads(line))  # the judge is trusted
                    if run.records[-1].get("kind") == "ready":
                        run.ready_at = time.monotonic()
                        deadline = time.monotonic() + timeout + JUDGE_SLACK
    # what the program printed before its last answer is in the pipe already; a program
    # still writing is not waited for (bounded reads, only while there is room to keep)
    for fd in output_fds:
        reads = 0
        while fd in open_fds and len(kept[fd]) < OUTPUT_KEPT and reads < 64 and _wait([fd], 0):
            data = os.read(fd, 1 << 16)
            kept[fd] += data[: max(0, OUTPUT_KEPT - len(kept[fd]))]
            reads += 1
            if not data:
                break
    run.output = kept[output_fds[0]] + kept[output_fds[1]]
    for fd in (results_fd, *output_fds):
        os.close(fd)


def finish(run: Run, wait_first: bool) -> None:
    """Kill and reap every process of the run. wait_first: the program's side went quiet (it
    may have ended, and its exit status would say how), so its sandbox gets a moment to exit
    by itself first."""
    if run.judge is not None:
        _stop(run.judge, None)
    if run.sandbox is not None:
        run.exited = wait_first and _exited(run.sandbox, 1.0)
        run.returncode = _stop(run.sandbox, run.inner)
        if run.mode != "rlimits" and run.returncode > 128:  # bwrap and our init: 128 + signal
            run.returncode = 128 - run.returncode


def _stop(proc: subprocess.Popen, inner: int | None) -> int:
    """Kill a process and what it started; return only once it is all gone and reaped. The
    pid-namespace init goes first and is waited for (its exit implies its namespace's); its
    parent then reaps it and exits by itself: killing that parent first would leave the init
    a zombie for the host's pid 1, which may never reap it. Then the process itself and its
    group, in case; it is not reaped before, so neither id can have been reused."""
    if inner is not None:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(inner, signal.SIGKILL)
        # a pidfd turns readable when its process exits; both waits take milliseconds, and
        # only a stuck kernel would use up the generous limits of a loaded machine
        _wait([inner], 10.0)
        os.close(inner)
        _exited(proc, 10.0)
    proc.kill()  # by pid too: a program that called setsid() has left the group
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    try:
        return proc.wait(timeout=5.0)
    except subprocess.TimeoutExpired:  # unkillable (D state): leave it, report the failure
        return -signal.SIGKILL


def _exited(proc: subprocess.Popen, seconds: float) -> bool:
    """Wait up to `seconds`, without reaping, for the process to exit."""
    deadline = time.monotonic() + seconds
    while os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is None:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.002)
    return True
