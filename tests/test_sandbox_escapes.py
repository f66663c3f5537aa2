"""Issue 31's classes, one test each, in every mode that applies: no channel that outlives a
run, no signal of test progress, budgets past the rlimits, the host's IPC and disk under
rlimits, the judge's output, program strings in reports, callers with many fds, clean-up of
any depth, tmpfs inodes, and a soak (site_packages: tests/test_sandbox_packages.py)."""

from __future__ import annotations

import ctypes
import os
import resource
import warnings

import pytest
import test_sandbox
from helpers import SYSCALLS
from test_sandbox import _mode_available, hostile

from verifiers._sandbox import files, host
from verifiers.code import rlimits_gaps, run_tests

mode = test_sandbox.mode  # the shared fixture, by name

# Every call that reads or changes page-cache residency, or holds memory, fds or a kernel
# quota past the rlimits, or keeps state outside the run; each answer is the errno it got.
PROBE = SYSCALLS + r'''
import mmap, socket, sys
SHARED = os.__file__  # a host file every run maps: the stdlib
def probe():
    fd = os.open(SHARED, os.O_RDONLY)
    page = mmap.mmap(fd, 4096, prot=mmap.PROT_READ)
    address = ctypes.addressof(ctypes.c_char.from_buffer_copy(b"x"))  # any address
    vec = ctypes.create_string_buffer(8)
    calls = {
        "mincore": raw(27, ctypes.c_void_p(address & ~4095), 4096, vec),
        "preadv2_nowait": lambda: os.preadv(fd, [bytearray(16)], 0, os.RWF_NOWAIT),
        "fadvise_dontneed": lambda: os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED),
        "readahead": raw(187, fd, 0, 4096), "cachestat": raw(451, fd, None, None, 0),
        "madvise_pageout": raw(28, ctypes.c_void_p(address & ~4095), 4096, 21),
        "memfd_create": lambda: os.memfd_create("hold"),
        "fallocate": raw(285, 1, 1, 0, 1 << 30), "io_setup": raw(206, 64, ctypes.byref(ctypes.c_ulong())),
        "socketpair": socket.socketpair, "pipe": os.pipe, "shmget": raw(29, 0x3131, 4096, 0o1666),
        "msgget": raw(68, 0x3131, 0o1666), "semget": raw(64, 0x3131, 1, 0o1666),
        "mq_open": raw(240, b"/tts", 0o102, 0o600, None), "inotify": raw(294, 0),
        "fork": os.fork, "open_dev_shm": lambda: open("/dev/shm/tts-keep", "w"),
    }
    out = {name: errno_of(call) for name, call in calls.items()}
    page.close()
    return out
'''


def test_no_call_reads_or_keeps_state_past_the_run(mode):
    """Residency calls on a file every run shares, and every way to hold memory, a quota or
    an object that outlives the process, fail (EPERM, or ENOENT/EROFS where no /dev/shm)."""
    report = run_tests(PROBE, ["errors = probe()\nprint(errors)\n"
                               "assert all(e in (1, 2, 30) for e in errors.values()), errors\n"
                               "assert errors['open_dev_shm'] or False"],
                       entry_point="probe", isolation=mode, unisolated=rlimits_gaps(), timeout=10)
    assert report.error is None and "Errno" not in report.results[0].reason, report
    errors = eval(report.output.strip().splitlines()[-1])  # the test printed a plain dict
    assert {k: v for k, v in errors.items() if k != "open_dev_shm" and v != 1} == {}
    assert errors["open_dev_shm"] != 0


