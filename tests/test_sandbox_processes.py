"""verifiers.code leaves nothing behind: however a run ends, in every mode, no process of it is
left running or unreaped (zombies included); and the listings that check this can fail."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import test_sandbox
from test_sandbox import MARKER, _sandbox_processes, _session_processes, recorded_sessions

from verifiers.code import rlimits_gaps, run_tests

# the shared fixtures (pytest finds fixtures by their names in the test's module)
canary = test_sandbox.canary
host_untouched = test_sandbox.host_untouched
mode = test_sandbox.mode




def test_session_listing_sees_a_live_session_and_a_zombie():
    """The session check can fail: a sleeping process in a new session is found, then its
    zombie (killed, not yet reaped), then nothing once it is reaped."""
    decoy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                             start_new_session=True)
    try:
        assert _session_processes([decoy.pid]) == [decoy.pid]
        os.kill(decoy.pid, signal.SIGKILL)
        os.waitid(os.P_PID, decoy.pid, os.WEXITED | os.WNOWAIT)  # dead, not reaped
        assert _session_processes([decoy.pid]) == [decoy.pid]
    finally:
        os.kill(decoy.pid, signal.SIGKILL)
        decoy.wait()
    assert _session_processes([decoy.pid]) == []


def test_process_listing_sees_a_live_sandbox_process():
    decoy = subprocess.Popen([sys.executable, "-c", f"# {MARKER}\nimport time; time.sleep(30)",
                              str(os.getpid())])
    try:  # /proc/PID/cmdline is briefly empty right after exec
        deadline = time.monotonic() + 10
        while decoy.pid not in _sandbox_processes() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert decoy.pid in _sandbox_processes()
    finally:
        os.kill(decoy.pid, signal.SIGKILL)
        decoy.wait()
    assert decoy.pid not in _sandbox_processes()


ENDINGS = {
    "completes": ("def f():\n    return 1", ["assert f() == 1"]),
    "exits_in_a_call": ("import os\ndef f():\n    os._exit(3)", ["f()", "f()"]),
    "crashes_in_a_call": ("import faulthandler\ndef f():\n    faulthandler._sigsegv()", ["f()"]),
    "hangs_in_a_call": ("def f():\n    while True:\n        pass", ["f()"]),
    "closes_its_pipes": ("import os\nfor fd in range(3, 64):\n    try:\n        os.close(fd)\n"
                         "    except OSError:\n        pass\nwhile True:\n    pass", ["pass"]),
    "leaves_its_session": ("import os, time\nos.setsid()\ntime.sleep(60)", ["pass"]),
    "syntax_error": ("def f(:", ["pass"]),
}


@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_no_process_or_zombie_outlives_a_run(ending, mode):
    """However a run ends, every process it started is gone and reaped when run_tests
    returns: nothing left in its sessions (zombies included, wherever they were reparented),
    no runner or judge process of this process."""
    with recorded_sessions() as sessions:
        program, tests = ENDINGS[ending]
        report = run_tests(program, tests, isolation=mode, timeout=1.0,
                           unisolated=rlimits_gaps())
    assert not report.passed_all or ending == "completes"
    assert len(sessions) == 2  # the judge and the sandbox
    assert _session_processes(sessions) == [] and _sandbox_processes() == []
