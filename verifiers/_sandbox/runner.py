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
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    cpu_limit = int(cpu.ru_utime + cpu.ru_stime + config["timeout"]) + 1
    limits = {resource.RLIMIT_CPU: cpu_limit, resource.RLIMIT_AS: config["memory_bytes"],
              resource.RLIMIT_FSIZE: config["disk_bytes"], resource.RLIMIT_NOFILE: 64,
              resource.RLIMIT_CORE: 0, resource.RLIMIT_MEMLOCK: 0}
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
    (reached through calls), a module (the judge imports its own copy) or plain data (copied)."""
    names = {}
    for name, value in list(namespace.items()):
        if name.startswith("__"):
            continue
        if type(value).__name__ == "module":
            names[name] = {"module": str(getattr(value, "__name__", ""))}
        elif callable(value):
            names[name] = "call"
        else:
            try:
                names[name] = {"value": wire["encode"](value)}
                if len(wire["dumps"](names[name])) > _VALUE_MAX:
                    del names[name]
            except Exception:
                names.pop(name, None)  # not plain: the tests do without it
    return names


def _answer(namespace, request, wire, lenient):
    """The answer to one call request (a JSON-ready dict)."""
    decode, encode = wire["decode"], wire["encode"]
    name = request["call"]
    args, kwargs = decode(request["args"]), decode(request["kwargs"])
    if name not in namespace:
        return {"raise": ["NameError", f"name {name!r} is not defined"]}
    try:
        result = namespace[name](*args, **kwargs)
    except BaseException as exc:
        try:
            message = str(exc)[:600]
        except BaseException:
            message = "<unprintable exception>"
        base, subclass = _builtin_base(exc)
        return {"raise": [base, message], "subclass": subclass}
    try:
        mutated = [[i, encode(a, lenient)] for i, a in enumerate(args)
                   if type(a) in (list, dict, set)]
        mutated += [[k, encode(a, lenient)] for k, a in kwargs.items()
                    if type(a) in (list, dict, set)]
        return {"ok": encode(result, lenient), "mutated": mutated}
    except BaseException as exc:  # NotPlain, RecursionError, a raising __iter__ ...
        return {"bad": f"{name}() returned {_describe(exc)}"}


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

    user_main = type(sys)("__main__")  # `import __main__` in the program finds its own module
    namespace = vars(user_main)
    namespace["__builtins__"] = builtins
    sys.modules["__main__"] = user_main
    try:
        code = compile(config["program"], "<program>", "exec", dont_inherit=True)
    except BaseException as exc:
        _send(wire, response_fd, {"loaded": "syntax", "reason": _describe(exc)})
        _exit(0)
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
    requests = wire["Reader"](request_fd)
    while True:
        try:
            request = wire["loads"](requests.frame())
        except EOFError:
            _exit(0)  # the judge is done; skip teardown, so no program __del__ or atexit runs
        answer = _answer(namespace, request, wire, config["lenient"])
        _flush(streams)  # the output so far reaches the caller before the answer
        _send(wire, response_fd, answer)
