"""verifiers.code: the unit-test sandbox.

Hostile programs (issues 4, 9 and 24) each get their own test, run in every isolation mode that
applies; each test snippet would pass only if the attack worked, so a pass means a hole. The
fixtures and helpers here are shared with tests/test_sandbox_*.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from verifiers.code import (
    Isolation,
    available_isolation,
    passes,
    rlimits_gaps,
    run_public_hidden,
    run_tests,
)

REPO = Path(__file__).resolve().parents[1]
SECRET = "tts-sandbox-secret-4242"
MARKER = "tts-sandbox-"  # tts-sandbox-runner, tts-sandbox-judge
_available: dict[Isolation, bool] = {}


def _mode_available(mode: Isolation) -> bool:
    if mode not in _available:
        _available[mode] = run_tests("x = 1", ["assert x == 1"], isolation=mode,
                                     unisolated=rlimits_gaps()).passed_all
    return _available[mode]


@pytest.fixture(params=["bwrap", "unshare", "rlimits"])
def mode(request) -> Isolation:
    if not _mode_available(request.param):
        pytest.skip(f"{request.param} isolation is not available here")
    return request.param


@pytest.fixture(scope="module")
def canary(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("canary")
    (root / "sub").mkdir()
    for name in ("a.txt", "sub/b.txt"):
        (root / name).write_text(f"canary {name}\n")
    (root / "test_solution.py").write_text("def test_solution():\n    assert False\n")
    return root


def _tree_hash(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(f"{path.relative_to(root)}:{path.stat().st_mode}".encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def hostile(mode: Isolation, program: str, tests: list[str], errors: set[str] | None = None,
            timeout: float = 2.0, **kwargs):
    """Run an attack; it must fail with a reason (and the expected run error, if given)."""
    report = run_tests(program, tests, isolation=mode, timeout=timeout, memory_mb=256,
                       unisolated=rlimits_gaps(), **kwargs)
    assert not report.passed_all and report.num_passed == 0, report
    assert all(r.reason for r in report.results), report
    assert errors is None or report.error in errors, report
    assert _sandbox_processes() == []  # nothing outlives its run
    return report


DECOY = r"""
import ctypes, json, os, sys
sys.path.insert(0, sys.argv[1])
from verifiers.code import run_tests
libc = ctypes.CDLL(None)
def state():
    return [sorted(os.sched_getaffinity(0)), os.sched_getscheduler(0),
            os.getpriority(os.PRIO_PROCESS, 0), libc.syscall(252, 1, 0)]  # ioprio_get
before = state()
program = sys.argv[2].replace("CALLER_PID", str(os.getpid()))
report = run_tests(program, json.loads(sys.argv[3]), isolation=sys.argv[4], timeout=5,
                   unisolated=__import__("verifiers.code").code.rlimits_gaps(),
                   memory_mb=256)
after = state()
print(json.dumps({"num_passed": report.num_passed, "error": report.error,
                  "isolation": report.isolation, "reasons": [r.reason for r in report.results],
                  "caller_unchanged": after == before, "state": [before, after]}))
"""


def decoy_caller(mode: Isolation, program: str, tests: list[str]) -> dict:
    """Run the program from a decoy caller process (CALLER_PID in the program becomes its
    pid): a program that escapes kills or changes the decoy, not pytest. The decoy must exit
    normally; its report comes back with whether its own scheduling state and TMPDIR (a fresh
    dir holding one canary file) are unchanged."""
    tmp = Path(tempfile.mkdtemp(prefix="decoy-tmp-"))
    (tmp / "canary.txt").write_text("canary\n")
    before = _tree_hash(tmp)
    try:
        done = subprocess.run([sys.executable, "-W", "ignore", "-c", DECOY, str(REPO), program,
                               json.dumps(tests), mode], capture_output=True, text=True,
                              timeout=120, env={**os.environ, "TMPDIR": str(tmp)})
        assert done.returncode == 0, f"the decoy caller died ({done.returncode}): {done.stderr}"
        result = json.loads(done.stdout.splitlines()[-1])
        result["tmpdir_unchanged"] = tmp.is_dir() and _tree_hash(tmp) == before
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def recorded_sessions():
    """The session ids of the processes run_tests starts meanwhile (each run: the judge and
    the sandbox, each in a session of its own). Patched by hand, not with monkeypatch: a
    test's own monkeypatch (its environment) must be undone before host_untouched checks."""
    from verifiers._sandbox import host

    sessions: list[int] = []
    popen = host._popen

    def recording_popen(*args, **kwargs):
        proc = popen(*args, **kwargs)
        sessions.append(proc.pid)  # start_new_session: its session and group id
        return proc

    host._popen = recording_popen
    try:
        yield sessions
    finally:
        host._popen = popen


