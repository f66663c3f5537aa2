"""The sandbox's parts on their own: the plain-data wire format, the seccomp filter without
namespaces in front of it, and the judge against answers forged byte by byte."""

from __future__ import annotations

import json
import math
import platform
import subprocess
import sys
from collections import OrderedDict, defaultdict, namedtuple

import pytest
import test_sandbox
from helpers import SYSCALLS
from test_sandbox import REPO, _mode_available, hostile

from verifiers._sandbox import wire
from verifiers.code import run_tests

# the shared fixtures (pytest finds fixtures by their names in the test's module)
canary = test_sandbox.canary
host_untouched = test_sandbox.host_untouched
mode = test_sandbox.mode


# ---------------------------------------------------------------- wire format

PLAIN = [None, True, False, 0, -1, 2**200, -(10**30), 1.5, -0.0, float("inf"), "", "é\ud800",
         b"\x00\xff", 1 + 2j, [], (), set(), frozenset(), {}, [1, [2, (3, frozenset({4}))]],
         {(1, "a"): {frozenset({2}): [None]}, 3.5: b"x"}, {1, "1", (1,)}, ("x",) * 3]


def _roundtrip(value, lenient=False):
    return wire.decode(wire.loads(wire.dumps(wire.encode(value, lenient))[4:]))


def _shown(x):
    """repr, with set members in a fixed order (a set's own order follows the hash seed)."""
    if isinstance(x, (set, frozenset)):
        return f"{type(x).__name__}({sorted(map(_shown, x))})"
    if isinstance(x, (list, tuple)):
        return f"{type(x).__name__}({[_shown(v) for v in x]})"
    if isinstance(x, dict):
        return f"dict({[(_shown(k), _shown(v)) for k, v in x.items()]})"
    return repr(x)  # -0.0, lone surrogates, big ints: exactly as written


@pytest.mark.parametrize("value", PLAIN, ids=range(len(PLAIN)))
def test_plain_values_round_trip_with_their_exact_types(value):
    back = _roundtrip(value)
    assert back == value and _shown(back) == _shown(value)
    stack = [(value, back)]
    while stack:  # same exact type at every level, and new objects
        a, b = stack.pop()
        assert type(a) is type(b)
        if isinstance(a, (list, tuple)):
            assert a is not b or a == ()
            stack.extend(zip(a, b, strict=True))
        elif isinstance(a, dict):
            stack.extend(zip(sorted(a.items(), key=repr), sorted(b.items(), key=repr), strict=True))
        elif isinstance(a, (set, frozenset)):
            stack.extend(zip(sorted(a, key=_shown), sorted(b, key=_shown), strict=True))


def test_nan_round_trips():
    assert math.isnan(_roundtrip(float("nan")))


class Int(int):
    pass


class S(str):
    pass


class L(list):
    pass


NOT_PLAIN = [Int(1), S("a"), L([1]), OrderedDict(a=1), defaultdict(int), namedtuple("P", "x")(1),
             [1, Int(2)], {"k": S("v")}, {Int(1): 2}, bytearray(b"x"), iter([Int(1)]),
             object(), print, type, int, math]


@pytest.mark.parametrize("value", NOT_PLAIN, ids=range(len(NOT_PLAIN)))
def test_subclasses_and_other_objects_are_refused(value):
    with pytest.raises(wire.NotPlain):
        wire.encode(value)


def test_depth_is_capped_and_cycles_are_references():
    deep: list = []
    for _ in range(wire.DEPTH_MAX + 1):
        deep = [deep]
    with pytest.raises(wire.NotPlain, match="nested"):
        wire.encode(deep)
    cyclic: list = [1]
    cyclic.append(cyclic)
    back = wire.decode(wire.loads(wire.dumps(wire.encode(cyclic))[4:]))
    assert back[0] == 1 and back[1] is back
    with pytest.raises(wire.NotPlain, match="reference"):  # a reference to nothing yet
        wire.decode({"r": 0})
    with pytest.raises(wire.NotPlain):  # and a forged deep tree the encoder never made
        wire.decode(json.loads("[" * (wire.DEPTH_MAX + 1) + "]" * (wire.DEPTH_MAX + 1)))


