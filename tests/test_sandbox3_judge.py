"""The trusted judge under its own limits: what a frame may cost it (checked before parsing,
against a measured reference), what one run's answers may cost it, its CPU; and the smaller
items: the bwrap probe leaves no zombie, no other process's CPU clock is readable."""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc

import pytest
import test_sandbox
from test_sandbox import REPO, _mode_available

from verifiers._sandbox import host, wire
from verifiers.code import rlimits_gaps, run_tests

canary = test_sandbox.canary
host_untouched = test_sandbox.host_untouched
mode = test_sandbox.mode

# bodies of frames, each shaped to make the reader build as many objects per byte as it can
SHAPES = {
    "empty_dicts": b'{"ok":[' + b",".join([b"{}"] * 20000) + b"]}",
    "tagged_tuples": b'{"ok":[' + b",".join([b'{"t":[]}'] * 20000) + b"]}",
    "empty_lists": b'{"ok":[' + b",".join([b"[]"] * 20000) + b"]}",
    "floats": b'{"ok":[' + b",".join([b"1.5"] * 20000) + b"]}",
    "two_char_strings": b'{"ok":[' + b",".join([b'"ab"'] * 20000) + b"]}",
    "big_ints": b'{"ok":[' + b",".join([b"123456789012345678"] * 20000) + b"]}",
    "sets": b'{"ok":[' + b",".join([b'{"s":[1,2,3]}'] * 20000) + b"]}",
    "dicts": b'{"ok":[' + b",".join([b'{"d":[[1,[]],[2,[]]]}'] * 10000) + b"]}",
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_frames_cost_bounds_what_parsing_and_decoding_it_allocates(shape):
    """wire.cost is an upper bound on the memory json's scanner and decode() use for a frame
    (tracemalloc's peak, both alive at once as in the judge)."""
    body = SHAPES[shape]
    tracemalloc.start()
    try:
        tree = wire.loads(body)
        try:
            value = wire.decode(tree["ok"])
        except wire.NotPlain:  # {} is not a value: the judge stops at the scanner's tree
            value = tree
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert value and peak <= wire.cost(body), (peak, wire.cost(body))


JUDGE_RSS = r'''
import json, resource, sys
sys.path.insert(0, sys.argv[1])
from verifiers._sandbox import host
from verifiers.code import run_tests, rlimits_gaps
rss, stop = [], host._stop
def stopped(proc, inner):  # the judge is stopped and reaped first: the peak so far is its
    code = stop(proc, inner)
    rss.append(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
    return code
host._stop = stopped
report = run_tests(sys.argv[2], [sys.argv[3]], isolation=sys.argv[4], timeout=20,
                   unisolated=rlimits_gaps(), memory_mb=512)
print(json.dumps({"error": report.error, "detail": report.detail,
                  "passed": report.num_passed,
                  "judge_max_rss_mib": rss[0]}))
'''
FLOOD = '''import os, sys
ANSWER = int(sys.argv[3])
def add(a, b):
    body = b'{"ok":[' + b",".join([SHAPE] * COUNT) + b"]}"
    os.write(ANSWER, len(body).to_bytes(4, "big") + body)
    return 0
'''


def _judged(mode: str, program: str, test: str) -> dict:
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", JUDGE_RSS, str(REPO), program,
                           test, mode], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize(("shape", "count", "test", "error", "bound"), [
    # one frame just under MESSAGE_MAX: 390 MiB of objects before, refused unparsed now: the
    # judge holds its baseline and a frame's bytes
    (b"{}", 5_000_000, "assert add(1, 2) == 3", {"tampered"}, 48 + 3 * wire.MESSAGE_MAX / 2**20),
    # a stream of frames each under COST_MAX, every answer kept by the test: the judge's
    # address space (RLIMIT_AS, 1 GiB here) bounds it, and its CPU the run's clock: a
    # recorded "memory" or "timeout" error, whichever comes first on the machine
    (b"[]", 1_500_000, "kept = [add(i, 1) for i in range(40)]\nassert kept[0] == 2",
     {"memory", "timeout"}, 1024 + 64),
])
def test_a_hostile_stream_of_frames_is_a_recorded_error_not_a_grown_judge(mode, shape, count,
                                                                        test, error, bound):
    program = FLOOD.replace("SHAPE", repr(shape)).replace("COUNT", str(count))
    result = _judged(mode, program, test)
    assert result["error"] in error and result["passed"] == 0, result
    assert result["judge_max_rss_mib"] < bound, result


def test_the_bwrap_probe_leaves_no_zombie():
    """bwrap_nests() run by a process that adopts orphans (a subreaper): no zombie is left
    to it, where the probe without --as-pid-1 left bwrap's init, one per caller."""
    if not _mode_available("bwrap"):
        pytest.skip("bwrap is not available here")
    script = (f"import ctypes, os, sys, time\nsys.path.insert(0, {str(REPO)!r})\n"
              "ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER\n"
              "from verifiers._sandbox import host\nok = host.bwrap_nests()\ntime.sleep(0.5)\n"
              "zombies = [p for p in os.listdir('/proc') if p.isdigit() and open(f'/proc/{p}/stat')"
              ".read().rsplit(')', 1)[1].split()[:2] == ['Z', str(os.getpid())]]\n"
              "print(ok, len(zombies))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert done.stdout.split() == [str(host.bwrap_nests()), "0"], done.stderr


CLOCKS = '''import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def clocks(pid):
    ts = (ctypes.c_long * 2)()
    out = {}
    for name, clock in (("realtime", 0), ("monotonic", 1), ("own_cpu", 2), ("boottime", 7),
                        ("pid_1_cpu", (~1 << 3) | 2), ("caller_cpu", (~pid << 3) | 2)):
        ctypes.set_errno(0)
        out[name] = 0 if libc.syscall(228, clock, ts) == 0 else ctypes.get_errno()
    return out
'''


def test_no_other_process_cpu_clock_is_readable(mode):
    """clock_gettime on a process CPU clock id (another pid's, the caller's) fails with EPERM
    in every mode; the system clocks and its own CPU clock work."""
    import os

    report = run_tests(CLOCKS, [f"print(clocks({os.getpid()}))"], isolation=mode,
                       unisolated=rlimits_gaps(), timeout=10)
    seen = eval(report.output.strip().splitlines()[-1])
    assert seen == {"realtime": 0, "monotonic": 0, "own_cpu": 0, "boottime": 0,
                    "pid_1_cpu": 1, "caller_cpu": 1}
