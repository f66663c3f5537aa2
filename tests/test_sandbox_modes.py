"""verifiers.code's isolation modes and limits: what the program sees in each mode, "auto"
refusing to fall back to "rlimits", rlimits' private work dir, and the per-call time limit."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
import test_sandbox
from test_sandbox import REPO, _mode_available

from verifiers import code
from verifiers._sandbox import files, host
from verifiers.code import SandboxUnavailable, run_tests

# the shared fixtures (pytest finds fixtures by their names in the test's module)
canary = test_sandbox.canary
host_untouched = test_sandbox.host_untouched


LOOK = """
import os

def look():
    seen = {"pid": os.getpid(), "ppid": os.getppid(), "cwd": os.getcwd()}
    for path in ("/", "/root", "/work", "/tmp", "/proc", "/home", "REPO", "DATA", "HOME"):
        try:
            seen[path] = sorted(os.listdir(path))
        except OSError as exc:
            seen[path] = type(exc).__name__
    return seen
"""


@pytest.mark.parametrize("isolation", ["bwrap", "unshare"])
def test_namespaced_modes_show_only_the_system_and_the_interpreter(isolation):
    """The same root under bwrap and unshare: no /proc (bwrap: an empty one), an empty /work as
    the working dir, no home dirs, checkout or data; the program is pid 2, the child of the
    namespace's init.
    The checks run in the judge, on the plain dict the program returns."""
    if not _mode_available(isolation):
        pytest.skip(f"{isolation} isolation is not available here")
    home, data = str(Path.home()), str(REPO.parent / "shared")
    program = LOOK.replace("REPO", str(REPO)).replace("DATA", data).replace("HOME", home)
    python_home = Path(os.path.realpath(sys.executable)).parents[1]
    inside = python_home.relative_to(home).parts[0] if python_home.is_relative_to(home) else None
    checks = [
        "assert (seen['pid'], seen['ppid'], seen['cwd'], seen['/work']) == (2, 1, '/work', [])",
        f"assert seen['/home'] == seen[{str(REPO)!r}] == 'FileNotFoundError'",
        "assert seen['/proc'] in ('FileNotFoundError', [])  # bwrap: covered by an empty tmpfs",
        f"assert seen[{data!r}] == 'FileNotFoundError'",
        "assert set(seen['/']) <= {'bin', 'dev', 'etc', 'lib', 'lib32', 'lib64', 'root', 'sbin',"
        " 'tmp', 'usr', 'work', 'proc'}",
        # of the interpreter's home, only the dir that leads to it
        f"assert {inside is None} or seen[{home!r}] == [{inside!r}], seen[{home!r}]",
    ]
    report = run_tests(program, [f"seen = look()\n{check}" for check in checks],
                       entry_point="look", isolation=isolation, unisolated=code.rlimits_gaps())
    assert report.passed_all, report


def test_auto_refuses_to_fall_back_to_rlimits(monkeypatch):
    """With no namespace sandbox working, "auto" raises and says how to get one; nothing
    runs."""

    def broken(*args, **kwargs):
        raise OSError("no namespaces here")

    monkeypatch.setattr(code, "_resolved", [])
    monkeypatch.setattr(host, "start", broken)
    with pytest.raises(SandboxUnavailable, match="bubblewrap") as refused:
        run_tests("x = 1", ["pass"])
    assert "unprivileged_userns_clone" in str(refused.value)
    assert "isolation='rlimits'" in str(refused.value)
    with pytest.raises(SandboxUnavailable):  # remembered, not probed again
        code.available_isolation()
    monkeypatch.undo()


def test_rlimits_refuses_unless_its_gaps_are_named():
    """isolation="rlimits" runs only when the caller names what it does not isolate here;
    the refusal names it. Landlock's presence decides "file_reads"."""
    gaps = code.rlimits_gaps()
    assert "host_pids" in gaps and ("file_reads" in gaps) == (files.landlock_abi() == 0)
    for partial in ((), tuple(sorted(gaps))[1:]):
        with pytest.raises(SandboxUnavailable, match="host_pids|host_caches|file_reads") as refused:
            run_tests("x = 1", ["assert x == 1"], isolation="rlimits", unisolated=partial)
        assert "unisolated=" in str(refused.value)
    assert run_tests("x = 1", ["assert x == 1"], isolation="rlimits", unisolated=gaps).passed_all
    with pytest.raises(ValueError, match="site_packages"):
        run_tests("x = 1", ["pass"], isolation="rlimits", unisolated=gaps, site_packages=True)


def test_rlimits_work_dir_has_a_private_parent_removed_after_the_run(tmp_path, monkeypatch):
    """`..` of the program's work dir is the run's own 0700 dir (so deleting it harms nobody),
    and both are gone after the run."""
    import stat
    import tempfile

    from verifiers._sandbox.files import private_workdir

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    root, work = private_workdir()
    assert os.listdir(root) == ["work"] and Path(work).parent == Path(root)
    assert {stat.S_IMODE(os.stat(p).st_mode) for p in (root, work)} == {0o700}
    os.rmdir(work)
    os.rmdir(root)
    program = "import os\ndef where():\n    return os.getcwd()"
    report = run_tests(program, ["raise AssertionError(where())"], entry_point="where",
                       isolation="rlimits", unisolated=code.rlimits_gaps())
    cwd = Path(report.results[0].reason.removeprefix("AssertionError: "))
    assert cwd.name == "work" and cwd.parent.parent == tmp_path, report
    assert cwd.parent.name.startswith("tts-sandbox-")
    assert list(tmp_path.iterdir()) == []  # the run's dirs are gone


def test_call_timeout_ends_the_run_at_the_slow_call():
    program = "import time\ndef f(x):\n    time.sleep(x)\n    return x"
    start = time.monotonic()
    report = run_tests(program, ["assert f(0) == 0", "assert f(5) == 5", "assert f(0) == 0"],
                       entry_point="f", timeout=20, call_timeout=0.5)
    assert time.monotonic() - start < 4
    assert [r.passed for r in report.results] == [True, False, False]
    assert report.error == "timeout" and "call time limit of 0.5s" in report.results[1].reason
    assert report.results[2].reason.startswith("not run: timeout")
    whole = run_tests(program, ["assert f(0) == 0", "assert f(5) == 5"], entry_point="f",
                      timeout=0.5)
    assert whole.error == "timeout" and "time limit of 0.5s" in whole.results[1].reason
