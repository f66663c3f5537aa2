"""The judge's calls into the program (exec'd with judge.py, in front of it; its source travels
in the judge's payload): a Channel of requests and answers, the proxies the tests call, and
handles for the program's objects that are not plain data.

A handle stands in the judge for an object that stays in the program's process (an instance
of the program's class, a closure): the tests may read its attributes and call it or its
methods (each a call into the program), pass it back as an argument, and compare it by
identity (one handle per object), take its truth value, length, items and `h[key]` (each the
program's answer, as a plain value of that kind would be). It has no equality, order, hash
or `in` of its own: those would take the test's expected value to the program, which could
then answer "equal" without knowing it; a handle is equal to itself only.
"""

import builtins
import os
import time

_EXCEPTIONS = {name: cls for name, cls in vars(builtins).items()
               if isinstance(cls, type) and issubclass(cls, Exception)
               and not issubclass(cls, (StopIteration, StopAsyncIteration))}



class CallFailed(BaseException):
    """A call that fails its test whatever the test does with it (BaseException: a test's
    `except Exception` does not swallow it; the judge records it besides)."""


class Fatal(Exception):
    def __init__(self, error, detail):
        super().__init__(detail)
        self.error, self.detail = error, detail


def describe(exc):
    try:
        name, message = type(exc).__name__, str(exc)
        text = f"{name}: {message}" if message else name
        return text if len(text) <= 600 else text[:600] + "..."
    except BaseException:
        return "<unprintable exception>"


class Channel:
    """Calls into the program, one at a time, under the run's clock."""

    def __init__(self, wire, request_fd, response_fd, timeout, call_timeout):
        self.wire, self.request_fd = wire, request_fd
        self.answers = wire["Reader"](response_fd, budget=True)
        self.timeout, self.call_timeout = timeout, call_timeout
        self.deadline = None  # set when the program is ready
        self.fatal = None  # Fatal once the program can no longer be called
        self.violations = []  # reasons the current test fails, whatever it caught
        self.handles, self.issued = {}, 0  # Handle by number; numbers the program gave so far
        for fd in (request_fd, response_fd):
            os.set_blocking(fd, False)

    def receive(self, deadline, what, limit=None):
        wire = self.wire
        try:
            return wire["loads"](self.answers.frame(deadline))
        except TimeoutError:
            limit = limit or f"time limit of {self.timeout:g}s"
            raise Fatal("timeout", f"{limit} exceeded {what}") from None
        except EOFError:
            raise Fatal("exited", f"the program's process ended {what}") from None
        except wire["NotPlain"] as exc:
            raise Fatal("tampered", f"broken message from the program {what}: {exc}") from None

    def call(self, name, args, kwargs, handle=None, attr=None, op=None):
        """The program's `name(*args, **kwargs)`; with a handle, the handle's object called,
        (attr) its attribute read, or (op) bool, len, iter or getitem of it."""
        if self.fatal is not None:
            self.fail(f"{name}() not called: {self.fatal.detail}")
        wire, what = self.wire, f"in a call to {name}()"
        refs = wire["Refs"]()  # the arguments' lists, dicts and sets, as the program sees them
        wrapper = [list(args), kwargs]
        request = {"call": name} if handle is None else {"handle": handle, "attr": attr,
                                                          "op": op}
        try:
            request["args"] = wire["encode"](wrapper, False, 0, refs)
            frame = wire["dumps"](request)
        except (wire["NotPlain"], RecursionError) as exc:
            self.fail(f"argument of {name}() is not plain data ({exc})")
        answer = self.exchange(frame, what)
        return self.unpack(name, answer, refs, {id(w) for w in (wrapper, *wrapper)})

    def exchange(self, frame, what):
        """Send one request and return the program's answer (a JSON tree), under the run's
        clock and the call's; a fault ends the run (and fails the current test)."""
        wire = self.wire
        deadline, limit = self.deadline, f"time limit of {self.timeout:g}s"
        assert deadline is not None  # calls start after the program is ready
        if self.call_timeout is not None and time.monotonic() + self.call_timeout < deadline:
            deadline = time.monotonic() + self.call_timeout
            limit = f"call time limit of {self.call_timeout:g}s"
        try:
            try:
                wire["write_frame"](self.request_fd, frame, deadline)
            except TimeoutError:
                raise Fatal("timeout", f"{limit} exceeded {what}") from None
            except OSError:
                raise Fatal("exited", f"the program's process ended {what}") from None
            answer = self.receive(deadline, what, limit)
        except Fatal as fatal:
            self.fatal = fatal
            self.fail(fatal.detail)
        return answer

    def unpack(self, name, answer, refs, outer):
        """The value (or exception) of the program's answer; the call fails if it is not one.
        refs: the call's arguments' containers, which the answer may name (and refill, all but
        those whose ids are in `outer`: the request's own wrapping)."""
        wire = self.wire
        if type(answer) is not dict:
            self.fail(f"broken answer from {name}()")
        if "raise" in answer:
            exc = _exception(wire, answer)
            if exc is None:
                self.fail(f"{name}() raised {str(answer['raise'])[:600]}")
            raise exc
        if "ok" not in answer:
            self.fail(str(answer.get("bad", f"broken answer from {name}()"))[:600])
        ours = len(refs.objects)
        out = refs  # the answer counts on from the arguments' containers
        out.handle = self.handle
        try:
            value = wire["decode"](answer["ok"], 0, out)
            changes = [(key, wire["decode"](tree, 0, out))
                       for key, tree in answer.get("mutated", [])]
            for key, contents in changes:
                if type(key) is not int or not 0 <= key < ours or id(out.objects[key]) in outer:
                    raise ValueError("a change to no argument")
                _refill(out.objects[key], contents)
        except (wire["NotPlain"], TypeError, LookupError, ValueError) as exc:
            self.fail(f"{name}() returned data that is not plain ({exc})")
        return value

    def handle(self, k):
        """The judge's Handle for the program's object number k (one per object)."""
        if type(k) is not int or not 0 <= k < self.issued + 1:
            raise self.wire["NotPlain"]("a handle the program never gave")
        if k == self.issued:
            self.issued += 1
        found = self.handles.get(k)
        if found is None:
            found = self.handles[k] = Handle(self, k)
        return found

    def fail(self, reason):
        self.violations.append(reason)
        raise CallFailed(reason)


