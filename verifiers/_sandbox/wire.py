"""Plain data on the wire between the sandboxed program and the trusted judge.

Both sides exec this source (it travels in their payloads; nothing is imported from the
project). A message is one frame: a 4-byte big-endian length, then that many bytes of ASCII
JSON. Values are plain data only, exact builtin types, written as a JSON tree:

    None, bool, str, float (NaN, Infinity too)  as themselves
    int                as itself, or {"i": hex} beyond 18 digits (JSON readers cap digits)
    list               as a JSON array of values
    tuple set frozenset dict bytes complex
                       as {"t": [...]}, {"s": [...]}, {"f": [...]}, {"d": [[k, v], ...]},
                       {"b": hex}, {"c": [real, imag]}
    range              as {"g": [start, stop, step]}
    an iterator (a generator, map, zip...)
                       as {"it": [...]}, what it yields (an endless one is refused), and
                       arrives as an iterator over those items
    a function of the program (the judge's proxy of it, as an argument)
                       as {"fn": name}: the program's own global of that name
    an object that is none of these (the program's side only)
                       as {"h": k}: the k-th object the program's process keeps for the
                       judge, which holds a handle to it (_sandbox/calls.py)
    a list, dict or set met before in the same message
                       as {"r": k}: the k-th list, dict or set of the message, counted in
                       the order they open (so `[[0] * 3] * 3` stays one row three times, and a
                       cyclic list is a list); a call's answer counts on from its arguments, so
                       an answer that is an argument (or holds one) is that very object

`decode` is the judge's half: it reads a tree that the json module's C scanner built from the
untrusted bytes and returns new objects of exact builtin types, or raises NotPlain. No object
the program made crosses over: the judge only ever holds what the two C parsers produced and
what `decode` built from it, so `==`, `hash`, `<`, `abs` on a return value run trusted code.
Depth and size are capped.
"""

import select
import time
from os import read as _read
from os import write as _write

MESSAGE_MAX = 64 * 2**20  # bytes in one frame: the cap on a return value and its arguments
# What one frame may cost the reader in objects (the bound `cost` computes; a frame of 4M
# small ints costs about 540 MiB, 600k ints about 80 MiB), and what the judge reads from the
# program in one run (a property test of 2,500 calls on 1,000-int lists costs about 0.4 GiB):
# the judge's memory (its RLIMIT_AS, at least 1 GiB) and its work (its RLIMIT_CPU) stay bounded
COST_MAX = 512 * 2**20
RUN_COST_MAX = 64 * 2**30
RUN_FRAMES_MAX = 1 << 22
DEPTH_MAX = 64  # containers nested in one value
_INT_MAX = 10**18  # larger ints travel as hex: JSON readers refuse ints over 4300 digits


class NotPlain(Exception):
    """The value (or the message) is not plain data, or exceeds a cap."""


class Refs:
    """The lists, dicts and sets of one message (and, for an answer, of its call's arguments),
    in the order they open: `objects[k]` is what {"r": k} means. Holding them keeps their ids
    from being reused while the message is built."""

    def __init__(self, objects=()):
        self.objects = list(objects)
        self.index = {id(obj): k for k, obj in enumerate(self.objects)}
        self.keep = None  # the program's side: object -> its handle number (see _sandbox/calls.py)
        self.handle = None  # number -> the object (program's side) or the judge's Handle
        self.function = None  # the program's side: a global's name -> the program's function

    def add(self, obj):
        self.index[id(obj)] = len(self.objects)
        self.objects.append(obj)


def encode(value, lenient=False, depth=0, refs=None):
    """The JSON tree of a plain value; NotPlain otherwise. lenient: subclasses of the builtin
    types become their base type and other iterables (generators, ranges, maps) become
    lists. Leniency only changes what the program side sends; the judge decodes the same.
    refs: the message's Refs (a new one when None)."""
    if refs is None:
        refs = Refs()
    kind = type(value)
    if value is None or kind is bool or kind is str or kind is float:
        return value
    if kind is int:
        return value if -_INT_MAX < value < _INT_MAX else {"i": format(value, "x")}
    if depth >= DEPTH_MAX:
        raise NotPlain(f"nested more than {DEPTH_MAX} deep")
    depth += 1
    if kind is list or kind is dict or kind is set:
        seen = refs.index.get(id(value))
        if seen is not None:
            return {"r": seen}
        refs.add(value)
    if kind is list:
        return [encode(item, lenient, depth, refs) for item in value]
    if kind is tuple or kind is set or kind is frozenset:
        tag = "t" if kind is tuple else "s" if kind is set else "f"
        return {tag: [encode(item, lenient, depth, refs) for item in value]}
    if kind is dict:
        return {"d": [[encode(k, lenient, depth, refs), encode(v, lenient, depth, refs)]
                      for k, v in value.items()]}
    if kind is bytes:
        return {"b": value.hex()}
    if kind is complex:
        return {"c": [value.real, value.imag]}
    if kind is range and not lenient:
        return {"g": [value.start, value.stop, value.step]}
    if hasattr(kind, "__next__") and hasattr(kind, "__iter__") and not lenient:  # a generator
        return {"it": [encode(item, lenient, depth, refs) for item in _items(value)]}
    handle = getattr(value, "tts_handle", None)  # the judge's Handle of a program object
    if type(handle) is int:
        return {"h": handle}
    function = getattr(value, "tts_program_function", None)  # the judge's proxy of one
    if type(function) is str:
        return {"fn": function}
    if lenient:  # _coerce returns an exact builtin type, so this recursion ends
        try:
            return encode(_coerce(value), True, depth, refs)
        except NotPlain:
            if refs.keep is None:
                raise
    if refs.keep is not None:  # an object that stays in the program's process
        return {"h": refs.keep(value)}
    raise NotPlain(f"{_name(kind)} is not plain data")