# A program that never computes the answer, and tries to learn it across runs: it answers
# guess number k, where k is state it finds from earlier runs (files in every writable
# place, /dev/shm), and records "was I called again" (which meant "right" when the judge
# stopped at the first failing assert).
LEARNER = r'''
import os
PLACES = ["/tmp/tts-learn", "/work/tts-learn", os.path.expanduser("~/tts-learn"),
          "/dev/shm/tts-learn", "tts-learn", "../tts-learn"]
def _read():
    for place in PLACES:
        try:
            return [int(x) for x in open(place).read().split()]
        except (OSError, ValueError):
            pass
    return [0, -1]
def _write(state):
    for place in PLACES:
        try:
            open(place, "w").write(" ".join(map(str, state)))
        except OSError:
            pass
state = _read()  # [guess index, accepted guess]
calls = 0
def f(x):
    global calls
    calls += 1
    if calls == 2 and state[1] < 0:
        _write([state[0], state[0]])  # called again: the first answer was accepted
    guess = state[1] if state[1] >= 0 else state[0]
    if calls == 1 and state[1] < 0:
        _write([state[0] + 1, -1])
    return x * 10 + guess
'''
SECRET_TESTS = ["assert f(1) == 13\nassert f(2) == 23\nassert f(3) == 33"]


def test_no_learning_across_runs(mode):
    """Eight runs of the learner never pass, and each sees the same call sequence whether
    its answer was right or wrong (asserts are recorded, not raised)."""
    reports = [run_tests(LEARNER, SECRET_TESTS, entry_point="f", isolation=mode,
                         unisolated=rlimits_gaps()) for _ in range(8)]
    assert [r.passed_all for r in reports] == [False] * 8
    assert all(r.results[0].reason.startswith("AssertionError") for r in reports)


CALLS_SEEN = "def f(x):\n    print('called', x)\n    return {answer}\n"


def test_a_wrong_answer_ends_its_test_and_its_process():
    """As in Python, a failed assert ends its test; the test after it gets a new process, so
    the program never sees that a test stopped early."""
    tests = ["assert f(1) == 1\nassert f(2) == 1\nfor i in range(3, 5):\n    assert f(i) == 1",
             "assert f(9) == 1"]
    right = run_tests(CALLS_SEEN.format(answer=1), tests, entry_point="f")
    wrong = run_tests(CALLS_SEEN.format(answer=0), tests, entry_point="f")
    assert right.output == "".join(f"called {i}\n" for i in (1, 2, 3, 4, 9))
    assert wrong.output == "called 1\ncalled 9\n"
    assert not wrong.passed_all and wrong.results[0].reason == "AssertionError"


IPC_AND_DISK = r'''
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def chain():
    fd = os.open(".", os.O_RDONLY)
    for _ in range(1600):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
def attack(key):
    done = {"shmget": libc.syscall(29, key, 0, 0), "msgget": libc.syscall(68, key, 0),
            "shm_rmid": libc.syscall(31, 0, 0, None)}  # shmctl(id 0, IPC_RMID)
    for name, call in {"write": lambda: open("big", "wb").write(b"x" * 4096), "dirs": chain,
                       "fallocate": lambda: os.posix_fallocate(os.open(".", os.O_RDONLY), 0, 1)}.items():
        try:
            call()
            done[name] = 0
        except OSError as exc:
            done[name] = -exc.errno
    return done
'''


def test_host_ipc_and_disk_are_out_of_reach(mode):
    """A SysV segment the host holds is neither found, read nor removed; under rlimits the
    file system is read-only to the program (no files, dir chains or allocations)."""
    libc = ctypes.CDLL(None, use_errno=True)
    key = 0x5A31 + os.getpid() % 1000
    shm = libc.shmget(key, 4096, 0o1600)  # IPC_CREAT | 0600
    assert shm >= 0
    try:
        report = run_tests(IPC_AND_DISK, [f"print(attack({key}))\nassert False"],
                           entry_point="attack", isolation=mode, unisolated=rlimits_gaps())
        done = eval(report.output.strip().splitlines()[-1])
        assert done["shmget"] < 0 and done["msgget"] < 0 and done["shm_rmid"] < 0, done
        assert done["fallocate"] == -1, done  # EPERM in every mode
        if mode == "rlimits":
            assert done["write"] < 0 and done["dirs"] < 0 and done["fallocate"] < 0, done
        assert libc.shmget(key, 0, 0) == shm  # still there, the same segment
    finally:
        libc.shmctl(shm, 0, None)  # IPC_RMID


