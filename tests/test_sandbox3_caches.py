"""No channel across runs through host caches, and no host effect beyond the stated bounds:
hostile programs that flood or probe the page cache, dentries, access times and the host's
cache counters, in every mode. Each is a wrong program (no run passes), and the test process
measures the host around it: negative dentries, the residency of host files outside the
image, the access times of the image. Under rlimits (which names "host_caches" among its
gaps) the bounds are what that mode says it does not isolate: the test checks it says so."""

from __future__ import annotations

import ctypes
import mmap
import os

import pytest
import test_sandbox

from verifiers._sandbox import image
from verifiers.code import rlimits_gaps, run_tests

canary = test_sandbox.canary
host_untouched = test_sandbox.host_untouched
mode = test_sandbox.mode

NEGATIVE_DENTRIES_MAX = 5_000  # the host's own activity in a few seconds stays far below
# the flood: 162k-262k from 5 s of stat() when lookups reached the host's ext4


def negative_dentries() -> int:
    with open("/proc/sys/fs/dentry-state") as f:
        return int(f.read().split()[4])


def resident_pages(path: str) -> int:
    """Pages of `path` in the page cache (mincore on a shared read-only mapping), from the
    test process."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    size = os.path.getsize(path)
    if size == 0:
        return 0
    pages = -(-size // mmap.PAGESIZE)
    fd = os.open(path, os.O_RDONLY)
    try:
        address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert address not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
        vec = (ctypes.c_ubyte * pages)()
        try:
            assert libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(size), vec) == 0
        finally:
            libc.munmap(ctypes.c_void_p(address), ctypes.c_size_t(size))
        return sum(v & 1 for v in vec)
    finally:
        os.close(fd)


def evict(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def host_only_files(count: int = 12) -> list[str]:
    """Host files the old layout let a run read (under /usr) that the image does not hold."""
    root = image.image_root()
    out = []
    for top in ("/usr/lib/x86_64-linux-gnu", "/usr/share/perl5", "/usr/lib/python3/dist-packages"):
        for path, _dirs, files in os.walk(top):
            for name in files:
                full = os.path.join(path, name)
                if (os.path.isfile(full) and not os.path.islink(full)
                        and os.path.getsize(full) > 8192
                        and not (root and os.path.exists(root + full))):
                    out.append(full)
                if len(out) >= count:
                    return out
    return out


def image_times() -> dict[str, int]:
    root = image.image_root()
    assert root is not None
    out = {}
    for path, dirs, files in os.walk(root):
        for name in [*dirs, *files, ""]:
            full = os.path.join(path, name)
            out[full] = os.lstat(full).st_atime_ns
    return out


WRONG_TEST = ["assert f(2) == 4"]
HOSTILE = {
    # 3 s of stat() on missing names everywhere it can reach: negative dentries
    "stat_flood": '''import os, time
def f(x):
    n, end = 0, time.monotonic() + 3
    while time.monotonic() < end:
        for top in ("/usr/lib", "/usr", "/", "/tmp", "/work", "/lib", "/root", "/etc", "/dev"):
            try:
                os.stat(f"{top}/tts-missing-{n}")
            except OSError:
                pass
            n += 1
    print("lookups", n)
    return 0
''',
    # read everything readable, again and again, for 3 s (hundreds of MiB)
    "read_flood": '''import itertools, os, time
def f(x):
    total, end = 0, time.monotonic() + 3
    while time.monotonic() < end:
        for path, dirs, files in itertools.chain([("", [], PROBES)], *map(os.walk, (
                "/usr/lib", "/usr", "/root", "/work"))):
            for name in files:
                try:
                    with open(os.path.join(path, name), "rb") as h:
                        while time.monotonic() < end and (chunk := h.read(1 << 20)):
                            total += len(chunk)
                except OSError:
                    pass
                if time.monotonic() > end:
                    break
    print("read", total >> 20, "MiB")
    return 0
''',
    # map every readable file and touch each page: faults bring pages in
    "fault_everything": '''import itertools, mmap, os, time
def f(x):
    touched, end = 0, time.monotonic() + 3
    for path, dirs, files in itertools.chain([("", [], PROBES)], *map(os.walk, (
            "/usr/lib", "/usr", "/root"))):
        for name in files:
            try:
                with open(os.path.join(path, name), "rb") as h:
                    m = mmap.mmap(h.fileno(), 0, prot=mmap.PROT_READ)
                    for i in range(0, len(m), mmap.PAGESIZE):
                        touched += m[i]
                    m.close()
            except (OSError, ValueError):
                pass
        if time.monotonic() > end:
            break
    return 0
''',
    # list every dir and stat every entry (directory atimes, inode cache)
    "walk_and_stat": '''import os
def f(x):
    n = 0
    for path, dirs, files in os.walk("/"):
        for name in dirs + files:
            try:
                os.stat(os.path.join(path, name))
                n += 1
            except OSError:
                pass
    return n * 0
''',
    # the host's cache counters: the read side of a channel through any host cache
    "host_counters": '''import os
def f(x):
    seen = {}
    for path in ("/proc/meminfo", "/proc/sys/fs/dentry-state", "/proc/self/mountinfo",
                 "/sys/fs/cgroup/memory.stat", "/proc/vmstat", "/proc/slabinfo"):
        try:
            seen[path] = len(open(path).read())
        except OSError as exc:
            seen[path] = exc.errno
    try:
        seen["/dev/shm"] = os.listdir("/dev/shm")
    except OSError as exc:
        seen["/dev/shm"] = exc.errno
    print(seen)
    return 4 if all(type(v) is int and v > 100 for v in seen.values()) else 0
''',
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_host_caches_stay_as_they_were(name, mode):
    """bwrap, unshare: nothing moves. rlimits (the image's interpreter, Landlock on the image):
    no page cache or access time moves; its lookups reach the host, as its gaps say."""
    probes = host_only_files()
    assert probes, "no host file outside the image to probe"
    for path in probes:
        evict(path)
    times = image_times()
    negative = negative_dentries()
    program = HOSTILE[name].replace("PROBES", repr(probes))  # the writer's chosen files
    report = run_tests(program, WRONG_TEST, entry_point="f", isolation=mode, timeout=15,
                       unisolated=rlimits_gaps())
    grown = negative_dentries() - negative
    assert not report.passed_all, report
    expected = ("host_dentries", "host_metadata", "host_pids") if mode == "rlimits" else ()
    assert report.gaps == expected, report
    if mode != "rlimits":
        assert grown < NEGATIVE_DENTRIES_MAX, (grown, report.output)
    assert {p: resident_pages(p) for p in probes if resident_pages(p)} == {}
    assert image_times() == times  # no access time moved


def test_the_image_is_all_in_memory_and_read_only():
    """Every file of the image is resident (a tmpfs) and no run can write it."""
    root = image.image_root()
    assert root is not None
    sizes = {}
    for path, _dirs, files in os.walk(root):
        for name in files:
            full = os.path.join(path, name)
            if not os.path.islink(full) and os.path.getsize(full):
                sizes[full] = (resident_pages(full), -(-os.path.getsize(full) // mmap.PAGESIZE))
    assert sizes and {p: s for p, s in sizes.items() if s[0] != s[1]} == {}
    program = ("import os\ndef f(path):\n    try:\n        open(path, 'w')\n"
               "    except OSError as exc:\n        return exc.errno\n    return 0\n")
    report = run_tests(program, [f"assert f({p!r}) != 0" for p in ("/usr/x", "/etc/x", "/x")],
                       entry_point="f")
    assert report.passed_all, report


def test_without_an_image_the_modes_say_what_they_leave_open(monkeypatch):
    """Where no image can be made (no tmpfs at /dev/shm), bwrap and unshare bind the host's
    dirs and report "host_caches" among their gaps; rlimits names it too."""
    from verifiers._sandbox import host

    monkeypatch.setattr(host, "image_root", lambda: None)
    report = run_tests("x = 1", ["assert x == 1"])
    assert report.passed_all and report.gaps == ("host_caches",)
    assert "host_caches" in rlimits_gaps() and "host_dentries" not in rlimits_gaps()


def test_no_image_from_an_incomplete_library_list(monkeypatch):
    """Where ldd lists nothing (absent, or a static binary it cannot read), no image is made:
    an image without libc would start no interpreter."""
    import subprocess

    monkeypatch.setattr(image.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(
        a, 0, stdout="", stderr=""))
    image._built.cache_clear()
    try:
        assert image.image_root() is None
    finally:
        monkeypatch.undo()
        image._built.cache_clear()
    assert image.image_root() is not None
