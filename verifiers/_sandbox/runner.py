"""The untrusted side of the sandbox (marker: tts-sandbox-runner): run the program, answer calls.

`verifiers.code` starts it, under bubblewrap or alone, through host.py's bootstrap:

    python -I -S -B -c BOOT PAYLOAD_FD REQUEST_FD RESPONSE_FD INFO_FD PARENT_PID

1. the bootstrap reads the payload (the program, limits, the sources of this file,
   confine.py and wire.py) from an fd, closes it and calls `main`. The tests are not
   in it: they never enter this process;
2. confine: "unshare" builds the namespaces and new root bwrap would have built (and moves this
   code into a pid namespace, two forks down); every mode then drops capabilities, installs
   the seccomp filter and the resource limits, and under "rlimits" Landlock where it exists;
3. say "ready", run the program, say how it went and which names it defines;
4. answer calls: each request names a global of the program and carries plain arguments; the
   answer is the plain return value (and the new contents of list/dict/set arguments), the
   builtin exception it raised, or why its result is not plain data.

Nothing here is a security boundary. The program may rewrite any of it (frames, bytecode,
ctypes): it can then only make its own answers wrong, because the judge, another process,
checks every test on the plain data it gets back. The OS layers of step 2 keep the program
from touching anything else.
"""

import builtins
import os
import sys

_write, _exit = os.write, os._exit
_VALUE_MAX = 1 << 16  # bytes: larger plain globals are not offered to the tests
SIGPENDING = 16  # RLIMIT_SIGPENDING of the program's process
PROGRAM_MODULE = "solution"  # the program's module name when the tests call its functions


def _send(wire, fd, message):
    try:
        frame = wire["dumps"](message)
    except Exception as exc:  # too large
        frame = wire["dumps"]({"bad": _describe(exc)})
    wire["write_frame"](fd, frame)


def _describe(exc):
    """'Type: message', capped; runs program code (__str__), so it only shapes this side's
    answers."""
    try:
        name, message = type(exc).__name__, str(exc)
        text = f"{name}: {message}" if message else name
        return text[:600]
    except BaseException:
        return "<unprintable exception>"


def _flush(streams):
    for stream in streams:
        try:  # noqa: SIM105 - contextlib would be one more import at every start
            stream.flush()
        except BaseException:
            pass


def _builtin_base(exc):
    """The nearest builtin class of an exception (what the judge re-raises) and whether the
    exception's own class is another (a subclass the program defined)."""
    for cls in type(exc).__mro__:
        if cls.__module__ == "builtins" and vars(builtins).get(cls.__name__) is cls:
            return cls.__name__, cls is not type(exc)
    return "Exception", True


def _setup(config, fds):
    """Step 2. Returns the isolation layers in force, for the report."""
    import ctypes
    import resource

    helpers: dict = {"__name__": "sandbox_confine"}
    exec(config["os_source"], helpers)
    native = (ctypes.CDLL(None, use_errno=True), ctypes)
    mode, layers = config["mode"], [config["mode"]]
    helpers["die_with_parent"](*native, config["parent"])
    if mode == "bwrap":  # pid 1 of bwrap's pid namespace (--as-pid-1)
        helpers["fork_init"](*native)
    if mode == "bwrap" and config["bwrap_nests"]:
        helpers["finish_bwrap"](*native, config["layout"], config["disk_bytes"],
                                config["disk_inodes"])
    elif mode == "unshare":
        helpers["enter_unshare"](*native, config["layout"], config["disk_bytes"],
                                  config["disk_inodes"], fds["info"])
    elif mode == "rlimits":
        helpers["drop_capabilities"](*native)
        if helpers["landlock"](*native, config["readable"], [os.getcwd()]):
            layers.append("landlock")
    # stdin mode: a memfd (made while it still may be) for fd 0 to read each case from
    config["stdin_fd"] = os.memfd_create("stdin", os.MFD_CLOEXEC) if config["stdin_mode"] else -1
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    cpu_limit = int(cpu.ru_utime + cpu.ru_stime + config["timeout"]) + 1
    limits = {resource.RLIMIT_CPU: cpu_limit, resource.RLIMIT_AS: config["memory_bytes"],
              resource.RLIMIT_FSIZE: config["disk_bytes"], resource.RLIMIT_NOFILE: 64,
              resource.RLIMIT_CORE: 0, resource.RLIMIT_MEMLOCK: 0,
              # real-time signals it may queue (to itself: kill reaches no other process),
              # which count against the uid's quota while they are pending
              resource.RLIMIT_SIGPENDING: SIGPENDING}
    if os.uname().machine != "x86_64":  # no filter there: RLIMIT_NPROC, for a non-root uid
        limits[resource.RLIMIT_NPROC] = 0
    for which, value in limits.items():
        hard = value + 1 if which == resource.RLIMIT_CPU else value  # SIGXCPU, then SIGKILL
        resource.setrlimit(which, (value, hard))
    # read-only where no tmpfs capped in inodes is there to write to
    capped = mode == "unshare" or (mode == "bwrap" and config["bwrap_nests"])
    role = "runner" if capped else "runner-readonly"
    seccomp = helpers["install_seccomp"](*native, role)  # last: it denies setrlimit
    layers += ["pidns"] * (mode != "rlimits") + ["seccomp"] * seccomp
    return ",".join(layers + ["rlimits"] * (mode != "rlimits"))