def test_the_judges_output_is_its_own():
    """The program makes its stdout non-blocking (and tries to shrink its pipe to a page);
    the judge, printing a lot after the program answered, still delivers its verdict."""
    program = ("import fcntl, os\nos.set_blocking(1, False)\ntry:\n"
               "    fcntl.fcntl(1, 1031, 4096)\nexcept OSError:\n    pass\n"
               "def f():\n    return 0\n")
    report = run_tests(program, ["assert f() == 0\nprint('y' * 300000)\nassert f() == 0",
                                 "assert f() == 1"], entry_point="f", max_output_bytes=1 << 24)
    assert report.error is None, report.detail
    assert [r.passed for r in report.results] == [True, False], report.results
    assert report.output.startswith("y" * 10000)  # the judge's output, kept


def test_program_strings_reach_the_caller_sanitised():
    """Lone surrogates, control characters and megabytes in what the program raises or
    prints become valid, printable, capped text."""
    program = ("import sys\ndef f():\n    sys.stdout.write('\\udcff\\x1b[2J\\x00' * 9)\n"
               "    raise ValueError('\\ud800\\x07' + 'z' * 10**6)\n")
    report = run_tests(program, ["f()"], entry_point="f")
    texts = [report.detail, report.output, report.isolation, *(r.reason for r in report.results)]
    for text in texts:
        text.encode("utf-8")  # raises on a lone surrogate
        assert not any(ord(c) < 32 and c not in "\n\t" for c in text), repr(text[:80])
        assert len(text) <= host.OUTPUT_KEPT
    assert "\\ud800\\x07" in report.results[0].reason and len(report.results[0].reason) <= 2000


def test_a_caller_with_many_fds():
    """poll, not select: fds above 1023 in the caller change nothing."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip("the fd limit is below 1200 here")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = [os.open("/dev/null", os.O_RDONLY) for _ in range(1100)]
    try:
        assert run_tests("def add(a, b):\n    return a + b", ["assert add(1, 2) == 3"]).passed_all
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_clean_up_of_any_depth_never_raises(tmp_path):
    """A 3,000-deep chain with unreadable dirs in it goes (rmtree would raise RecursionError
    or ENAMETOOLONG); a root that cannot be removed is a warning, not an exception."""
    fd = os.open(tmp_path, os.O_RDONLY)
    for depth in range(3000):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
        if depth % 700 == 0:
            os.mkdir("locked", 0, dir_fd=fd)
    os.close(fd)
    files.remove_tree(str(tmp_path / "d"))
    assert list(tmp_path.iterdir()) == []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        files.remove_tree(str(tmp_path / "missing"))
    assert any("clean-up left 1" in str(w.message) for w in caught)


@pytest.mark.slow
def test_soak_leaves_nothing_behind():
    """50 mixed honest/hostile runs: honest ones pass, hostile ones fail, and no process,
    work dir, IPC object, AIO quota, fd or zombie is left (reports/bench/soak_sandbox runs
    1,000)."""
    from reports.bench.soak_sandbox import STREAM, soak

    runs = 49
    before, after, outcomes = soak(runs)
    honest = sum(STREAM[i % len(STREAM)][1] for i in range(runs))
    assert outcomes["honest failed"] == outcomes["hostile passed"] == 0, outcomes
    assert outcomes["honest passed"] == honest and outcomes["hostile failed"] == runs - honest
    assert 0 < honest < runs
    assert {k: (before[k], after[k]) for k in before
            if k != "max rss MiB" and before[k] != after[k]} == {}


def test_hostile_helper_still_applies(mode):
    """The shared helper on one of this issue's programs (a memfd holding memory)."""
    program = "import os\nfd = os.memfd_create('m')\ndef f():\n    return 1"
    hostile(mode, program, ["assert f() == 1"], {"program_error"})


