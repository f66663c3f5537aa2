"""Soak the code sandbox: N judged runs of a mixed honest/hostile stream, and what they left.

Before and after the stream it takes a census of what a run could leave behind: processes
(the sandbox's markers), files (the rlimits work dirs in the temp dir), SysV IPC objects,
the machine's AIO quota in use, this process's open fds and its memory. Every difference
is printed; a clean sandbox prints none.

    python -m reports.bench.soak_sandbox [--runs 1000] [--isolation auto]
"""

from __future__ import annotations

import glob
import os
import resource
import subprocess
import sys
import tempfile
import time

from search.cli import command
from verifiers.code import rlimits_gaps, run_tests

ADD = ["assert add(1, 2) == 3", "assert add(-4, 4) == 0"]
# (program, whether it is honest): the hostile ones try to keep something past their run
STREAM = [
    ("def add(a, b):\n    return a + b\n", True),
    ("def add(a, b):\n    return a - b\n", False),
    ("import os\nos.makedirs('d/' * 40, exist_ok=True)\n"
     "open('/tmp/keep', 'w').write('x')\ndef add(a, b):\n    return a + b + 1\n", False),
    ("import ctypes\nlibc = ctypes.CDLL(None)\nlibc.syscall.restype = ctypes.c_long\n"
     "held = [libc.syscall(29, 0x7431 + i, 1 << 20, 0o1666) for i in range(4)]  # shmget\n"
     "ctx = ctypes.c_ulong(0)\nheld.append(libc.syscall(206, 4096, ctypes.byref(ctx)))  # io_setup\n"
     "held.append(libc.syscall(319, b'm', 0))  # memfd_create\n"
     "def add(a, b):\n    return held\n", False),
    ("import os\ndef add(a, b):\n    while True:\n        os.write(1, b'x' * 65536)\n", False),
    ("def add(a, b):\n    while True:\n        pass\n", False),
    ("import os, fcntl\nos.set_blocking(1, False)\ndef add(a, b):\n    return a + b\n", True),
    ("import os, itertools\ndef add(a, b):\n    for i in itertools.count():  # negative dentries\n"
     "        try:\n            os.stat(f'/usr/lib/missing-{i}')\n        except OSError:\n"
     "            pass\n", False),
]


def census() -> dict[str, int]:
    """Counts of what runs could leave behind, machine-wide where the kernel says."""
    def lines(path: str) -> int:
        try:
            with open(path) as f:
                return max(0, len(f.readlines()) - 1)  # minus the header
        except OSError:
            return -1

    ps = subprocess.run(["ps", "-eo", "pid=,ppid=,args="], capture_output=True, text=True)
    rows = [line.split(None, 2) for line in ps.stdout.splitlines() if line.strip()]
    children: dict[str, list[str]] = {}
    for pid, ppid, *_ in rows:
        children.setdefault(ppid, []).append(pid)
    ours, stack = set(), [str(os.getpid())]
    while stack:  # this process's descendants
        for child in children.get(stack.pop(), []):
            ours.add(child)
            stack.append(child)
    marked = [(pid, ppid) for pid, ppid, *args in rows if "tts-sandbox-" in "".join(args)]
    with open("/proc/sys/fs/aio-nr") as f:
        aio = int(f.read())
    zombies = subprocess.run(["ps", "-o", "stat=", "--ppid", str(os.getpid())],
                             capture_output=True, text=True).stdout.split()
    return {"sandbox processes": sum(pid in ours for pid, _ in marked) - (ps.returncode != 0),
            "zombie children": sum(state.startswith("Z") for state in zombies),
            "orphaned (anyone's)": sum(ppid == "1" for _, ppid in marked),
            "work dirs": len(glob.glob(os.path.join(tempfile.gettempdir(), "tts-sandbox-*"))),
            "sysv shm": lines("/proc/sysvipc/shm"), "sysv msg": lines("/proc/sysvipc/msg"),
            "sysv sem": lines("/proc/sysvipc/sem"), "aio in use": aio,
            "open fds": len(os.listdir("/proc/self/fd")),
            "max rss MiB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}


def soak(runs: int, isolation: str = "auto") -> tuple[dict, dict, dict[str, int]]:
    """(census before, census after, outcomes): honest runs must pass, hostile ones fail.
    The runs get a temp dir of their own, so that the census of work dirs is theirs."""
    own = tempfile.mkdtemp(prefix="soak-")
    saved, tempfile.tempdir = tempfile.tempdir, own
    try:
        return _soak(runs, isolation)
    finally:
        tempfile.tempdir = saved
        os.rmdir(own)  # fails loudly if a run left something in it


def _soak(runs: int, isolation: str) -> tuple[dict, dict, dict[str, int]]:
    before = census()
    outcomes = {"honest passed": 0, "honest failed": 0, "hostile passed": 0, "hostile failed": 0}
    for i in range(runs):
        program, honest = STREAM[i % len(STREAM)]
        report = run_tests(program, ADD, entry_point="add", timeout=1.0, memory_mb=256,
                           isolation=isolation, unisolated=rlimits_gaps())  # type: ignore[arg-type]
        kind = "honest" if honest else "hostile"
        outcomes[f"{kind} {'passed' if report.passed_all else 'failed'}"] += 1
    time.sleep(0.2)  # the kernel's accounting of the last run's exit
    return before, census(), outcomes


def main() -> None:
    parser = command("python -m reports.bench.soak_sandbox", (__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--isolation", default="auto")
    args = parser.parse_args()
    start = time.monotonic()
    before, after, outcomes = soak(args.runs, args.isolation)
    took = time.monotonic() - start
    print(f"{args.runs} runs, isolation={args.isolation}, {took:.0f}s "
          f"({1000 * took / args.runs:.0f} ms per run); {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}")
    print("  " + ", ".join(f"{k}: {v}" for k, v in outcomes.items()))
    print(f"  {'':22} {'before':>8} {'after':>8}")
    for key in before:
        flag = "" if before[key] == after[key] or key == "max rss MiB" else "   LEFT BEHIND"
        print(f"  {key:22} {before[key]:8} {after[key]:8}{flag}")
    if any(before[k] != after[k] for k in before if k != "max rss MiB"):
        sys.exit(1)


if __name__ == "__main__":
    main()