def _exception(wire, answer):
    """The builtin exception a program's answer says its call raised, with its args where they
    are plain data and make one of that class (else its message alone); None for a class
    a test must not see as a normal exception (or none)."""
    kind, message = answer["raise"] if type(answer["raise"]) is list and len(
        answer["raise"]) == 2 else (None, None)
    cls = _EXCEPTIONS.get(kind) if type(kind) is str else None
    if cls is None or type(message) is not str:
        return None
    exc = None
    if "args" in answer:
        try:
            args = wire["decode"](answer["args"])
            exc = cls(*args) if type(args) is list else None
        except Exception:
            exc = None
    if type(exc) is not cls:  # OSError(errno, ...) may pick a subclass; keep the class said
        try:
            exc = cls(message)
        except Exception:
            exc = RuntimeError(f"{kind}: {message}")
    if answer.get("subclass") is True:  # the program's own class, re-raised as its base
        exc.tts_program_subclass = True  # type: ignore[attr-defined]
    return exc


def _refill(target, value):
    """Give an argument the program changed its new contents, in place, as a call would."""
    if type(target) is not type(value) or type(target) not in (list, dict, set):
        raise TypeError("an argument changed type")
    if type(target) is list:
        target[:] = value
    else:
        target.clear()
        target.update(value)


def proxy(channel, name):
    def call(*args, **kwargs):
        return channel.call(name, args, kwargs)

    call.__name__ = call.__qualname__ = name
    call.tts_program_function = name  # as an argument: the program's own function (wire.py)
    return call


class Handle:
    """The judge's stand-in for an object in the program's process (see the module doc)."""

    __slots__ = ("_channel", "tts_handle")

    def __init__(self, channel, k):
        object.__setattr__(self, "_channel", channel)
        object.__setattr__(self, "tts_handle", k)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._channel.call(f"<object {self.tts_handle}>.{name}", (), {},
                                  self.tts_handle, name)

    def __setattr__(self, name, value):
        raise AttributeError("a program object's attributes are set by calling its methods")

    def __call__(self, *args, **kwargs):
        return self._channel.call(f"<object {self.tts_handle}>", args, kwargs, self.tts_handle)

    def _op(self, op, *args):
        return self._channel.call(f"{op}(<object {self.tts_handle}>)", args, {},
                                  self.tts_handle, None, op)

    def __bool__(self):
        value = self._op("bool")
        return value if type(value) is bool else self._channel.fail("bool() is not a bool")

    def __len__(self):
        value = self._op("len")
        return value if type(value) is int else self._channel.fail("len() is not an int")

    def __iter__(self):
        return iter(self._op("iter"))

    def __getitem__(self, key):
        return self._op("getitem", key)

    def __repr__(self):
        return f"<program object {self.tts_handle}>"
