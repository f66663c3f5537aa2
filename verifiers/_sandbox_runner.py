"""Trusted harness that runs inside the sandbox process (marker: tts-sandbox-runner).

`verifiers.code` starts it as `python -I -S -B -c <this source> PAYLOAD_FD RESULT_FD PARENT_PID`
(under bubblewrap, or alone). Everything before step 5 runs before any untrusted code:

1. read the payload (program, tests, limits, per-run MAC key) from an fd and close it, so the
   program can read neither the hidden tests nor the key from a file, argv or the environment;
2. `unshare` mode only: build the namespaces and read-only mounts bwrap would have built; then
   the seccomp filter and resource limits (`_sandbox_os.py`, sent along in the payload);
3. snapshot builtins and a few stdlib modules, then install an audit hook (irremovable) that
   blocks frame/gc introspection, ctypes and process creation at the Python level;
4. compile the tests; report "ready";
5. run the program, then each test in a fresh namespace, reporting one MAC'd record per test
   over RESULT_FD. A record exists only if the harness itself got there: exiting early, crashing
   or being killed leaves records missing, and the parent counts missing records as failures.

From step 5 on, the harness calls only function objects captured earlier (never module
attributes) and resolves builtins through a private copy, so patching `os`, `builtins` or this
module cannot change what it reports. The MAC key lives only in `main`'s frame, which the audit
hook keeps out of reach (no sys._getframe, tb_frame, gc.get_objects, settrace, ctypes).
"""

import builtins

# Functions defined below look builtins up in this private copy, not in the live module that
# the program may patch (e.g. `builtins.type = ...`).
globals()["__builtins__"] = dict(vars(builtins))

import gc  # noqa: E402 - must come after the builtins swap above
import os  # noqa: E402
import sys  # noqa: E402
import types  # noqa: E402
from _blake2 import blake2b as _blake2b  # noqa: E402 - hashlib's C type, cheaper to import

_write, _exit, _close = os.write, os._exit, os.close
_gc_disable, _gc_enable = gc.disable, gc.enable
_FunctionType, _ModuleType = types.FunctionType, types.ModuleType
_real_import = builtins.__import__
_modules = sys.modules  # the interpreter's own dict, even if the program rebinds sys.modules

# Modules that tests commonly use: imported before the program runs, handed to tests as private
# copies, and checked for tampering. Modules the program imports later are not protected.
PROTECTED_MODULES = ("math", "cmath", "string", "re", "collections", "itertools", "functools",
                     "heapq", "bisect", "operator", "random", "fractions", "decimal", "copy",
                     "typing")
# Exact types whose comparison and arithmetic are C code a program cannot patch.
_SCALARS = frozenset(map(id, (type(None), bool, int, float, complex, str, bytes)))
_CONTAINERS = frozenset(map(id, (tuple, list, set, frozenset, dict)))
_MUTABLE = frozenset(map(id, (list, set, dict)))
_TYPE_NAME = vars(type)["__name__"].__get__
_REASON_MAX = 600


class _Violation(BaseException):
    """Raised into the test when a program function breaks a rule; BaseException so that a test's
    `except Exception` cannot swallow it (the harness records the violation anyway)."""