_BASES: tuple = (int, float, complex, str, bytes, tuple, frozenset, set, list, dict)


def _items(iterator):
    """What an iterator yields, at most MESSAGE_MAX // 4 items (an endless one is refused)."""
    items = []
    for item in iterator:
        items.append(item)
        if len(items) > MESSAGE_MAX // 4:
            raise NotPlain("iterator too long")
    return items


def _coerce(value):
    """A builtin stand-in for a value of another type (lenient mode, program side only): its
    builtin base type, or the list of what it iterates over."""
    for base in _BASES:
        if isinstance(value, base):
            return base(value)
    if not hasattr(value, "__iter__"):
        raise NotPlain(f"{_name(type(value))} is not plain data")
    return _items(value)


def decode(tree, depth=0, refs=None):
    """Exact builtin objects from a tree `json.loads` produced; NotPlain for anything else.
    refs: the message's Refs (objects its {"r": k} may name; a new one when None)."""
    if refs is None:
        refs = Refs()
    kind = type(tree)
    if tree is None or kind is bool or kind is str or kind is float or kind is int:
        return tree
    if depth >= DEPTH_MAX:
        raise NotPlain(f"nested more than {DEPTH_MAX} deep")
    depth += 1
    if kind is list:
        out = []
        refs.add(out)
        out.extend(decode(item, depth, refs) for item in tree)
        return out
    if kind is not dict or len(tree) != 1:
        raise NotPlain("malformed value")
    ((tag, body),) = tree.items()
    if tag == "r":
        if type(body) is not int or not 0 <= body < len(refs.objects):
            raise NotPlain("malformed reference")
        return refs.objects[body]
    if tag == "h":
        if refs.handle is None or type(body) is not int:
            raise NotPlain("malformed handle")
        return refs.handle(body)
    if tag == "fn":
        if refs.function is None or type(body) is not str:
            raise NotPlain("malformed function")
        return refs.function(body)
    try:
        if tag == "i" and type(body) is str:
            return int(body, 16)
        if tag == "b" and type(body) is str:
            return bytes.fromhex(body)
        if tag == "c" and type(body) is list and len(body) == 2 and all(
                type(x) in (int, float) for x in body):
            return complex(float(body[0]), float(body[1]))
        if tag == "g" and type(body) is list and len(body) == 3 and all(
                type(x) is int for x in body):
            return range(*body)
        if type(body) is not list:
            raise NotPlain("malformed value")
        if tag == "it":
            return iter([decode(item, depth, refs) for item in body])
        if tag == "d":
            if not all(type(pair) is list and len(pair) == 2 for pair in body):
                raise NotPlain("malformed dict")
            table = {}
            refs.add(table)
            for k, v in body:  # TypeError: unhashable
                key = decode(k, depth, refs)
                table[key] = decode(v, depth, refs)
            return table
        if tag == "s":
            made = set()
            refs.add(made)
            made.update(decode(item, depth, refs) for item in body)
            return made
        items = [decode(item, depth, refs) for item in body]
        if tag in ("t", "f"):
            return (tuple if tag == "t" else frozenset)(items)
    except (TypeError, ValueError, OverflowError) as exc:
        raise NotPlain(f"malformed value ({type(exc).__name__}: {exc})") from None
    raise NotPlain("malformed value")


def _name(kind):
    try:  # type's own __name__ getter: a metaclass property cannot run here
        return str(vars(type)["__name__"].__get__(kind))
    except BaseException:
        return "?"


# -- frames -----------------------------------------------------------------------------

