"""The trusted judge (marker: tts-sandbox-judge): run the tests against the sandboxed program.

`verifiers.code` starts it, outside the program's sandbox, through host.py's bootstrap:

    python -I -B [-S] -c BOOT PAYLOAD_FD REQUEST_FD RESPONSE_FD RESULT_FD PARENT_PID

The payload holds the tests (never sent to the program), the entry point and the limits. Each
test runs here, in a fresh namespace holding the program's names: a callable is a proxy that
sends its plain arguments to the program (REQUEST_FD) and returns the plain value that comes
back (RESPONSE_FD), decoded by wire.py into new objects of exact builtin types; a module
is this process's own import of it (top-level standard modules only); plain data is a copy. So the
judge never runs an object the program made, and the program never sees a test, an expected
value or a verdict: the most it can do is answer a call wrongly.

A call fails its test (even one that catches the exception) when the program's answer is not
plain data, when an argument is not, or when the program raised something a test must not see
as a normal exception (SystemExit, StopIteration: `map` would swallow it). A builtin exception
the program raised is re-raised here with its type and message. A call that times out, a
program that dies or breaks the protocol ends the run: the remaining tests are not run.

A test runs as Python runs it (its asserts raise, `and`/`or`/any()/all() short-circuit). No
test sees another's calls: the caller gives a run only tests whose calls cannot depend on a
verdict, and at most one test whose calls can, last (asserts.py). Stdin mode (`cases`): each
case's input is sent in turn, whatever the verdicts, and the output compared here. The
judge's own limits: its
address space, CPU time (RLIMIT_CPU past the run's clock), and what the program's answers may
cost it (wire.py: each frame's cost checked before parsing, the run's frames and cost capped).

The calls into the program (Channel, proxies, handles) are calls.py's, exec'd in front of this.
The results go to the parent as JSON lines on RESULT_FD: ready, program, one per test, end.
"""

import builtins
import os
import sys
import time

if "Channel" not in globals():  # read alone (linters): calls.py is exec'd in front of this
    from verifiers._sandbox.calls import CallFailed, Channel, Fatal, describe, proxy

_HIDDEN = frozenset({"antigravity", "this", "__hello__", "__phello__", "idlelib", "tkinter",
                     "turtle", "turtledemo", "test"})  # standard modules with effects on import
_OWN = "\0own"  # in fresh()'s namespace: the names it binds to the program


def _status_of(exc):
    """"memory" for the judge's own MemoryError or the program's (the exact type only: a
    program's subclass of MemoryError is its own error), "fail" for anything else."""
    own = getattr(exc, "tts_program_subclass", False)
    return "memory" if isinstance(exc, MemoryError) and not own else "fail"


def _names_in(code):
    """Every name the code (nested functions included) may look up as a global."""
    names, stack = set(), [code]
    while stack:
        code = stack.pop()
        names.update(code.co_names)
        stack.extend(c for c in code.co_consts if type(c) is type(code))
    return names


def _bindings(channel, names, entry_point, used):
    """Per test: a function building the program's names afresh (copies of plain values).
    Modules and values are bound only where some test names them (`used`)."""
    stdlib = getattr(sys, "stdlib_module_names", frozenset())
    callables, modules, values = {}, {}, {}
    # a program function named like a builtin is the one under test where the test says so:
    # the entry point, or, with none, where the tests call no other function of the program
    # (`assert max(1, 2) == 2`); elsewhere the name is the builtin the test means (its `abs`
    # in `abs(candidate(x) - y) < 1e-6`)
    plain_calls = {n for n, what in names.items() if what == "call" and n in used
                   and n not in vars(builtins)}
    for name, what in names.items():
        if type(name) is not str:
            continue
        if name in vars(builtins) and (entry_point is not None or plain_calls
                                       or name not in used or what != "call"):
            continue
        if what == "call":
            callables[name] = proxy(channel, name)
        elif name not in used:
            continue
        elif type(what) is dict and type(what.get("module")) is str:
            # top-level standard modules only (a submodule such as venv.__main__ runs code),
            # under their own names: which module the judge imports is the test's choice
            # (`math` means math), never the program's (`import xdrlib as math`)
            if what["module"] == name and name in stdlib and name not in _HIDDEN:
                try:
                    __import__(what["module"])
                    modules[name] = sys.modules[what["module"]]
                except Exception:
                    pass
        elif type(what) is dict and "value" in what:
            values[name] = what["value"]
    if entry_point is not None:  # always the program's: a NameError if it defines none
        callables[entry_point] = proxy(channel, entry_point)

    def fresh():
        ns = {"__name__": "__main__", "__builtins__": builtins, **modules, **callables,
              _OWN: {*callables, *values}}
        for name, tree in values.items():
            try:
                ns[name] = channel.wire["decode"](tree)
            except channel.wire["NotPlain"]:
                pass
        return ns

    return fresh


def main(config, wire, fds):
    """Run the tests and report (the bootstrap read the payload). fds: request, response,
    result, and the caller's pid. Ends the process: no teardown code runs after it."""
    try:
        _judge(config, wire, *fds)
    finally:
        os._exit(0)


