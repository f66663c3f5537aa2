"""Issue 24's attacks on verifiers.code, and others of the same families, in every mode.

False passes: wrong `add(a, b)` programs that tried to make the tests pass anyway (callables
that are not functions, functions with foreign globals, code-object surgery, frames, memory and
/proc searched for the tests, forged answers, exceptions a test would swallow). Each must fail.

Escapes: the run's caller is a decoy process here (tests/test_sandbox's `_decoy_caller`), so an
attack that works kills or slows the decoy, not pytest: signals through fcntl/ioctl owners,
scheduling and priority of other pids, raw syscalls through ctypes, threads, deleting and
filling the work dir's parents. The decoy must survive unchanged, and its TMPDIR with it.
"""

from __future__ import annotations

import pytest
import test_sandbox
from test_sandbox import _mode_available, decoy_caller, hostile

from verifiers.code import rlimits_gaps

# the shared fixtures (pytest finds fixtures by their names in the test's module)
canary = test_sandbox.canary
host_untouched = test_sandbox.host_untouched
mode = test_sandbox.mode


ADD_TESTS = ["assert add(1, 2) == 3", "assert add(2, 2) == 4", "assert add(-1, 1) == 0"]
YES = ("class Yes(int):\n    def __eq__(self, other):\n        return True\n"
       "    def __ne__(self, other):\n        return False\n    __hash__ = int.__hash__\n")
ORACLE = r'''
import gc, os, re, sys
PATTERN = re.compile(rb"add\((-?\d+), (-?\d+)\) == (-?\d+)")
def _search(blob, a, b):
    for m in PATTERN.finditer(blob):
        if (int(m.group(1)), int(m.group(2))) == (a, b):
            return int(m.group(3))
def _sources():
    for obj in gc.get_objects():  # everything in this process
        if isinstance(obj, (str, bytes)):
            yield obj.encode(errors="ignore") if isinstance(obj, str) else obj
    frame = sys._getframe()
    while frame is not None:  # the runner's frames, all the way up
        yield repr(frame.f_locals).encode(errors="ignore")
        frame = frame.f_back
    for pid in ["self"] + [p for p in os.listdir("/proc") if p.isdigit()] if os.path.isdir("/proc") else []:
        for name in ("cmdline", "environ"):
            try:
                yield open(f"/proc/{pid}/{name}", "rb").read()
            except OSError:
                pass
        try:  # every readable mapping of every process's memory
            maps = open(f"/proc/{pid}/maps").read().splitlines()
            with open(f"/proc/{pid}/mem", "rb") as mem:
                for line in maps:
                    lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                    if "r" in line.split()[1] and hi - lo < 2**26:
                        try:
                            mem.seek(lo)
                            yield mem.read(hi - lo)
                        except (OSError, ValueError, OverflowError):
                            pass
        except OSError:
            pass
        for fd in os.listdir(f"/proc/{pid}/fd") if os.access(f"/proc/{pid}/fd", os.R_OK) else []:
            try:
                yield open(f"/proc/{pid}/fd/{fd}", "rb").read(1 << 20)
            except OSError:
                pass
def add(a, b):
    for blob in _sources():
        found = _search(blob, a, b)
        if found is not None:
            return found
    return a + b + 1  # wrong, unless the tests were found
'''
# (id, program): wrong programs that pass every ADD_TESTS test if their trick works
FALSE_PASSES = [
    ("callable_instance", YES + "class Add:\n    def __call__(self, a, b):\n        return Yes(7)\n"
     "add = Add()"),
    ("class_new_returns_int_subclass", YES + "class add:\n    def __new__(cls, a, b):\n"
     "        return Yes(7)"),
    ("function_of_foreign_globals", YES + "ns = {'Yes': Yes}\n"
     "exec('def add(a, b):\\n    return Yes(7)', ns)\nadd = ns['add']"),
    ("function_type_from_code", YES + "import types\n"
     "def _t(a, b):\n    return Yes(7)\nadd = types.FunctionType(_t.__code__, {'Yes': Yes})"),
    ("partial_and_bound_method", YES + "import functools\nclass C:\n    def m(self, a, b):\n"
     "        return Yes(7)\nadd = functools.partial(C().m)"),
    ("co_consts_surgery", YES + "def add(a, b):\n    return 0\n"
     "add.__code__ = add.__code__.replace(co_consts=(None, Yes(7)))"),
    ("out_of_range_load_const", "def _f():\n    return 1\n"
     "code = _f.__code__\nraw = bytearray(code.co_code)\n"
     "i = raw.index(100)\nraw[i + 1] = 200  # LOAD_CONST 200: past the end of co_consts\n"
     "_g = type(_f)(code.replace(co_code=bytes(raw)), {})\n"
     "def add(a, b):\n    return _g()"),
    ("oracle_memory_frames_proc", ORACLE),
    ("stop_iteration_swallowed_by_map", "def add(a, b):\n    raise StopIteration"),
    ("system_exit", "import sys\ndef add(a, b):\n    sys.exit(0)"),
    ("forged_answer_frames", "import os, json\n"
     "def add(a, b):\n    for fd in range(3, 64):\n"
     "        for msg in ({'kind': 'test', 'index': 0, 'status': 'pass', 'reason': ''},\n"
     "                    {'ok': a + b}, {'ok': True, 'raise': None}):\n"
     "            body = json.dumps(msg).encode()\n"
     "            try:\n                os.write(fd, len(body).to_bytes(4, 'big') + body)\n"
     "            except OSError:\n                pass\n    return a + b + 1"),
    ("deep_json_answer", "import os\ndef add(a, b):\n"
     "    body = b'{\"ok\":' + b'[' * 100000 + b']' * 100000 + b'}'\n"
     "    for fd in range(3, 64):\n        try:\n"
     "            os.write(fd, len(body).to_bytes(4, 'big') + body)\n"
     "        except OSError:\n            pass\n    os._exit(0)"),
    ("plainly_wrong", "def add(a, b):\n    return a + b + 1\n"),
]
MAP_TEST = "assert all(map(lambda p: add(*p) == p[0] + p[1], [(1, 2), (3, 4)]))"