@pytest.mark.parametrize("tree", [{"x": 1}, {"t": 1}, {"d": [[1]]}, {"d": [[[1], 2]]},
                                  {"s": [[1]]}, {"c": ["1", 2]}, {"b": "zz"}, {"i": "g"},
                                  {"t": [], "s": []}, {"i": 5}])
def test_malformed_trees_are_refused(tree):
    with pytest.raises(wire.NotPlain):
        wire.decode(tree)


def test_ranges_and_iterators_cross_as_themselves():
    assert _roundtrip(range(1, 9, 3)) == range(1, 9, 3)
    back = _roundtrip(x * x for x in range(3))
    assert next(back) == 0 and list(back) == [1, 4]


def test_lenient_mode_converts_to_builtin_types():
    assert _roundtrip(Int(3), lenient=True) == 3 and type(_roundtrip(Int(3), lenient=True)) is int
    assert _roundtrip(range(3), lenient=True) == [0, 1, 2]
    assert _roundtrip((x for x in "ab"), lenient=True) == ["a", "b"]
    assert _roundtrip(OrderedDict(a=L([1])), lenient=True) == {"a": [1]}
    with pytest.raises(wire.NotPlain):
        wire.encode(object(), lenient=True)


def test_frames_are_size_capped():
    with pytest.raises(wire.NotPlain, match="exceeds"):
        wire.dumps("x" * wire.MESSAGE_MAX)


# ---------------------------------------------------------------- seccomp alone