def _judge(config, wire, request_fd, response_fd, result_fd, parent):
    def report(**record):  # one JSON line to the caller
        data = (wire["_dumps"](record) + "\n").encode()
        while data:
            data = data[os.write(result_fd, data):]

    try:
        _confine(config, parent)
    except BaseException as exc:
        sys.stderr.write(f"judge setup failed: {describe(exc)}\n")
        os._exit(70)
    channel = Channel(wire, request_fd, response_fd, config["timeout"], config["call_timeout"])
    compiled = []
    for i, source in enumerate(config["tests"]):
        try:
            compiled.append(compile(source, f"<test {i}>", "exec", dont_inherit=True))
        except BaseException as exc:  # a broken test fails alone
            compiled.append(describe(exc))
    try:
        ready = channel.receive(time.monotonic() + config["startup"], "before it started")
        channel.deadline = time.monotonic() + config["timeout"]
        report(kind="ready", layers=str(ready.get("ready")))
        loaded = channel.receive(channel.deadline, "while the program ran")
        status = loaded.get("loaded")
        report(kind="program", status=str(status), reason=str(loaded.get("reason", ""))[:600])
        if status != "ok":
            return report(kind="end", error=None, detail="")
    except Fatal as fatal:
        return report(kind="end", error=fatal.error, detail=fatal.detail)
    except (AttributeError, TypeError):
        return report(kind="end", error="tampered", detail="broken message from the program")
    if config["cases"] is not None:
        return _judge_cases(channel, config, report)
    used = set().union(*(_names_in(t) for t in compiled if not isinstance(t, str)))
    fresh = _bindings(channel, loaded.get("names") or {}, config["entry_point"], used)
    for i, test in enumerate(compiled):
        if isinstance(test, str):
            report(kind="test", index=i, status="fail", reason=f"test does not compile: {test}")
            continue
        channel.violations.clear()
        namespace = fresh()
        if not _names_in(test) & namespace.pop(_OWN):
            report(kind="test", index=i, status="fail",
                   reason="the test uses no name of the program (so it tests nothing of it)")
            continue
        try:  # as Python runs it: its asserts raise, its and/or/any/all short-circuit
            exec(test, namespace)
            status, reason = "pass", ""
        except BaseException as exc:
            status, reason = _status_of(exc), describe(exc)
        if channel.violations:  # even if the test caught the exception
            status, reason = "fail", channel.violations[0][:600]
        report(kind="test", index=i, status=status, reason=reason)
        if channel.fatal is not None:
            break
    sys.stdout.flush()
    sys.stderr.flush()
    fatal = channel.fatal
    report(kind="end", error=fatal and fatal.error, detail=fatal.detail if fatal else "")


def _normalised(text):
    """Output as judges of stdin/stdout problems compare it: its whitespace-separated tokens."""
    return text.split()


def _judge_cases(channel, config, report):
    """Stdin mode: each case's input goes to the program, which runs it as __main__; what it
    printed is compared here with the expected output (whitespace-normalised). Every case is
    sent whatever the verdicts before it: nothing the program sees depends on one."""
    wire, limit = channel.wire, config["case_timeout"]
    for i, (given, expected) in enumerate(config["cases"]):
        channel.call_timeout = limit
        try:
            answer = channel.exchange(wire["dumps"]({"stdin": given}), f"on case {i}")
            if type(answer) is not dict:
                raise CallFailed("broken answer")
            printed, error = answer.get("stdout"), answer.get("error")
            if "bad" in answer or type(printed) is not str:
                status, reason = "fail", str(answer.get("bad", "broken answer"))[:600]
            elif error is not None:
                status, reason = "fail", f"case {i}: {str(error)[:580]}"
            elif _normalised(printed) == _normalised(expected):
                status, reason = "pass", ""
            else:
                status, reason = "fail", f"case {i}: wrong output"
        except CallFailed as exc:
            status, reason = "fail", str(exc)[:600]
        report(kind="test", index=i, status=status, reason=reason)
        if channel.fatal is not None:
            break
    fatal = channel.fatal
    report(kind="end", error=fatal and fatal.error, detail=fatal.detail if fatal else "")


def _confine(config, parent):
    """Die with the parent, keep same-uid processes out of this one's memory and fds, limits,
    and the seccomp filter (no processes, sockets, signals to others...)."""
    import ctypes
    import resource

    helpers: dict = {"__name__": "sandbox_confine"}
    exec(config["os_source"], helpers)
    native = (ctypes.CDLL(None, use_errno=True), ctypes)
    helpers["die_with_parent"](*native, parent)
    helpers["undumpable"](*native)
    # CPU: it never runs longer than the run's clock (the caller kills it then); the limit
    # holds if it did. Its memory: the tests' own data, and one answer at a time
    # (wire.COST_MAX, wire.MESSAGE_MAX: a frame is refused before it is parsed)
    cpu = int(config["startup"] + config["timeout"]) + 2
    for which, soft, hard in ((resource.RLIMIT_AS, config["judge_memory"], config["judge_memory"]),
                              (resource.RLIMIT_CPU, cpu, cpu + 1), (resource.RLIMIT_CORE, 0, 0)):
        resource.setrlimit(which, (soft, hard))
    helpers["install_seccomp"](*native, "judge")