@pytest.fixture(autouse=True)
def host_untouched(canary):
    """Every test leaves the canary dir and the test process's environment as they were, and
    no process of any run it started (the sandbox's and the judge's sessions), not even a
    zombie, is left behind."""
    before, env = _tree_hash(canary), _environment()
    with recorded_sessions() as sessions:
        yield
    assert _tree_hash(canary) == before
    assert _environment() == env
    assert _session_processes(sessions) == []


def _environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}


# ---------------------------------------------------------------- ordinary behaviour

ADD = "def add(a, b):\n    return a + b\n"


def test_correct_program_passes():
    report = run_tests(ADD, ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"], entry_point="add")
    assert report.passed_all and report.pass_rate == 1.0 and report.error is None
    assert [r.reason for r in report.results] == ["", ""]
    assert report.isolation.startswith(available_isolation())
    assert passes(ADD, ["assert add(2, 2) == 4"])


def test_wrong_program_fails_with_the_failing_test_identified():
    wrong = "def add(a, b):\n    return a - b\n"
    report = run_tests(wrong, ["assert add(0, 0) == 0", "assert add(1, 2) == 3, 'sum'",
                               "assert add(2, 0) == 2"])
    assert [r.passed for r in report.results] == [True, False, True]
    assert report.results[1].reason == "AssertionError: sum"
    assert report.pass_rate == pytest.approx(2 / 3) and not report.passed_all
    assert report.error is None and not passes(wrong, ["assert add(1, 2) == 3"])


def test_syntax_error_fails_every_test():
    report = run_tests("def add(a, b)\n    return a + b\n", ["assert add(1, 2) == 3"])
    assert report.error == "syntax_error" and "SyntaxError" in report.detail
    assert not report.results[0].passed and report.results[0].reason.startswith("not run")


def test_program_error_and_broken_test():
    assert run_tests("raise ValueError('boom')", ["pass"]).error == "program_error"
    report = run_tests(ADD, ["assert add(1, 1) == 2", "assert (", "add(1)"])
    assert [r.passed for r in report.results] == [True, False, False]
    assert "does not compile" in report.results[1].reason
    assert report.results[2].reason.startswith("TypeError")


def test_tests_get_fresh_namespaces_and_output_is_kept():
    report = run_tests("print('hello from the program')\nx = 1",
                       ["leak = x", "assert x and 'leak' in dir()"])
    assert [r.passed for r in report.results] == [True, False]
    assert "hello from the program" in report.output


def test_empty_or_misshapen_tests():
    assert not run_tests(ADD, []).passed_all and run_tests(ADD, []).pass_rate == 0.0
    with pytest.raises(TypeError):
        run_tests(ADD, "assert add(1, 2) == 3")


def test_public_vs_hidden_counts_a_false_positive():
    overfit = "def add(a, b):\n    return 3\n"
    public, hidden = run_public_hidden(overfit, ["assert add(1, 2) == 3"], ["assert add(2, 2) == 4"])
    assert public.passed_all and not hidden.passed_all


def test_memory_limit_is_the_parameter():
    program = "block = bytearray(200 * 2**20)\ndef size():\n    return len(block)"
    assert passes(program, ["assert size() == 200 * 2**20"], memory_mb=1024)
    assert run_tests(program, ["pass"], memory_mb=128).error == "memory"


def test_plain_returns_rule_and_its_opt_out():
    gen = "def evens(n):\n    return (i for i in range(0, n, 2))\n"
    report = run_tests(gen + "class P:\n    pass\ndef p():\n    return P()\n",
                       ["assert list(evens(5)) == [0, 2, 4]", "assert p() == p()"])
    assert report.results[0].passed  # an iterator crosses as one, over what it yields
    assert not report.results[1].passed  # two objects: two handles, each equal to itself only
    # converted to plain data on the program's side: a list, as the judge sees it
    lenient = run_tests(gen + "class I(int):\n    def __eq__(self, o):\n        return True\n"
                        "def one():\n    return I(1)\n",
                        ["assert list(evens(5)) == [0, 2, 4]", "assert type(evens(3)) is list",
                         "assert one() == 1 and type(one()) is int", "assert one() == 2"],
                        plain_returns=False)
    assert [r.passed for r in lenient.results] == [True, True, True, False]


# ---------------------------------------------------------------- hostile programs

HARNESS_ATTACK = """
import gc, os, sys
leaked = []
attempts = [lambda: sys._getframe(1).f_locals, lambda: gc.get_referrers(sys.modules),
            lambda: [o for o in gc.get_objects() if isinstance(o, bytes) and len(o) == 32],
            lambda: sys.settrace(print), lambda: sys.setprofile(print),
            lambda: (_ for _ in ()).gi_frame, lambda: sys._current_frames(),
            lambda: sys.addaudithook(print) or sys._getframe(1)]
for attempt in attempts:
    try:
        leaked.append(attempt())
    except Exception:
        pass
try:
    1 / 0
except ZeroDivisionError as exc:
    try:
        leaked.append(exc.__traceback__.tb_frame)
    except AttributeError:
        pass
import __main__
__main__.report = __main__.main = lambda *a: None
os.write = os._exit = lambda *a: None
def f():
    return 0
"""
FIND_TESTS = """
import os
seen = ''
for fd in range(64):
    try:
        os.set_blocking(fd, False)
        seen += os.read(fd, 1 << 20).decode(errors='replace')
    except OSError:
        pass
for name in os.listdir('.'):
    seen += open(name, errors='replace').read()
"""
ENV = """
import glob, os
found = str(dict(os.environ))
for path in glob.glob('/proc/*/environ'):
    try:
        found += open(path).read()
    except OSError:
        pass
"""
FILL = """
written = 0  # the two writable tmpfs hold 128 MiB in all; more means memory or disk is at risk
for folder in ('.', '/tmp', '/dev/shm', '/dev', '/', '/root', '/usr'):
    for i in range(16):
        if written >= 192 * 2**20:
            break
        try:
            with open(f'{folder}/fill{i}', 'wb') as f:
                for _ in range(16):
                    f.write(b'0' * 2**20)
                    written += 2**20
        except OSError:
            break
"""
# Patch the RNG the test draws its input from, then restore it inside the function under test.
RNG = ("import gc, random\nreal = random.Random.randrange\nfirst = lambda self, a, *rest: a\n"
       "def f(x):\n    random.Random.randrange = real\n    return 1\n")
DRAW = "import random\nx = random.randint(1, 10**9)\nassert f(x) == x"
F1, ANY = ["assert f() == 1", "assert f() == 2"], None
LOOP = "\nwhile True:\n    pass"
# (id, program, tests, acceptable run errors or None for any failure, needs a private filesystem).
# Each test passes only if the attack worked.
ATTACKS = [
    ("busy_loop", "x = 0" + LOOP, ["pass"], {"timeout"}, False),
    ("busy_loop_in_test", "def f():" + LOOP.replace("\n", "\n    "), ["f()"], {"timeout"}, False),
    ("sleep", "import time\ntime.sleep(60)", ["pass"], {"timeout"}, False),
    ("blocking_pipe_read", "import os\nr, w = os.pipe()\ndata = os.read(r, 1)",
     ["assert data"], {"program_error"}, False),  # pipes are not on the allowlist
    ("stdin", "import sys\ndata = sys.stdin.read()\nline = input()", ["assert data"],
     {"program_error"}, False),
    ("close_pipes_and_spin", "import os\nfor fd in range(64):\n    try:\n        os.close(fd)\n"
     "    except OSError:\n        pass" + LOOP, ["pass"], {"timeout", "exited"}, False),
    ("memory_bomb", "x = bytearray(8 * 1024**3)", ["pass"], {"memory"}, False),
    # (on a loaded machine the clock may stop these first: a failure with a reason all the same)
    ("memory_growing", "xs = []\nwhile True:\n    xs.append(' ' * 2**20)", ["pass"],
     {"memory", "timeout"}, False),
    ("exponential_string", "s = 'ab'\nwhile True:\n    s = s + s", ["pass"],
     {"memory", "timeout"}, False),
    ("gigabytes_stdout", "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)", ["pass"],
     {"output_limit"}, False),
    ("gigabytes_stderr", "import sys\nwhile True:\n    sys.stderr.write('x' * 65536)", ["pass"],
     {"output_limit"}, False),
    ("fork_bomb", "import os\nwhile True:\n    os.fork()", ["pass"], {"program_error"}, False),
    ("subprocess", "import subprocess\nrc = subprocess.run(['true']).returncode",
     ["assert rc == 0"], {"program_error"}, False),
    ("os_system", "import os\nrc = os.system('touch CANARY/pwned')", ["assert rc == 0"],
     None, False),  # os.system returns -1: it cannot fork
    ("multiprocessing", "import multiprocessing as mp\np = mp.Process(target=print)\np.start()\n"
     "p.join()\nrc = p.exitcode", ["assert rc == 0"], {"program_error"}, False),
    ("os_popen", "import os\nout = os.popen('echo pwned').read()", ["assert 'pwned' in out"],
     {"program_error"}, False),
    ("posix_spawn", "import os\npid = os.posix_spawn('/bin/true', ['true'], {})\n"
     "rc = os.waitpid(pid, 0)[1]", ["assert rc == 0"], {"program_error"}, False),
    ("exec", "import os, sys\nos.execv(sys.executable, ['python', '-c', 'print(1)'])", ["pass"],
     {"program_error"}, False),
    ("thread", "import threading\nthreading.Thread(target=print).start()", ["pass"],
     {"program_error"}, False),
    ("kill_test_process", "import os\nos.kill(TEST_PID, 9)", ["pass"], {"program_error"}, False),
    ("sigterm_ignored", "import signal\ntry:\n    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
     "except OSError:\n    pass" + LOOP, ["pass"], {"timeout"}, False),
    ("sigterm_handler", "import signal\ntry:\n    signal.signal(signal.SIGTERM, lambda *a: None)\n"
     "except OSError:\n    pass" + LOOP, ["pass"], {"timeout"}, False),
    ("edit_the_test_file", "with open('CANARY/test_solution.py', 'w') as f:\n"
     "    edited = f.write('def test_solution():\\n    pass\\n')", ["assert edited"],
     {"program_error"}, True),  # the canary's test file: hashed before and after
    ("write_outside", "open('CANARY/pwned', 'w').write('x')\nopen('REPO/PWNED', 'w').write('x')",
     ["pass"], {"program_error"}, True),
    ("delete_outside", "import os, shutil\nexisted = os.path.exists('CANARY')\n"
     "for root in ('CANARY', 'REPO', '/usr/bin'):\n    shutil.rmtree(root, ignore_errors=True)",
     ["import os\nassert existed and not os.path.exists('CANARY')"], None, True),
    ("read_project_files", "source = open('REPO/verifiers/code.py').read()",
     ["assert 'def run_tests' in source"], None, True),
    ("fill_the_disk", FILL, ["assert written >= 192 * 2**20"], None, True),
    ("environment_variables", ENV, [f"assert {SECRET!r} in found"], None, True),
    ("find_hidden_tests", FIND_TESTS, ["assert 'HIDDEN-TEST-42' in seen"], None, False),
    ("dns", "import socket\naddr = socket.getaddrinfo('localhost', 80)", ["assert addr"],
     {"program_error"}, False),
    ("dns_public_name", "import socket\naddr = socket.gethostbyname('pypi.org')",
     ["assert addr"], {"program_error"}, False),
    ("os_exit_before_tests", "import os\nos._exit(0)", F1, {"exited"}, False),
    ("sys_exit_before_tests", "import sys\nsys.exit(0)", F1, {"program_error"}, False),
    ("os_exit_in_test", "import os\ndef f():\n    os._exit(0)", F1, {"exited"}, False),
    ("sys_exit_in_test", "import sys\ndef f():\n    sys.exit(0)", F1, ANY, False),
    ("os_exit_in_del", "import os\nclass D:\n    def __del__(self):\n        os._exit(0)\n"
     "def f():\n    D()\n    return 0", F1, {"exited"}, False),
    ("systemexit_in_del", "class D:\n    def __del__(self):\n        raise SystemExit(0)\n"
     "def f():\n    D()\n    return 0", F1, ANY, False),
    ("override_builtin_abs", "import builtins\nbuiltins.abs = lambda x: 0\ndef f(x):\n"
     "    return 99", ["assert abs(f(3) - 9) < 1e-9"], None, False),
    ("override_assertion_error", "import builtins\nbuiltins.AssertionError = Exception\n"
     "AssertionError = None\ndef f():\n    return 1", ["assert f() == 2"], None, False),
    ("shadow_builtin", "def len(x):\n    return 3\ndef f():\n    return [1]",
     ["assert len(f()) == 3"], None, False),
    ("always_equal", "class Eq:\n    def __eq__(self, other):\n        return True\n"
     "    __hash__ = None\ndef f():\n    return Eq()", ["assert f() == 2"], None, False),
    ("int_subclass_equal", "class I(int):\n    def __eq__(self, other):\n        return True\n"
     "    __hash__ = None\ndef f():\n    return I(0)", ["assert f() == 5"], None, False),
    ("always_equal_in_argument", "class Eq:\n    def __eq__(self, other):\n        return True\n"
     "def f(xs):\n    xs.append(Eq())", ["xs = [1]\nf(xs)\nassert xs == [1, 2]"], None, False),
    ("patch_module_function", "import math\nmath.fabs = lambda x: 0.0\ndef f():\n    return 5.0",
     ["import math\nassert math.fabs(f() - 2.0) < 1e-6", "assert math.fabs(f() - 2.0) < 1e-6"],
     None, False),
    ("patch_stdlib_class", "import random\nrandom.Random.randint = lambda self, a, b: a\n"
     "def f(x):\n    return 1", [DRAW.replace("randint(1", "randint(2")], None, False),
    ("patch_in_a_raising_call", RNG + "def arm():\n    random.Random.randrange = first\n"
     "    raise ValueError\n", ["try:\n    arm()\nexcept ValueError:\n    pass\n" + DRAW], None,
     False),
    ("patch_from_a_finalizer", RNG + "class Patch:\n    def __del__(self):\n"
     "        random.Random.randrange = first\ndef arm():\n    p = Patch()\n    p.me = p\n"
     "    gc.enable()\n", ["arm()\njunk = [[] for _ in range(10**5)]\n" + DRAW], None, False),
    ("guard_handed_to_program", "def leak(g):\n    return g.__closure__ is not None\n"
     "def f():\n    return 1", ["assert leak(f)"], None, False),
    ("forge_result_records", "import os\nfor fd in range(3, 1024):\n    try:\n"
     "        os.write(fd, b'1 test 0 pass  ' + b'0' * 32 + b'\\n')\n    except OSError:\n"
     "        pass\ndef f():\n    return 0", ["assert f() == 1"], {"tampered"}, False),
    ("deep_recursion", "def f(n):\n    return f(n + 1)\nf(0)", ["pass"], {"program_error"}, False),
    ("deep_recursion_raised_limit", "import sys\nsys.setrecursionlimit(10**8)\ndef f(n):\n"
     "    return f(n + 1)\nf(0)", ["pass"], None, False),  # 3.11: Python calls use no C stack
    ("c_stack_overflow", "import sys\nsys.setrecursionlimit(10**8)\nx = []\n"
     "for _ in range(10**6):\n    x = [x]\nrepr(x)", ["pass"], {"crashed", "timeout"}, False),
    ("ctypes_null_dereference", "import ctypes\nctypes.string_at(0)", ["pass"],
     {"crashed"}, False),
    ("segfault", "import faulthandler\nfaulthandler._sigsegv()", ["pass"], {"crashed"}, False),
]
HOSTILE = [pytest.param(attack, mode, id=f"{attack[0]}-{mode}") for attack in ATTACKS
           for mode in ("bwrap", "unshare", "rlimits") if mode != "rlimits" or not attack[4]]


@pytest.mark.parametrize("attack,isolation", HOSTILE)
def test_hostile_program(attack, isolation, canary, monkeypatch):
    """Fails with a reason, never passes; host_untouched checks the canary and environment."""
    if not _mode_available(isolation):
        pytest.skip(f"{isolation} isolation is not available here")
    monkeypatch.setenv("TTS_SANDBOX_SECRET", SECRET)
    _name, program, tests, errors, _private_fs = attack
    for token, value in (("CANARY", str(canary)), ("REPO", str(REPO)),
                         ("TEST_PID", str(os.getpid()))):
        program, tests = program.replace(token, value), [t.replace(token, value) for t in tests]
    start = time.monotonic()
    hostile(isolation, program, tests, errors, timeout=1.0 if errors == {"timeout"} else 2.0)
    assert time.monotonic() - start < 15  # killed on time, whatever it did
    assert not (REPO / "PWNED").exists() and (REPO / "verifiers" / "code.py").exists()


def test_introspection_reaches_nothing_that_decides(mode):
    """Frames, gc, tracing and patched os functions are the program's own business now: no
    test, key or verdict is in its process. `leaked` holds frames: not plain, so not bound."""
    report = hostile(mode, HARNESS_ATTACK, ["assert leaked", "assert f() == 1"])
    assert [r.reason for r in report.results] == [
        "the test uses no name of the program (so it tests nothing of it)", "AssertionError"]


def test_sockets_do_not_reach_the_host(mode):
    with socket.create_server(("127.0.0.1", 0)) as server:
        program = (f"import socket\nwith socket.create_connection(('127.0.0.1', "
                   f"{server.getsockname()[1]}), timeout=1) as s:\n    s.sendall(b'x')")
        hostile(mode, program, ["pass"], {"program_error"})
        server.settimeout(0.2)
        with pytest.raises(socket.timeout):
            server.accept()


# ---------------------------------------------------------------- nothing outlives its run

def _sandbox_processes() -> list[int]:
    """Pids whose command line carries the runner's marker and this process's pid."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if entry.name.isdigit() and any(MARKER.encode() in a for a in argv) and (
                str(os.getpid()).encode() in argv):
            found.append(int(entry.name))
    return found


def _session_processes(sessions: list[int]) -> list[int]:
    """Pids, zombies included, whose session or process group is one of `sessions` (from
    /proc/PID/stat). A zombie whose parent died is the host's pid 1's to reap, which may never
    happen: it keeps its session id, so it is found here."""
    found, wanted = [], set(sessions)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        # after "(comm)": state ppid pgrp session ...
        if {int(fields[2]), int(fields[3])} & wanted:
            found.append(int(entry.name))
    return found


def test_zz_no_sandbox_process_outlives_its_run():
    """Runs last in this file: every run above has been reaped, inner processes included."""
    assert _sandbox_processes() == []