def _manifest(namespace, wire):
    """What the judge may bind for the tests: every global of the program that is callable
    (reached through calls), a module (the judge imports its own copy) or plain data (copied).
    A name the program took from builtins unchanged is not offered (the test has its own)."""
    names = {}
    for name, value in list(namespace.items()):
        if name.startswith("__") or value is getattr(builtins, name, None):
            continue
        if type(value).__name__ == "module":
            names[name] = {"module": str(getattr(value, "__name__", ""))}
        elif callable(value):
            names[name] = "call"
        elif hasattr(type(value), "__next__"):
            continue  # an iterator: copying it would consume the program's own
        else:
            try:
                names[name] = {"value": wire["encode"](value)}
                if len(wire["dumps"](names[name])) > _VALUE_MAX:
                    del names[name]
            except Exception:
                names.pop(name, None)  # not plain: the tests do without it
    return names


_MUTABLE = (list, dict, set)


def _snapshot(obj):
    """What a list, dict or set holds, to tell after a call whether the call changed it."""
    return list(obj) if type(obj) is list else list(obj.items()) if type(obj) is dict else set(obj)


def _changed(obj, before):
    if type(obj) is set:
        return obj != before
    now = _snapshot(obj)
    return len(now) != len(before) or any(
        (a is not b) if type(obj) is list else (a[0] is not b[0] or a[1] is not b[1])
        for a, b in zip(now, before))


def _contents(wire, obj, lenient, refs):
    """The tree of the new contents of argument container `obj` (see judge.Channel.unpack);
    a stand-in takes the place the judge's decoded copy takes in the message's refs."""
    refs.objects.append([])
    encode = wire["encode"]
    if type(obj) is list:
        return [encode(item, lenient, 1, refs) for item in obj]
    if type(obj) is dict:
        return {"d": [[encode(k, lenient, 1, refs), encode(v, lenient, 1, refs)]
                      for k, v in obj.items()]}
    return {"s": [encode(item, lenient, 1, refs) for item in obj]}


_OPS = {"bool": bool, "len": len, "iter": list, "getitem": lambda obj, key: obj[key]}


def _raised(wire, exc):
    """The answer for an exception: its nearest builtin class, message and args."""
    try:
        message = str(exc)[:600]
    except BaseException:
        message = "<unprintable exception>"
    base, subclass = _builtin_base(exc)
    answer = {"raise": [base, message], "subclass": subclass}
    try:  # noqa: SIM105 - contextlib would be one more import at every start
        answer["args"] = wire["encode"](list(exc.args))
    except BaseException:  # args that are not plain data: the message alone
        pass
    return answer


class _Kept:
    """The objects this process keeps for the judge (its handles name them by number)."""

    def __init__(self, wire, namespace):
        self.objects, self.numbers, self.not_plain = [], {}, wire["NotPlain"]
        self.namespace = namespace

    def function(self, name):
        """The program's global function `name` (a test passed the judge's proxy of it)."""
        if not callable(self.namespace.get(name)):
            raise self.not_plain(f"no function {name!r} in the program")
        return self.namespace[name]

    def keep(self, obj):
        number = self.numbers.get(id(obj))
        if number is None:
            number = self.numbers[id(obj)] = len(self.objects)
            self.objects.append(obj)  # alive for the run: its id is never reused
        return number

    def get(self, number):
        if not 0 <= number < len(self.objects):
            raise self.not_plain("no such object")
        return self.objects[number]


