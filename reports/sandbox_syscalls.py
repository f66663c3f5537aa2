"""Measure the system calls the sandbox's two processes make once confined (issue 31).

The seccomp allowlist in verifiers/_sandbox_os.py is this measurement: run HumanEval's
canonical solutions against their hidden tests, and the project's own code tasks
(problems.codegen, every difficulty) against theirs, under `strace -f`, with the filter
swapped for one that allows everything and marks the moment it is installed; then list, per
role (runner: the untrusted program's process; judge), every call made after that mark, with
the argument forms of the calls the filter inspects. Calls outside ALLOWED (or denied by
their argument filter) are flagged.

    python -m reports.sandbox_syscalls [--problems 164] [--tasks 60] [--modes bwrap,unshare,rlimits]
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Replaces the filter by an allow-all one, announced by a stat of a path naming the role.
PATCH = '''
def install_seccomp(libc, ctypes, role):
    os.path.exists(f"/tts-syscall-mark-{role}")
    return True
'''
WORKLOAD = r"""
import sys, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, {repo!r})
from verifiers import _sandbox_host as host
from verifiers import code
from problems import codegen
from problems.humaneval import humaneval_file, load_humaneval
original = host.source
host.source = lambda name: original(name) + ({patch!r} if name == "_sandbox_os.py" else "")
runs = [(p.metadata["solution"], p.hidden_tests, p.entry_point)
        for p in load_humaneval(humaneval_file())[:{problems}]]
for difficulty in range(codegen.MIN_DIFFICULTY, codegen.MAX_DIFFICULTY + 1):
    for p in codegen.generate({tasks} // 6, seed=difficulty, difficulty=difficulty):
        runs.append((p.metadata["solution"], p.hidden_tests, p.entry_point))
extra = dict(unisolated=code.rlimits_gaps()) if {mode!r} == "rlimits" else {{}}
failed = [i for i, (program, tests, entry) in enumerate(runs)
          if not code.run_tests(program, tests, entry_point=entry, isolation={mode!r},
                                timeout=20, **extra).passed_all]
print("FAILED", failed)
"""
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
                                 mode=mode)
        out = subprocess.run(["strace", "-ff", "-qq", "-s", "64", "-o", f"{tmp}/trace",
                              sys.executable, "-c", script], capture_output=True, text=True,
                             timeout=3000)
        failed = json.loads(out.stdout.split("FAILED", 1)[1]) if "FAILED" in out.stdout else [-1]
        seen: dict = collections.defaultdict(lambda: collections.defaultdict(collections.Counter))
        for path in glob.glob(f"{tmp}/trace.*"):
            role = None
            for line in Path(path).read_text(errors="replace").splitlines():
                if role is None:
                    mark = re.search(r"/tts-syscall-mark-(\w+)", line)
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
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--problems", type=int, default=164)
    parser.add_argument("--tasks", type=int, default=60)
    parser.add_argument("--modes", default="bwrap,unshare,rlimits")
    args = parser.parse_args()
    if shutil.which("strace") is None:
        sys.exit("strace is not installed (apt-get install strace)")
    sys.path.insert(0, str(REPO))
    from verifiers import _sandbox_os as sos

    union: dict = collections.defaultdict(lambda: collections.defaultdict(collections.Counter))
    for mode in args.modes.split(","):
        seen, failed = measure(mode, args.problems, args.tasks)
        print(f"{mode}: {args.problems} HumanEval + {args.tasks // 6 * 6} codegen runs, "
              f"failed: {failed}")
        for role, calls in seen.items():
            for name, forms in calls.items():
                union[role][name].update(forms)
    names = {nr: name for name, nr in sos.SYSCALLS.items()}
    for role, calls in sorted(union.items()):
        allowed = {names[nr] for nr in sos.allowed(role)}
        print(f"\n{role}: {len(calls)} distinct calls after the filter point")
        for name in sorted(calls):
            forms = calls[name]
            flag = "" if name in allowed else "   NOT ALLOWED"
            shown = ", ".join(f"{f} x{n}" for f, n in forms.most_common(8)) if name in FORMS else ""
            print(f"  {name:22} {sum(forms.values()):8}{flag}  {shown}")


if __name__ == "__main__":
    main()