SECCOMP = SYSCALLS + r"""
import fcntl, json, signal, socket, struct
from verifiers._sandbox.seccomp import install_seccomp

other = int(os.environ["OTHER_PID"])
r, w = os.pipe()
denied = {"fork": os.fork, "exec": lambda: os.execv("/bin/true", ["true"]),
          "socket": socket.socket, "kill_other": lambda: os.kill(other, 0),
          "kill_all": lambda: os.kill(-1, 0), "kill_group": lambda: os.kill(0, 0),
          "spawn": lambda: os.posix_spawn("/bin/true", ["true"], {}),
          "setown": lambda: fcntl.fcntl(r, fcntl.F_SETOWN, other),
          "setown_self": lambda: fcntl.fcntl(r, fcntl.F_SETOWN, os.getpid()),
          "setsig": lambda: fcntl.fcntl(r, 10, 9), "setown_ex": raw(72, r, 15, None),
          "async": lambda: fcntl.fcntl(r, fcntl.F_SETFL, os.O_ASYNC),
          "lease": lambda: fcntl.fcntl(r, 1024, 0), "setlk": raw(72, r, 6, None),
          "ofd_setlkw": raw(72, r, 38, None), "flock": lambda: fcntl.flock(r, fcntl.LOCK_SH),
          "fiosetown": lambda: fcntl.ioctl(r, 0x8901, struct.pack("i", other)),
          "siocspgrp": raw(16, r, 0x8902, None), "fioasync": raw(16, r, 0x5452, None),
          "tiocsti": raw(16, 0, 0x5412, None), "tiocsig": raw(16, 0, 0x40045436, None),
          "affinity_other": lambda: os.sched_setaffinity(other, {0}),
          "scheduler_other": lambda: os.sched_setscheduler(other, os.SCHED_IDLE, os.sched_param(0)),
          "sched_param_other": lambda: os.sched_setparam(other, os.sched_param(0)),
          "sched_attr_other": raw(314, other, None, 0),
          "setpriority": lambda: os.setpriority(os.PRIO_PROCESS, other, 19),
          "setpriority_self": lambda: os.setpriority(os.PRIO_PROCESS, 0, 1),
          "ioprio_set": raw(251, 1, other, 0), "prlimit_other": raw(302, other, 7, None, None),
          "migrate_pages": raw(256, other, 0, None, None), "move_pages": raw(279, other, 0, None, None, None, 0),
          "process_madvise": raw(440, 0, None, 0, 0, 0), "kcmp": raw(312, other, other, 0, 0, 0),
          "tkill": raw(200, other, 0), "rt_sigqueueinfo": raw(129, other, 0, None),
          "pidfd_open": raw(434, other, 0), "ptrace": raw(101, 16, other, 0, 0),
          "sync": raw(162), "syncfs": raw(306, r), "membarrier": raw(324, 0, 0, 0),
          "sigaction": lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN),
          "unshare": raw(272, 0), "mount": raw(165, None, None, None, 0, None),
          "settimeofday": raw(164, None, None), "sethostname": raw(170, None, 0),
          "syslog": raw(103, 0, None, 0), "fanotify": raw(300, 0, 0),
          # issue 31: what escapes the rlimits, what outlives a run, page-cache residency
          "affinity_self": lambda: os.sched_setaffinity(0, os.sched_getaffinity(0)),
          "prlimit_set_self": raw(302, 0, 7, struct.pack("QQ", 64, 64), None),
          "setrlimit": raw(160, 7, struct.pack("QQ", 64, 64)),
          "memfd_create": lambda: os.memfd_create("x"), "fallocate": raw(285, 0, 1, 0, 4096),
          "io_setup": raw(206, 1, ctypes.byref(ctypes.c_ulong(0))), "io_uring": raw(425, 1, None),
          "socketpair": socket.socketpair, "sendmsg": raw(46, 1, None, 0), "pipe": os.pipe,
          "shmget": raw(29, 0, 4096, 0o1600), "msgget": raw(68, 0, 0o1600),
          "semget": raw(64, 0, 1, 0o1600), "mq_open": raw(240, b"/q", 0o100, 0o600, None),
          "mincore": raw(27, 0, 4096, None), "readahead": raw(187, 0, 0, 4096),
          "fadvise": lambda: os.posix_fadvise(0, 0, 0, os.POSIX_FADV_DONTNEED),
          "preadv2_nowait": lambda: os.preadv(0, [bytearray(1)], 0, os.RWF_NOWAIT),
          "cachestat": raw(451, 0, None, None, 0), "madvise_pageout": raw(28, 0, 4096, 21),
          "madvise_willneed": raw(28, 0, 4096, 3), "madvise_mergeable": raw(28, 0, 4096, 12),
          "setpipe_size": lambda: fcntl.fcntl(w, 1031, 4096), "notify": raw(72, r, 1026, 0),
          "add_seals": raw(72, r, 1033, 1), "fionread": raw(16, r, 0x541B, None),
          "inotify": raw(294, 0), "eventfd": raw(290, 0, 0), "userfaultfd": raw(323, 0),
          "epoll": raw(291, 0), "keyctl": raw(250, 0, 0), "sysinfo": raw(99, None),
          "mlock": raw(149, 0, 4096), "prctl": raw(157, 15, 0, 0, 0, 0)}
allowed = {"kill_self": lambda: os.kill(os.getpid(), 0),
           "nonblocking": lambda: os.set_blocking(r, False),
           "getrlimit": raw(302, 0, 7, None, struct.pack("QQ", 0, 0)),
           "affinity_get": lambda: os.sched_getaffinity(0),
           "madvise_dontneed": raw(28, 0, 0, 4), "isatty": lambda: os.isatty(r),
           "random": lambda: os.urandom(8), "sleep": lambda: __import__("time").sleep(0.001)}
assert install_seccomp(libc, ctypes, "runner")
print(json.dumps({"denied": {k: errno_of(f) for k, f in denied.items()},
                  "allowed": {k: errno_of(f) for k, f in allowed.items()},
                  "clone3": errno_of(raw(435, None, 0))}))
"""


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the seccomp filter is x86_64 only")
def test_seccomp_layer_alone_refuses_each_call():
    """The filter (an allowlist) with no namespace or other layer in front of it: every call
    that creates a process, reaches a socket, signals, slows or stalls another process, holds
    memory or quotas past the rlimits (memfd, fallocate, AIO, IPC, pipes, fds in flight) or
    reads or changes page-cache residency fails with EPERM; reading its own state works."""
    decoy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    before = decoy_state(decoy.pid)
    try:
        done = subprocess.run([sys.executable, "-c", SECCOMP], capture_output=True, text=True,
                              timeout=60, cwd=REPO, env={"OTHER_PID": str(decoy.pid),
                                                         "PATH": "/usr/bin:/bin"})
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert decoy.poll() is None and decoy_state(decoy.pid) == before
    finally:
        decoy.kill()
        decoy.wait()
    assert {k: v for k, v in result["denied"].items() if v != 1} == {}  # 1: EPERM
    assert {k: v for k, v in result["allowed"].items() if v != 0} == {}
    assert result["clone3"] == 1


