"""Measure the system calls the sandbox's two processes make once confined.

The seccomp allowlist in verifiers/_sandbox/seccomp.py is this measurement: run HumanEval's
canonical solutions against their hidden tests, the project's own code tasks
(problems.codegen, every difficulty) against theirs, and a few honest programs that use the
standard library as a program may (time, randomness, temp files, big allocations, deep
recursion, output), under `strace -f`, with the filter
swapped for one that allows everything and marks the moment it is installed; then list, per
role (runner: the untrusted program's process; judge), every call made after that mark, with
the argument forms of the calls the filter inspects. Calls the filter allows only in some
forms are marked (the forms seen are listed: compare with the rules in syscall_filter), calls
it does not allow at all are flagged.

    python -m reports.studies.sandbox_syscalls [--problems 164] [--tasks 60]
                                               [--modes bwrap,unshare,rlimits]
"""

from __future__ import annotations

import collections
import glob
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from search.cli import command

REPO = Path(__file__).resolve().parents[2]
# Replaces the filter by an allow-all one, announced by a stat of a path naming the role.
PATCH = '''
def install_seccomp(libc, ctypes, role):
    os.path.exists(f"/tts-syscall-mark-{role}")
    return True
'''
WORKLOAD = r"""
EXTRA = {extra!r}
import sys, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, {repo!r})
from verifiers._sandbox import host
from verifiers import code
from problems import codegen
from problems.humaneval import humaneval_file, load_humaneval
original = host.source
host.source = lambda name: original(name) + ({patch!r} if name == "confine.py" else "")
runs = [(p.metadata["solution"], p.hidden_tests, p.entry_point)
        for p in load_humaneval(humaneval_file())[:{problems}]]
for difficulty in range(codegen.MIN_DIFFICULTY, codegen.MAX_DIFFICULTY + 1):
    for p in codegen.generate({tasks} // 6, seed=difficulty, difficulty=difficulty):
        runs.append((p.metadata["solution"], p.hidden_tests, p.entry_point))
for program, tests, writes in EXTRA:
    if {mode!r} != "rlimits" or not writes:
        runs.append((program, tests, "f"))
extra = dict(unisolated=code.rlimits_gaps())
failed = [i for i, (program, tests, entry) in enumerate(runs)
          if not code.run_tests(program, tests, entry_point=entry, isolation={mode!r},
                                timeout=20, **extra).passed_all]
print("FAILED", failed)
"""
# honest programs using the standard library as a program may: (source, tests, writes files)
EXTRA = [
    ("import time\ndef f():\n    time.sleep(0.001)\n"
     "    return [time.time() > 0, time.perf_counter() > 0, time.process_time() >= 0]",
     ["assert f() == [True] * 3"], False),
    ("import os, random, secrets\ndef f():\n    random.seed()\n"
     "    return len(os.urandom(8)) + len(secrets.token_bytes(4)) + (random.random() < 1)",
     ["assert f() == 13"], False),
    ("import os, tempfile\ndef f():\n    d = tempfile.mkdtemp()\n    p = os.path.join(d, 'x')\n"
     "    open(p, 'w').write('hi')\n    os.rename(p, p + '2')\n    os.chmod(p + '2', 0o600)\n"
     "    t = open(p + '2').read()\n    os.unlink(p + '2')\n    os.rmdir(d)\n    return t",
     ["assert f() == 'hi'"], True),
    ("def f():\n    b = bytearray(200 * 2**20)\n    n = len(b)\n    del b\n"
     "    return n + len([0] * 10**6)", ["assert f() == 200 * 2**20 + 10**6"], False),
    ("import sys\nsys.setrecursionlimit(10**5)\ndef g(n):\n    return 0 if n == 0 else 1 + g(n - 1)\n"
     "def f():\n    return g(20000)", ["assert f() == 20000"], False),
    ("import bisect, collections, datetime, decimal, fractions, functools, hashlib, heapq, "
     "itertools, json, math, os, re, statistics, string, resource\ndef f():\n"
     "    return [os.getcwd() != '', (os.cpu_count() or 1) > 0, len(os.listdir('.')) >= 0,\n"
     "            datetime.datetime.now().year > 2000, resource.getrlimit(resource.RLIMIT_AS)[0] > 0,\n"
     "            statistics.mean([1, 2]) == 1.5, os.path.exists('/usr')]",
     ["import math, random\nassert f() == [True] * 7 and math.isqrt(16) == 4"], False),
    ("import sys\nprint('x' * 100000)\nprint('e', file=sys.stderr)\ndef f():\n    return 1",
     ["assert f() == 1"], False),
]
CALL = re.compile(r"^(?:\[pid\s+\d+\]\s+)?([a-z_0-9]+)\((.*)")
# calls whose arguments the filter looks at: which argument forms were seen
FORMS = {"fcntl": 1, "ioctl": 1, "madvise": 2, "prlimit64": 0, "openat": 2, "mmap": 3,
         "prctl": 0, "kill": 0, "tgkill": 0, "getrandom": 2, "clock_nanosleep": 0,
         "sched_getaffinity": 0, "rt_sigprocmask": 0, "poll": 0, "mprotect": 2}