def _codec():
    """(dumps, loads) on the json module's C encoder and scanner, without importing json:
    its `re` and `enum` cost more start-up than the rest of a sandbox process. The same
    objects json.dumps/json.loads use; if this Python's private _json differs, json itself."""
    try:
        from _json import encode_basestring_ascii, make_encoder, make_scanner

        class Context:  # what json.JSONDecoder hands its C scanner
            strict, object_hook, object_pairs_hook, memo = True, None, None, None
            parse_float, parse_int, parse_constant = float, int, float  # float("NaN")

        scan = make_scanner(Context())  # type: ignore[arg-type]
        dump = make_encoder(None, None, encode_basestring_ascii, None, ":", ",",  # type: ignore[arg-type]
                            False, False, True)

        def dumps(tree):
            return "".join(dump(tree, 0))

        def loads(text):
            value, end = scan(text, 0)
            if end != len(text):
                raise ValueError("data after the value")
            return value

        if loads(dumps(probe := [1.5, -(2**62), "\u00e9", None, {"k": [True, float("inf")]}])) != probe:
            raise ValueError("_json does not round-trip")
        return dumps, loads
    except Exception:
        import json

        return (lambda tree: json.dumps(tree, separators=(",", ":"))), json.loads


_dumps, _loads = _codec()


def cost(body):
    """An upper bound on the bytes of the objects json's scanner, then `decode`, build from a
    frame's body: each value starts a body, follows a comma or a colon, or opens a
    container; a dict costs at most 240 bytes, a list 72, any other value 64 plus its text.
    (Commas inside strings count too: the bound only overestimates.)"""
    values = body.count(b",") + body.count(b":")
    return 2 * (240 * body.count(b"{") + 72 * body.count(b"[") + 64 * values + len(body))


def _check(body):
    """The frame's cost; NotPlain if it or the body is over its cap."""
    if len(body) > MESSAGE_MAX:
        raise NotPlain(f"message of {len(body)} bytes exceeds {MESSAGE_MAX}")
    spent = cost(body)
    if spent > COST_MAX:
        raise NotPlain(f"message of {len(body)} bytes would cost the judge over {COST_MAX} "
                       "bytes of objects")
    return spent


def dumps(message):
    """One frame holding `message` (a JSON-ready tree); NotPlain if it is too large."""
    body = _dumps(message).encode("ascii")
    _check(body)
    return len(body).to_bytes(4, "big") + body


def loads(body):
    """The JSON tree in a frame's body; NotPlain if it is not JSON (or nested too deeply)."""
    try:
        return _loads(body.decode("ascii"))
    except (ValueError, StopIteration, RecursionError, MemoryError) as exc:
        raise NotPlain(f"malformed message ({type(exc).__name__})") from None


def write_frame(fd, frame, deadline=None):
    """Write all of `frame`; with a deadline (monotonic seconds) the fd must be non-blocking
    and TimeoutError is raised when it passes."""
    view = memoryview(frame)
    while view:
        if deadline is not None and not _ready(fd, deadline, write=True):
            raise TimeoutError
        try:
            view = view[_write(fd, view):]
        except BlockingIOError:
            continue


class Reader:
    """Frames from one fd, read in large chunks (a frame usually takes one read). budget:
    the judge's reader of the program's answers checks each frame's cost before it is
    parsed, and counts frames and costs against the run's caps (RUN_FRAMES_MAX,
    RUN_COST_MAX): what the program's answers make the judge hold is bounded."""

    def __init__(self, fd, budget=False):
        self.fd, self.buffer, self.budget = fd, b"", budget
        self.frames = self.spent = 0

    def frame(self, deadline=None):
        """The body of the next frame. EOFError at end of stream, TimeoutError past the
        deadline (the fd must then be non-blocking), NotPlain for one over MESSAGE_MAX
        (over COST_MAX, or past the run's caps, with a budget)."""
        size = int.from_bytes(self._take(4, deadline), "big")
        if size > MESSAGE_MAX:
            raise NotPlain(f"message of {size} bytes exceeds {MESSAGE_MAX}")
        body = self._take(size, deadline)
        if self.budget:
            self.frames, self.spent = self.frames + 1, self.spent + _check(body)
            if self.frames > RUN_FRAMES_MAX or self.spent > RUN_COST_MAX:
                raise NotPlain(f"more than {RUN_FRAMES_MAX} messages, or messages costing over "
                               f"{RUN_COST_MAX} bytes, from the program in one run")
        return body

    def _take(self, size, deadline):
        chunks, have = [self.buffer], len(self.buffer)
        while have < size:
            if deadline is not None and not _ready(self.fd, deadline, write=False):
                raise TimeoutError
            try:
                chunk = _read(self.fd, max(size - have, 1 << 16))
            except BlockingIOError:
                continue
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            have += len(chunk)
        data = b"".join(chunks)
        self.buffer = data[size:]
        return data[:size]


def _ready(fd, deadline, write):
    """Wait until `fd` can be written (or read) or the deadline passes; poll, not select:
    select cannot take an fd over 1023."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT if write else select.POLLIN)
    return bool(poller.poll(max(1, int(remaining * 1000 + 0.999))))