@pytest.mark.parametrize("entry_point", ["add", None])
@pytest.mark.parametrize("name,program", FALSE_PASSES, ids=[a[0] for a in FALSE_PASSES])
def test_wrong_add_never_passes(name, program, entry_point, mode):
    report = hostile(mode, program, [*ADD_TESTS, MAP_TEST], timeout=5.0, entry_point=entry_point)
    assert report.num_passed == 0


@pytest.mark.parametrize("name,program", FALSE_PASSES[:6], ids=[a[0] for a in FALSE_PASSES[:6]])
def test_lenient_conversion_is_still_sound(name, program):
    """plain_returns=False converts the int subclass to an int on the program's side: the
    judge compares a real 7 with 3."""
    report = hostile("bwrap" if _mode_available("bwrap") else "unshare", program, ADD_TESTS,
                     entry_point="add", plain_returns=False)
    assert all(r.reason.startswith("AssertionError") for r in report.results), report


# ---------------------------------------------------------------- escapes

SIGNALS = r'''
import fcntl, os, signal, socket, struct
try:  # ctypes: raw syscalls, past anything Python-level
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
except ImportError:
    libc = None
def attempt(out, name, fn):
    try:
        fn()
        out[name] = "ok"
    except OSError as exc:
        out[name] = exc.errno
def raw(nr, *args):
    if libc is None or libc.syscall(nr, *args) < 0:
        raise OSError(ctypes.get_errno() if libc else 0, "")
def attacks():
    out, pid = {}, CALLER_PID
    try:
        r, w = os.pipe()
    except OSError:  # pipes are not on the allowlist: fds it can open instead
        r, w = os.open("/dev/null", os.O_RDONLY), 1
    attempt(out, "setown", lambda: fcntl.fcntl(r, fcntl.F_SETOWN, pid))
    attempt(out, "setown_pgrp", lambda: fcntl.fcntl(r, fcntl.F_SETOWN, -pid))
    attempt(out, "setsig", lambda: fcntl.fcntl(r, 10, signal.SIGKILL))
    attempt(out, "setown_ex", lambda: fcntl.fcntl(r, 15, struct.pack("ii", 1, pid)))
    attempt(out, "async", lambda: fcntl.fcntl(r, fcntl.F_SETFL, os.O_ASYNC | os.O_NONBLOCK))
    attempt(out, "raw_setown", lambda: raw(72, r, 8, pid))
    attempt(out, "raw_async", lambda: raw(72, r, 4, 0x2000))
    attempt(out, "fiosetown", lambda: fcntl.ioctl(r, 0x8901, struct.pack("i", pid)))
    attempt(out, "fioasync", lambda: fcntl.ioctl(r, 0x5452, struct.pack("i", 1)))
    attempt(out, "lease", lambda: fcntl.fcntl(r, 1024, fcntl.F_RDLCK))
    os.write(w, b"x")  # would raise SIGIO (here SIGKILL) at the owner
    try:
        a, b = socket.socketpair()
        attempt(out, "siocspgrp", lambda: fcntl.ioctl(a, 0x8902, struct.pack("i", pid)))
        b.send(b"x")
    except Exception:
        pass
    attempt(out, "kill", lambda: os.kill(pid, signal.SIGKILL))
    attempt(out, "kill_all_probe", lambda: os.kill(-1, 0))
    attempt(out, "kill_group_probe", lambda: os.kill(0, 0))
    attempt(out, "raw_kill", lambda: raw(62, pid, 9))
    attempt(out, "tgkill", lambda: raw(234, pid, pid, 9))
    attempt(out, "sigqueue", lambda: raw(129, pid, 9, None))
    attempt(out, "pidfd", lambda: raw(434, pid, 0))
    attempt(out, "affinity", lambda: os.sched_setaffinity(pid, {0}))
    attempt(out, "scheduler", lambda: os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0)))
    attempt(out, "sched_param", lambda: os.sched_setparam(pid, os.sched_param(0)))
    attempt(out, "sched_attr", lambda: raw(314, pid, struct.pack("IIQiIQQQ", 48, 5, 0, 0, 0, 0, 0, 0), 0))
    attempt(out, "nice", lambda: os.setpriority(os.PRIO_PROCESS, pid, 19))
    attempt(out, "nice_user", lambda: os.setpriority(os.PRIO_USER, 0, 19))
    attempt(out, "ioprio", lambda: raw(251, 1, pid, 3 << 13))
    attempt(out, "prlimit", lambda: raw(302, pid, 7, None, None))
    attempt(out, "migrate", lambda: raw(256, pid, 64, None, None))
    attempt(out, "ptrace", lambda: raw(101, 16, pid, 0, 0))
    attempt(out, "vm_read", lambda: raw(310, pid, None, 0, None, 0, 0))
    attempt(out, "flock", lambda: fcntl.flock(r, fcntl.LOCK_SH))
    attempt(out, "setlk", lambda: fcntl.lockf(os.open(os.path.realpath("/usr/bin/env"), os.O_RDONLY), fcntl.LOCK_SH))
    attempt(out, "sync", lambda: raw(162))
    return {k: v for k, v in out.items() if v == "ok"}
'''
SYSCALLS = r'''
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def attacks():
    ok = []
    for name, nr, args in [("fork", 57, ()), ("vfork", 58, ()), ("clone", 56, (0x11, 0, 0, 0, 0)),
                           ("execve", 59, (b"/bin/true", None, None)), ("socket", 41, (2, 1, 0)),
                           ("unshare", 272, (0x10000000,)), ("setns", 308, (0, 0)),
                           ("mount", 165, (b"none", b"/tmp", b"tmpfs", 0, None)),
                           ("umount", 166, (b"/no/such/dir", 2)), ("chroot", 161, (b"/tmp",)),
                           ("bpf", 321, (0, None, 0)), ("perf", 298, (None, 0, -1, -1, 0)),
                           ("userfaultfd", 323, (0,)), ("io_uring", 425, (1, None)),
                           ("keyctl", 250, (0, 0)), ("open_by_handle", 304, (0, None, 0)),
                           ("kcmp", 312, (1, 1, 0, 0, 0)), ("reboot", 169, (0, 0, 0, None)),
                           ("sethostname", 170, (b"x", 1 << 20)), ("settime", 227, (0, None)),
                           ("syslog", 103, (3, None, 0)), ("fanotify", 300, (0, 0)),
                           ("membarrier", 324, (1, 0, 0)), ("syncfs", 306, (1,))]:
        if libc.syscall(nr, *args) >= 0:
            ok.append(name)
    import threading, _thread
    for start in (lambda: threading.Thread(target=print).start(),
                  lambda: _thread.start_new_thread(print, ())):
        try:
            start()
            ok.append("thread")
        except RuntimeError:
            pass
    return ok
'''
FILESYSTEM = r'''
import os, shutil, time

def attacks():
    done, deadline = [], time.monotonic() + 1.5  # a walk of a read-only /usr takes long
    for target in ("..", "../..", "../../.."):
        path = os.path.abspath(target)
        for name in ("fill", "x"):
            try:
                with open(os.path.join(path, name), "wb") as f:
                    f.write(b"0" * 2**20)
                done.append(f"wrote {path}")
            except OSError:
                pass
        entries = listing(path)
        for entry in entries or ():
            if time.monotonic() < deadline:
                try:  # each refused deletion checks the deadline: one entry can be all of /usr
                    shutil.rmtree(os.path.join(path, entry), onerror=past(deadline))
                except (OSError, TimeoutError):
                    pass
                try:
                    os.unlink(os.path.join(path, entry))
                except OSError:
                    pass
        if entries is not None and listing(path) != entries:
            done.append(f"deleted in {path}")
    return done
def listing(path):
    try:
        return set(os.listdir(path))
    except OSError:
        return None
def past(deadline):
    def check(*_):  # rmtree's error handler: go on while there is time, stop after
        if time.monotonic() > deadline:
            raise TimeoutError
    return check
'''


@pytest.mark.parametrize("program", [SIGNALS, SYSCALLS, FILESYSTEM],
                         ids=["signals_and_scheduling", "raw_syscalls_threads", "parents"])
def test_no_escape_reaches_the_caller(program, mode):
    """The program reports every attempt that worked (`attacks()` returns them). The decoy
    caller checks itself: alive, same affinity, scheduler, nice value and I/O class, its
    TMPDIR intact. Under rlimits without Landlock, `../..` is the caller's TMPDIR and
    `../../..` the host's /tmp, which nothing protects: that attack is not run there."""
    if program is FILESYSTEM and mode == "rlimits" and not _landlock():
        pytest.skip("no Landlock here: under rlimits only the run's private parent is protected")
    result = decoy_caller(mode, program, ["raise AssertionError(repr(attacks()))"])
    assert result["num_passed"] == 0 and result["caller_unchanged"], result
    assert result["reasons"][0] in ("AssertionError: []", "AssertionError: {}"), result
    assert result["tmpdir_unchanged"], result


def _landlock() -> bool:
    from verifiers.code import run_tests

    return "landlock" in run_tests("x = 1", ["assert x == 1"], isolation="rlimits",
                                    unisolated=rlimits_gaps()).isolation