def _answer(namespace, request, wire, lenient, kept):
    """The answer to one call request (a JSON-ready dict). The request's arguments arrive
    with their shared references; the answer refers to them where it holds them, and gives
    the new contents of each argument list, dict or set the call changed. A request with a
    handle calls the kept object, or (attr) reads its attribute."""
    refs = wire["Refs"]()
    refs.handle, refs.function = kept.get, kept.function
    name = request.get("call")
    pair = wire["decode"](request["args"], 0, refs)
    args, kwargs = pair
    op = request.get("op")
    if name is None:
        target, attr = kept.get(request["handle"]), request.get("attr")
    elif name not in namespace:
        return {"raise": ["NameError", f"name {name!r} is not defined"],
                "args": [f"name {name!r} is not defined"]}
    else:
        target, attr = namespace[name], None
    outer = {id(pair), id(args), id(kwargs)}
    watched = [(k, obj, _snapshot(obj)) for k, obj in enumerate(refs.objects)
               if type(obj) in _MUTABLE and id(obj) not in outer]
    try:
        if op is not None:  # what a plain value of that kind gives: the test's own ops
            result = _OPS[op](target, *args)
        else:
            result = target(*args, **kwargs) if attr is None else getattr(target, str(attr))
    except BaseException as exc:
        return _raised(wire, exc)
    try:
        out = refs  # the answer counts on from the arguments' containers
        out.keep = None if lenient else kept.keep
        answer = {"ok": wire["encode"](result, lenient, 0, out)}
        answer["mutated"] = [[k, _contents(wire, obj, lenient, out)]
                             for k, obj, before in watched if _changed(obj, before)]
        return answer
    except BaseException as exc:  # NotPlain, RecursionError, a raising __iter__ ...
        return {"bad": f"{name or 'an object'}() returned {_describe(exc)}"}


def _run_main(code, data, stdin_fd):
    """Stdin mode: run the program as __main__ on `data` (fd 0 and sys.stdin read it);
    what it printed to sys.stdout, and why it failed (None if it did not)."""
    import io

    raw = data.encode("utf-8", "surrogateescape")
    if stdin_fd >= 0:  # fd 0 reads the case too (`open(0).read()`)
        os.ftruncate(stdin_fd, 0)
        os.lseek(stdin_fd, 0, 0)
        view = memoryview(raw)
        while view:
            view = view[os.write(stdin_fd, view):]
        os.lseek(stdin_fd, 0, 0)
        os.dup2(stdin_fd, 0, inheritable=False)
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 - the program's
    else:
        sys.stdin = io.TextIOWrapper(io.BytesIO(raw), encoding="utf-8")
    out = io.BytesIO()
    sys.stdout = io.TextIOWrapper(out, encoding="utf-8", errors="backslashreplace")
    module = type(sys)("__main__")
    module.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = module
    error = None
    try:
        exec(code, module.__dict__)
    except SystemExit as exc:
        if exc.code not in (None, 0):
            error = f"SystemExit: {str(exc.code)[:500]}"
    except BaseException as exc:
        error = _describe(exc)
    _flush((sys.stdout,))
    return out.getvalue().decode("utf-8", "replace"), error


def main(config, wire, fds):
    """Steps 2-4 (the bootstrap did step 1). fds: request, response, info (-1: none)."""
    request_fd, response_fd, info_fd, _parent = fds
    streams = (sys.stdout, sys.stderr)
    try:
        layers = _setup(config, {"info": info_fd})
    except BaseException as exc:
        sys.stderr.write(f"sandbox setup failed: {_describe(exc)}\n")
        sys.stderr.flush()
        _exit(70)
    if info_fd >= 0 and config["mode"] != "unshare":
        os.close(info_fd)
    _send(wire, response_fd, {"ready": layers})

    try:
        code = compile(config["program"], "<program>", "exec", dont_inherit=True)
    except BaseException as exc:
        _send(wire, response_fd, {"loaded": "syntax", "reason": _describe(exc)})
        _exit(0)
    requests = wire["Reader"](request_fd)
    if config["stdin_mode"]:  # one request per case: its stdin; the answer, what it printed
        _send(wire, response_fd, {"loaded": "ok", "reason": "", "names": {}})
        real_stdout = sys.stdout
        while True:
            try:
                request = wire["loads"](requests.frame())
            except EOFError:
                _exit(0)
            printed, error = _run_main(code, str(request.get("stdin", "")),
                                       config["stdin_fd"])
            sys.stdout = real_stdout
            _flush(streams)
            _send(wire, response_fd, {"stdout": printed, "error": error})
    # a module of its own name: `if __name__ == "__main__":` blocks do not run when functions
    # are called; `import __main__` still finds it
    user_main = type(sys)(PROGRAM_MODULE)
    namespace = vars(user_main)
    namespace["__builtins__"] = builtins
    sys.modules["__main__"] = sys.modules[PROGRAM_MODULE] = user_main
    try:
        exec(code, namespace)
        status, reason = "ok", ""
    except BaseException as exc:
        status = "memory" if type(exc) is MemoryError else "error"  # not its own subclass
        reason = _describe(exc)
    _flush(streams)
    names = _manifest(namespace, wire) if status == "ok" else {}
    _send(wire, response_fd, {"loaded": status, "reason": reason, "names": names})
    if status != "ok":
        _exit(0)
    kept = _Kept(wire, namespace)
    while True:
        try:
            request = wire["loads"](requests.frame())
        except EOFError:
            _exit(0)  # the judge is done; skip teardown, so no program __del__ or atexit runs
        answer = _answer(namespace, request, wire, config["lenient"], kept)
        _flush(streams)  # the output so far reaches the caller before the answer
        _send(wire, response_fd, answer)
