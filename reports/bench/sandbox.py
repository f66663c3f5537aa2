"""Code sandbox benchmark: today's sandbox against an earlier one, read from git.

Per HumanEval problem (its canonical solution against its hidden test, `check(candidate)`),
in each isolation mode, both implementations run back to back, one run at a time, the order
alternating from problem to problem so that neither always runs on a warmer machine. Printed
per mode: median and mean seconds per problem, old and new, their ratio and the difference in
ms. Then the cost of one call: a test that makes `--calls` calls into the program (each a
round trip over pipes now, a guarded in-process call before).

The old implementation is not kept in the tree: its code.py and _sandbox_*.py (the _sandbox/
package in later commits) are read from git (`git show REF:verifiers/...`, REF defaulting to
OLD_REF; 1c296a1 is the last single-process sandbox) into a temporary package. Usage:

    python -m reports.bench.sandbox [--problems 164] [--modes bwrap,unshare,rlimits]
        [--calls 2000] [--old-ref 75a1442]
"""

from __future__ import annotations

import importlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from problems.humaneval import humaneval_file, load_humaneval
from search.cli import command
from verifiers import code as new

REPO = Path(__file__).resolve().parents[2]
OLD_REF = "75a1442"  # the last deny-list filter, rlimits without refusal


def load_old(ref: str, into: Path) -> ModuleType:
    """verifiers/code.py as of `ref`, importable as sandbox_old.code."""
    package = into / "sandbox_old"
    package.mkdir()
    (package / "__init__.py").write_text("")
    listed = subprocess.run(["git", "ls-tree", "-r", "--name-only", ref, "verifiers/"],
                            cwd=REPO, check=True, capture_output=True, text=True).stdout.split()
    for path in listed:
        name = path.removeprefix("verifiers/")
        # the sandbox's parts: _sandbox_*.py in older commits, the _sandbox/ package in newer
        if name == "code.py" or name.startswith(("_sandbox_", "_sandbox/")):
            text = subprocess.run(["git", "show", f"{ref}:{path}"], cwd=REPO, check=True,
                                  capture_output=True, text=True).stdout
            # its own helper modules, not today's
            (package / name).parent.mkdir(exist_ok=True)
            (package / name).write_text(text.replace("from verifiers import", "from sandbox_old import")
                                        .replace("verifiers._sandbox", "sandbox_old._sandbox"))
    sys.path.insert(0, str(into))
    return importlib.import_module("sandbox_old.code")


def _time(run: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    report = run()
    return time.perf_counter() - start, report


def _opts(impl: ModuleType) -> dict:
    """rlimits needs its gaps named now; the old implementation takes no such knob."""
    return {"unisolated": impl.rlimits_gaps()} if hasattr(impl, "rlimits_gaps") else {}


def per_problem(old: ModuleType, mode: str, problems: list) -> dict[str, list[float]]:
    seconds: dict[str, list[float]] = {"old": [], "new": []}
    failed: dict[str, list[str]] = {"old": [], "new": []}
    for i, p in enumerate(problems):
        program, tests = p.metadata["solution"], list(p.hidden_tests)
        runs = {name: (lambda impl=impl, program=program, tests=tests, entry=p.entry_point:
                       impl.run_tests(program, tests, isolation=mode, entry_point=entry,
                                      timeout=10, **_opts(impl)))
                for name, impl in (("old", old), ("new", new))}
        for name in (("old", "new") if i % 2 == 0 else ("new", "old")):
            took, report = _time(runs[name])
            seconds[name].append(took)
            if not report.passed_all:  # type: ignore[attr-defined]
                failed[name].append(p.id)
    for name, ids in failed.items():
        if ids:
            print(f"  {mode}: {name} failed {len(ids)} canonical solutions: {ids[:5]}")
    return seconds


def per_call(old: ModuleType, mode: str, calls: int) -> dict[str, float]:
    """Seconds per call into the program, from a run with `calls` calls minus one with none."""
    program = "def f(x):\n    return x\n"
    many = [f"for i in range({calls}):\n    assert f(i) == i"]
    none = ["assert True"]
    out = {}
    for name, impl in (("old", old), ("new", new)):
        best = {}
        for label, tests in (("many", many), ("none", none)):
            best[label] = min(_time(lambda impl=impl, tests=tests: impl.run_tests(
                program, tests, isolation=mode, entry_point="f", timeout=60, **_opts(impl)))[0]
                              for _ in range(3))
        out[name] = (best["many"] - best["none"]) / calls
    return out


def main() -> None:
    parser = command("python -m reports.bench.sandbox", (__doc__ or "").split("\n\n")[0])
    parser.add_argument("--problems", type=int, default=164)
    parser.add_argument("--modes", default="bwrap,unshare,rlimits")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--old-ref", default=OLD_REF)
    args = parser.parse_args()
    warnings.simplefilter("ignore", RuntimeWarning)  # rlimits' "insecure" notice, both sides
    problems = load_humaneval(humaneval_file())[: args.problems]
    with tempfile.TemporaryDirectory() as tmp:
        old = load_old(args.old_ref, Path(tmp))
        load = os.getloadavg()[0]
        print(f"HumanEval canonical solutions vs hidden tests, {len(problems)} problems, one run "
              f"at a time; {os.cpu_count()} CPUs, load average {load:.1f} at start")
        print(f"{'mode':8} {'old median':>10} {'new median':>10} {'ratio':>6} {'old mean':>9} "
              f"{'new mean':>9} {'new - old':>10}   (seconds per problem)")
        for mode in args.modes.split(","):
            s = per_problem(old, mode, problems)
            med = {k: statistics.median(v) for k, v in s.items()}
            mean = {k: statistics.fmean(v) for k, v in s.items()}
            print(f"{mode:8} {med['old']:10.3f} {med['new']:10.3f} {med['new'] / med['old']:5.2f}x "
                  f"{mean['old']:9.3f} {mean['new']:9.3f} {1000 * (mean['new'] - mean['old']):8.1f}ms")
        print(f"\none call into the program ({args.calls} calls in one test, minus an empty test)")
        for mode in args.modes.split(","):
            c = per_call(old, mode, args.calls)
            print(f"{mode:8} old {1e6 * c['old']:7.1f} us   new {1e6 * c['new']:7.1f} us   "
                  f"{c['new'] / max(c['old'], 1e-9):5.1f}x")
        print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