def _is_plain(value):
    """True if value is built only from exact builtin scalars and containers (no subclasses, no
    user objects), so `==`, `<`, `abs` on it run trusted C code. Iterative, cycle-safe."""
    stack, seen, budget = [value], set(), 1_000_000
    while stack:
        item = stack.pop()
        kind = id(type(item))  # id, not `in`: a metaclass __eq__ could claim to equal `int`
        if kind in _SCALARS:
            continue
        if kind not in _CONTAINERS:
            return False
        if id(item) in seen:
            continue
        seen.add(id(item))
        budget -= 1
        if budget < 0:
            return False
        if kind == id(dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        else:
            stack.extend(item)
    return True


def _type_name(cls):
    try:  # type's own __name__ getter: a metaclass property cannot run here
        return str(_TYPE_NAME(cls))
    except BaseException:
        return "?"


def _describe(exc):
    """'Type: message', capped. May run program code (__str__); the verdict is already fixed."""
    try:
        name, message = _type_name(type(exc)), str(exc)
        text = f"{name}: {message}" if message else name
        return text if len(text) <= _REASON_MAX else text[:_REASON_MAX] + "..."
    except BaseException:
        return "<unprintable exception>"


def _flush(streams):
    """Flush the original stdout/stderr objects: a replaced sys.stdout runs no code here."""
    for stream in streams:
        try:  # noqa: SIM105 - contextlib is Python code the program may have patched
            stream.flush()
        except BaseException:
            pass


def _snapshot():
    """Pristine copies of builtins and the protected modules, grouped by module name: for each,
    (label, live mapping, pristine copy) for the module dict and its mutable classes' dicts."""
    groups = {"builtins": [("builtins", vars(builtins), dict(vars(builtins)))]}
    copies, protected = {}, set()
    for name in PROTECTED_MODULES:
        module = _real_import(name)
        protected.add(id(module))
        copy = _ModuleType(name)
        vars(copy).update(vars(module))
        copies[name] = (module, copy)
        groups[name] = [(name, vars(module), dict(vars(module)))]
        for attr, value in vars(module).items():
            protected.add(id(value))
            if isinstance(value, type) and not value.__flags__ & (1 << 8):  # heap type: mutable
                groups[name].append((f"{name}.{attr}", vars(value), dict(vars(value))))
    return groups, copies, frozenset(protected)


def _tampered(groups, copies, names):
    """Which of the named modules (or builtins) the program changed, else ''."""
    missing = object()
    for name in names:
        if name in copies and _modules.get(name) is not copies[name][0]:
            return f"sys.modules[{name!r}] was replaced"
        for label, live, pristine in groups[name]:
            for key, value in pristine.items():
                if live.get(key, missing) is not value:
                    return f"{label}.{key} was replaced"
    return ""


def _audit_hook(protected):
    """Deny introspection that could reach the harness's frame (and its key), native code,
    process creation and signals. PEP 578 hooks are not a sandbox on their own; the OS layers
    are the boundary, this keeps the *verdict* honest against Python-level tricks."""
    denied = frozenset({
        "sys._current_frames", "sys._current_exceptions", "sys.settrace", "sys.setprofile",
        "gc.get_objects", "gc.get_referrers", "gc.get_referents", "os.fork", "os.forkpty",
        "os.system", "os.exec", "os.posix_spawn", "os.spawn", "subprocess.Popen", "os.kill",
        "os.killpg", "signal.pthread_kill", "resource.prlimit", "os.unshare", "os.setns"})
    frame_attrs = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
    code_attrs = frozenset({"__code__", "__defaults__", "__kwdefaults__", "__class__"})
    native = frozenset({"ctypes", "_ctypes", "_posixsubprocess", "_testcapi",
                        "_testinternalcapi", "_xxsubinterpreters", "_xxinterpchannels"})

    def hook(event, args):
        if event == "sys._getframe":  # ValueError: what namedtuple/typing/logging tolerate
            raise ValueError("sandbox: sys._getframe is blocked")
        if event == "object.__getattr__" and args[1] in frame_attrs:
            raise AttributeError(f"sandbox: {args[1]} is blocked")
        if event in ("object.__setattr__", "object.__delattr__") and (
                args[1] in code_attrs and id(args[0]) in protected):
            raise AttributeError(f"sandbox: setting {args[1]} is blocked")
        if event == "import" and str(args[0]).partition(".")[0] in native:
            raise ImportError(f"sandbox: import of {args[0]} is blocked")
        if event == "sys.addaudithook":
            raise RuntimeError("sandbox: audit hooks are fixed")  # RuntimeError: silently ignored
        if event in denied or event.startswith(("ctypes.", "socket.")):
            raise PermissionError(f"sandbox: {event} is blocked")

    return hook


def _setup(config):
    """Step 2. Returns the isolation layers in force, for the report."""
    import resource

    layers = [config["mode"]]
    helpers = {"__builtins__": globals()["__builtins__"], "__name__": "_sandbox_os"}
    exec(config["os_source"], helpers)  # verifiers/_sandbox_os.py, sent by the parent
    native = None
    if sys.platform == "linux":
        import ctypes

        native = (ctypes.CDLL(None, use_errno=True), ctypes)
    if config["mode"] == "unshare":
        if native is None:
            raise OSError("unshare mode needs Linux")
        helpers["unshare_setup"](*native, config["hidden"], config["disk_bytes"])
    for name in PROTECTED_MODULES:  # import before the limits and the hook
        _real_import(name)
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    cpu_limit = int(cpu.ru_utime + cpu.ru_stime + config["timeout"]) + 1
    limits = {resource.RLIMIT_CPU: cpu_limit, resource.RLIMIT_AS: config["memory_bytes"],
              resource.RLIMIT_FSIZE: config["disk_bytes"], resource.RLIMIT_NOFILE: 64,
              resource.RLIMIT_CORE: 0}
    seccomp = native is not None and helpers["install_seccomp"](*native)
    if not seccomp:  # only effective for a non-root uid, hence second choice
        limits[resource.RLIMIT_NPROC] = 0
    for which, value in limits.items():
        hard = value + 1 if which == resource.RLIMIT_CPU else value  # SIGXCPU, then SIGKILL
        resource.setrlimit(which, (value, hard))
    layers += ["seccomp"] * seccomp + ["audit"] + ["rlimits"] * (config["mode"] != "rlimits")
    for name in [m for m in _modules if m == "ctypes" or m.startswith(("ctypes.", "_ctypes"))]:
        del _modules[name]  # re-importing them is blocked by the audit hook
    return ",".join(layers)


def main():
    payload_fd, result_fd = int(sys.argv[1]), int(sys.argv[2])
    chunks = []
    while chunk := os.read(payload_fd, 1 << 16):
        chunks.append(chunk)
    _close(payload_fd)
    import marshal  # built in, and parent and child are the same interpreter

    config = marshal.loads(b"".join(chunks))
    key = bytes.fromhex(config.pop("key"))
    program, tests, entry_point = config["program"], config["tests"], config["entry_point"]
    seq = [0]
    streams = (sys.stdout, sys.stderr)

    def report(kind, index, status, reason=""):
        body = f"{seq[0]} {kind} {index} {status} {reason.encode('utf-8', 'replace').hex()}"
        line = f"{body} {_blake2b(body.encode(), key=key, digest_size=16).hexdigest()}\n"
        data = line.encode()
        while data:
            data = data[_write(result_fd, data):]
        seq[0] += 1

    try:
        layers = _setup(config)
        os.set_inheritable(result_fd, False)
        groups, copies, protected = _snapshot()
        pristine = dict(vars(builtins))
        sys.addaudithook(_audit_hook(protected))
    except BaseException as exc:
        sys.stderr.write(f"sandbox setup failed: {_describe(exc)}\n")
        sys.stderr.flush()
        _exit(70)

    compiled = []
    for i, source in enumerate(tests):
        try:
            compiled.append(compile(source, f"<test {i}>", "exec", dont_inherit=True, optimize=0))
        except BaseException as exc:  # a broken test fails alone; the program still runs
            compiled.append(_describe(exc))
    report("ready", 0, "ok", layers)

    user_main = _ModuleType("__main__")  # `import __main__` in the program finds its own module
    program_ns = vars(user_main)
    program_ns["__builtins__"] = builtins
    _modules["__main__"] = user_main
    try:
        code = compile(program, "<program>", "exec", dont_inherit=True)
    except BaseException as exc:
        report("program", 0, "syntax", _describe(exc))
        _exit(0)
    try:
        exec(code, program_ns)
        status, reason = "ok", _tampered(groups, copies, groups)
        if reason:
            status = "tampered"
    except BaseException as exc:
        status = "memory" if isinstance(exc, MemoryError) else "error"
        reason = _describe(exc)
    _flush(streams)
    report("program", 0, status, reason)
    if status != "ok":
        _exit(0)

    violations, unwrap = [], {}  # unwrap: id(guarded) -> (guarded, program function)
    used = set()  # protected modules the current test holds; checked after every call it makes

    def guard(name, fn, plain):
        """Every program function a test can call goes through here: its result (and the
        containers it may mutate) must be plain data, and the protected modules the test holds
        must be intact when it returns. Between calls, with gc off and only plain data in the
        test's hands, no program code runs, so patch-then-restore tricks have nowhere to hide."""

        def guarded(*args, **kwargs):
            # never hand a guard (whose closure leads back here) to program code
            args = [unwrap.get(id(a), (0, a))[1] for a in args]
            kwargs = {k: unwrap.get(id(a), (0, a))[1] for k, a in kwargs.items()}
            mutable = [a for a in (*args, *kwargs.values()) if id(type(a)) in _MUTABLE]
            mutable = [a for a in mutable if _is_plain(a)]
            try:
                result = fn(*args, **kwargs)
            finally:
                _gc_disable()  # the program may have switched it back on
                problem = _tampered(groups, copies, used)
                if problem:
                    violations.append(("tampered", problem))
            if not violations and plain and not _is_plain(result):
                violations.append(("fail", f"{name}() returned non-plain data "
                                           f"({_type_name(type(result))})"))
            if not violations and not all(map(_is_plain, mutable)):
                violations.append(("fail", f"{name}() put non-plain data into an argument"))
            if violations:
                raise _Violation(violations[-1][1])
            return result

        unwrap[id(guarded)] = (guarded, fn)
        return guarded

    def test_import(name, globals=None, locals=None, fromlist=(), level=0):
        wanted = fromlist or ()
        if level == 0 and name in copies and all(n in vars(copies[name][1]) for n in wanted):
            used.add(name)
            return copies[name][1]
        return _real_import(name, globals, locals, fromlist, level)  # unprotected, but works

    test_builtins = dict(pristine, __import__=test_import)
    for i, test in enumerate(compiled):
        if isinstance(test, str):
            report("test", i, "fail", f"test does not compile: {test}")
            continue
        ns = {}
        used.clear()
        unwrap.clear()
        for name, value in program_ns.items():
            if name == entry_point:
                if callable(value) and not isinstance(value, type):
                    value = guard(name, value, config["plain_returns"])
            elif name in pristine:
                continue  # a program global shadowing a builtin is not what tests mean
            elif name in copies:
                value = copies[name][1]  # e.g. the program's `math`, but one it cannot patch
                used.add(name)
            elif type(value) is _FunctionType and value.__globals__ is program_ns:
                value = guard(name, value, config["plain_returns"])
            ns[name] = value
        ns["__builtins__"] = dict(test_builtins)
        del violations[:]
        _gc_disable()
        try:
            exec(test, ns)
            status, reason = "pass", ""
        except BaseException as exc:
            status = "memory" if isinstance(exc, MemoryError) else "fail"
            reason = _describe(exc)
        tampered = _tampered(groups, copies, groups)
        if violations or tampered:  # even if the test swallowed the _Violation
            status, reason = violations[0] if violations else ("tampered", tampered)
        report("test", i, status, reason)
        _gc_enable()
    _flush(streams)
    report("end", 0, "ok")
    _exit(0)  # skip interpreter teardown: no program __del__ or atexit code runs after this


if __name__ == "__main__":
    main()