def _split(args: str) -> list[str]:
    """Top-level comma-separated arguments of a strace call line."""
    out, depth, cur = [], 0, ""
    for ch in args:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth < 0:
                break
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return [*out, cur.strip()]


def measure(mode: str, problems: int, tasks: int) -> tuple[dict, list[int]]:
    """{role: {call: Counter(argument form)}} over every process that marked itself."""
    with tempfile.TemporaryDirectory() as tmp:
        script = WORKLOAD.format(repo=str(REPO), patch=PATCH, problems=problems, tasks=tasks,
                                 mode=mode, extra=EXTRA)
        out = subprocess.run(["strace", "-ff", "-qq", "-s", "64", "-o", f"{tmp}/trace",
                              sys.executable, "-c", script], capture_output=True, text=True,
                             timeout=3000)
        failed = json.loads(out.stdout.split("FAILED", 1)[1]) if "FAILED" in out.stdout else [-1]
        seen: dict = collections.defaultdict(lambda: collections.defaultdict(collections.Counter))
        for path in glob.glob(f"{tmp}/trace.*"):
            role = None
            for line in Path(path).read_text(errors="replace").splitlines():
                if role is None:
                    mark = re.search(r"/tts-syscall-mark-([\w-]+)", line)
                    role = mark.group(1) if mark else None
                    continue
                m = CALL.match(line)
                if not m:
                    continue
                name, args = m.groups()
                form = ""
                if name in FORMS:
                    parts = _split(args)
                    form = parts[FORMS[name]] if FORMS[name] < len(parts) else ""
                seen[role][name][form] += 1
        return seen, failed


def main() -> None:
    parser = command("python -m reports.studies.sandbox_syscalls", (__doc__ or "").split("\n\n")[0])
    parser.add_argument("--problems", type=int, default=164)
    parser.add_argument("--tasks", type=int, default=60)
    parser.add_argument("--modes", default="bwrap,unshare,rlimits")
    args = parser.parse_args()
    if shutil.which("strace") is None:
        sys.exit("strace is not installed (apt-get install strace)")
    sys.path.insert(0, str(REPO))
    from verifiers.code import seccomp_allowlist

    union: dict = collections.defaultdict(lambda: collections.defaultdict(collections.Counter))
    for mode in args.modes.split(","):
        seen, failed = measure(mode, args.problems, args.tasks)
        print(f"{mode}: {args.problems} HumanEval + {args.tasks // 6 * 6} codegen + "
              f"{len(EXTRA)} stdlib runs (those that write files not under rlimits), "
              f"failed (index): {failed}")
        for role, calls in seen.items():
            for name, forms in calls.items():
                union[role][name].update(forms)
    for role, calls in sorted(union.items()):
        allowed, filtered = seccomp_allowlist(role)
        print(f"\n{role}: {len(calls)} distinct calls after the filter point")
        for name in sorted(calls):
            forms = calls[name]
            flag = ("" if name in allowed else "   (argument filter)" if name in filtered
                    else "   NOT ALLOWED")
            shown = ", ".join(f"{f} x{n}" for f, n in forms.most_common(8)) if name in FORMS else ""
            print(f"  {name:22} {sum(forms.values()):8}{flag}  {shown}")


if __name__ == "__main__":
    main()