def decoy_state(pid: int) -> list:
    import os

    return [sorted(os.sched_getaffinity(pid)), os.sched_getscheduler(pid),
            os.getpriority(os.PRIO_PROCESS, pid)]


# ---------------------------------------------------------------- forged answers

FORGE = """import json, os, sys
ANSWER = int(sys.argv[3])  # the runner's answer pipe: the program can always write to it
def add(a, b):
    body = {body!r}
    os.write(ANSWER, len(body).to_bytes(4, "big") + body)
    os._exit(0)
"""
FORGED = {
    "tuple": b'{"ok":{"t":[3]}}', "string": b'{"ok":"3"}', "float_nan": b'{"ok":NaN}',
    "bool": b'{"ok":true}', "unknown_tag": b'{"ok":{"x":3}}', "two_tags": b'{"ok":{"i":"3","t":[]}}',
    "unhashable_set": b'{"ok":{"s":[[3]]}}', "deep": b'{"ok":' + b"[" * 5000 + b"]" * 5000 + b"}",
    "huge_int": b'{"ok":' + b"9" * 5000 + b"}", "not_json": b"3 == 3", "list_answer": b"[3]",
    "stop_iteration": b'{"raise":["StopIteration",""]}', "exit": b'{"raise":["SystemExit",""]}',
    "base_exception": b'{"raise":["KeyboardInterrupt",""]}', "bad_raise": b'{"raise":3}',
    "mutated_int": b'{"ok":3,"mutated":[[0,[9]]]}', "mutated_missing": b'{"ok":3,"mutated":[[7,[]]]}',
    "mutated_key": b'{"ok":3,"mutated":[["zz",[]]]}', "empty": b"{}", "bad_reason": b'{"bad":[1]}',
}


@pytest.mark.parametrize("name", sorted(FORGED))
def test_forged_answers_fail_the_call(name):
    """Answers written straight onto the answer pipe, past the runner: only {"ok": 3} would
    pass `add(1, 2) == 3`, and none of these is that. Tests that catch every exception
    (`except BaseException`) fail too."""
    program = FORGE.format(body=FORGED[name])
    catching = "try:\n    ok = add(1, 2) == 3\nexcept BaseException:\n    ok = True\nassert ok"
    report = hostile("bwrap" if _mode_available("bwrap") else "unshare", program,
                     ["assert add(1, 2) == 3", catching], timeout=5.0, entry_point="add")
    assert report.results[0].reason


def test_a_genuine_raw_answer_is_just_an_answer():
    """The channel carries values, nothing more: an honest raw frame is a right answer."""
    program = FORGE.format(body=b'{"ok":{"i":"3"}}')
    report = run_tests(program, ["assert add(1, 2) == 3 and type(add) is not int"],
                       entry_point="add", timeout=5.0)
    assert report.results[0].passed, report