def test_honest_stdlib_programs_pass_under_the_allowlist(mode):
    """No false fail from the allowlist: the honest programs the syscall measurement adds to
    HumanEval and codegen (time, randomness, temp files, 200 MiB, deep recursion, output)."""
    from reports.studies.sandbox_syscalls import EXTRA

    failed = {}
    for program, tests, writes in EXTRA:
        report = run_tests(program, tests, entry_point="f", isolation=mode, timeout=10,
                           unisolated=rlimits_gaps())
        if report.passed_all == (writes and mode == "rlimits"):  # rlimits: read-only files
            failed[program[:40]] = report
    assert failed == {}


INODES = r'''
import os
def fill():
    fd = os.open("/tmp", os.O_RDONLY)
    for n in range(10**6):
        try:
            os.symlink("x", str(n), dir_fd=fd)  # no data block: only an inode
        except OSError as exc:
            return [n, exc.errno]
    return [n, 0]
'''


@pytest.mark.parametrize("isolation", ["bwrap", "unshare"])
def test_tmpfs_inodes_are_capped(isolation):
    """Inodes are kernel memory that no size cap counts: each tmpfs stops at DISK_INODES
    (under bwrap where its runner may make a user namespace: see bwrap_nests)."""
    if not _mode_available(isolation):
        pytest.skip(f"{isolation} is not available here")
    if isolation == "bwrap" and not host.bwrap_nests():
        pytest.skip("bwrap cannot nest a user namespace here: its tmpfs is capped in size only")
    report = run_tests(INODES, [f"assert fill() == [{host.DISK_INODES - 1}, 28]"],
                       entry_point="fill", isolation=isolation, timeout=20)
    assert report.passed_all, report  # ENOSPC at the cap (the root dir is one inode)


DRAIN_READS = 2 * 64  # the caller's reads of each output pipe once the judge is done, at most
FLOOD_AFTER = r'''
import os, sys
def _flood(code=0):
    while True:
        os.write(1, b"x" * 65536)
def f():
    sys._getframe(1).f_globals["_exit"] = _flood  # the runner's exit at the judge's end
    return 1
'''


def test_output_after_the_last_answer_does_not_hold_the_caller():
    """A program that floods its stdout once the judge is done: the caller takes what fits
    in the report and ends the run (it used to read on while there was data; whether the flood
    has begun when the judge ends is a race, which the next test takes out)."""
    report = run_tests(FLOOD_AFTER, ["assert f() == 1"], entry_point="f", timeout=2,
                       max_output_bytes=1 << 40)
    assert report.passed_all, report.detail
    assert len(report.output) <= host.OUTPUT_KEPT


def test_once_the_judge_is_done_the_caller_reads_a_bounded_number_of_times(monkeypatch):
    """host.collect against output that never ends (/dev/zero: always more to read), the
    judge's records already closed: the caller looks for more output (host._wait with no
    wait) a bounded number of times and returns. Counted, not timed."""
    results_r, results_w = os.pipe()
    os.write(results_w, b'{"kind": "ready"}\n')
    os.close(results_w)
    err_r, err_w = os.pipe()  # the judge's output: nothing
    drains, wait = [], host._wait

    def counted(fds: list[int], seconds: float) -> list[int]:
        if seconds == 0:
            drains.append(fds)
            assert len(drains) <= DRAIN_READS, "the caller reads on after the judge is done"
        return wait(fds, seconds)

    monkeypatch.setattr(host, "_wait", counted)
    run = host.Run("rlimits")
    endless = os.open("/dev/zero", os.O_RDONLY)
    host.collect(run, results_r, (endless, err_r), 2.0, 1 << 40)  # closes its three fds
    os.close(err_w)
    assert run.fault is None and run.records == [{"kind": "ready"}]
    assert len(drains) <= DRAIN_READS and run.output == bytes(host.OUTPUT_KEPT)
