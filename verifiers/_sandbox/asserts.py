"""How the judge runs a test's asserts (exec'd by judge.py; its source travels in the judge's
payload, and nothing of it enters the program's sandbox).

The rule: whether an answer is right or wrong changes no code the test runs, apart from the
test's own statements (an `if` or a loop on an answer, or a call whose arguments cannot be
computed from a wrong answer). So the calls the program gets, and their order, do not tell
it which of its answers were accepted:
- an assert's message is never evaluated: a constant one is the failure's reason, a computed
  one (an f-string, a message that calls the program again) does not run, right or wrong;
- an assert that is false, or that raises an Exception, is recorded and the test goes on;
- within an assert's test, every operand is evaluated even where one before it raised or
  decided the result: both sides of a comparison, each argument of a call, each item of a
  tuple or list, each operand of `and`/`or` (and the test's all()/any() consume every item);
  the verdict, and the exception reported, are those of ordinary evaluation.
"""

import _ast
import sys

NAME = "__tts_asserts__"  # the test's Asserts, in its namespace
# the parts of an expression taken apart, in the order Python evaluates them
_FIELDS = {_ast.Compare: ("left", "comparators"), _ast.BinOp: ("left", "right"),
           _ast.Call: ("func", "args", "keywords"), _ast.Tuple: ("elts",), _ast.List: ("elts",),
           _ast.Set: ("elts",), _ast.Subscript: ("value", "slice"), _ast.BoolOp: ("values",),
           _ast.UnaryOp: ("operand",), _ast.Attribute: ("value",)}


class Raised:
    """An operand that raised: (status, reason) of its exception."""

    __slots__ = ("outcome",)

    def __init__(self, outcome):
        self.outcome = outcome


class Asserts:
    """What one test's rewritten asserts call; `failures` lists each failed assert, in order,
    as (status, reason). status_of(exc) is "memory" or "fail"; describe(exc) the reason."""

    Error = Exception

    def __init__(self, status_of, describe):
        self.status_of, self.describe, self.failures = status_of, describe, []

    def caught(self):
        exc = sys.exc_info()[1]
        return Raised((self.status_of(exc), self.describe(exc)))

    @staticmethod
    def clean(*values):
        return not any(type(v) is Raised for v in values)

    @staticmethod
    def first(*values):
        return next(v for v in values if type(v) is Raised)

    def either(self, is_and, *values):
        """`a and b ...` (or `or`) of values computed in full: the first that raised or decides."""
        for value in values:
            if type(value) is Raised:
                return value
            try:
                if bool(value) is not is_and:
                    return value
            except Exception:
                return self.caught()
        return values[-1]

    def check(self, value, reason):
        if type(value) is Raised:
            return self.failures.append(value.outcome)
        try:
            if not value:
                self.failures.append(("fail", reason))
        except Exception:
            self.failures.append(self.caught().outcome)


def eager_all(iterable):
    """all(), consuming every item: the calls an item makes do not depend on the others."""
    verdict = True
    try:
        for item in iterable:
            if verdict and not item:
                verdict = False
    except Exception:
        if verdict:
            raise
    return verdict


def eager_any(iterable):
    verdict = False
    try:
        for item in iterable:
            if not verdict and item:
                verdict = True
    except Exception:
        if not verdict:
            raise
    return verdict


def record_asserts(tree):
    """Rewrite every assert in a test's AST by the rule above; returns the tree."""
    temps = iter(range(1 << 62))
    stack = [tree]
    while stack:
        node = stack.pop()
        for name in node._fields:
            value = getattr(node, name, None)
            if type(value) is list:
                rewritten = []
                for item in value:
                    rewritten += _rewrite(item, temps) if type(item) is _ast.Assert else [item]
                setattr(node, name, rewritten)
                stack.extend(item for item in value if isinstance(item, _ast.AST))
            elif isinstance(value, _ast.AST):
                stack.append(value)
    return tree


def _rewrite(node, temps):
    """The statements replacing one assert:
        <each part taken apart: __tts_tN__ = part, under try (see _eager)>
        try:
            __tts_tK__ = TEST
        except Exception:
            __tts_tK__ = <what it raised>
        __tts_asserts__.check(__tts_tK__, REASON)
    """
    msg = node.msg
    if msg is None:
        reason = "AssertionError"
    elif type(msg) is _ast.Constant:
        reason = f"AssertionError: {msg.value}"[:600]
    else:
        reason = f"AssertionError (line {node.lineno}; its message is not evaluated)"
    at = {k: getattr(node, k) for k in ("lineno", "col_offset", "end_lineno", "end_col_offset")}
    out = []
    value = _eager(node.test, out, temps, at)
    top = _temp(temps)
    out.append(_try_assign(top, value, at))
    out.append(_ast.Expr(value=_method("check", [_load(top, at), _ast.Constant(value=reason, **at)],
                                       at), **at))
    return out


def _eager(node, out, temps, at):
    """An expression computing `node`, after statements (appended to out) that evaluate its
    parts into temporaries, each under its own try, where a part after the first makes a call:
    so no call is skipped because a part before it raised. A node with a part that raised
    is not computed: its value is that part's Raised."""
    slots = _slots(node) if _needed(node) else None
    if not slots:
        return node
    names = []
    for slot in slots:
        part = _eager(_get(slot), out, temps, at)
        if type(part) is _ast.Name and part.id.startswith("__tts_t"):
            name = part.id
        else:
            name = _temp(temps)
            out.append(_try_assign(name, part, at))
        names.append(name)
        _set(slot, _load(name, at))
    target, loads = _temp(temps), [_load(n, at) for n in names]
    if type(node) is _ast.BoolOp:
        is_and = _ast.Constant(value=type(node.op) is _ast.And, **at)
        out.append(_assign(target, _method("either", [is_and, *loads], at), at))
    else:  # if clean(parts): try: target = node ... else: target = first(parts)
        out.append(_ast.If(test=_method("clean", loads, at), body=[_try_assign(target, node, at)],
                           orelse=[_assign(target, _method("first", loads, at), at)], **at))
    return _load(target, at)


def _needed(node):
    """Whether `node` is taken apart: a part after its first makes a call, or its first part
    is taken apart (a part that raised must not reach the operation)."""
    slots = _slots(node)
    return bool(slots) and (any(_calls(_get(slot)) for slot in slots[1:])
                            or _needed(_get(slots[0])))


def _slots(node):
    """(holder, key) of each part of an expression we take apart, in evaluation order; None
    for any other expression (one with *args, a slice, a comprehension, a lambda...)."""
    fields = _FIELDS.get(type(node))
    if fields is None:
        return None
    slots = []
    for field in fields:
        value = getattr(node, field)
        for i, item in enumerate(value) if type(value) is list else [(field, value)]:
            holder, key = (value, i) if type(value) is list else (node, field)
            if type(item) is _ast.keyword:
                holder, key, item = item, "value", item.value
            if type(item) in (_ast.Starred, _ast.Slice) or item is None:
                return None
            slots.append((holder, key))
    return slots


def _get(slot):
    holder, key = slot
    return holder[key] if type(holder) is list else getattr(holder, key)


def _set(slot, value):
    holder, key = slot
    if type(holder) is list:
        holder[key] = value
    else:
        setattr(holder, key, value)


def _calls(node):
    stack = [node]
    while stack:
        item = stack.pop()
        if type(item) is _ast.Call:
            return True
        stack.extend(child for name in item._fields for child in _children(item, name))
    return False


def _children(node, name):
    value = getattr(node, name, None)
    return [v for v in (value if type(value) is list else [value]) if isinstance(v, _ast.AST)]


def _temp(temps):
    return f"__tts_t{next(temps)}__"


def _load(name, at):
    return _ast.Name(id=name, ctx=_ast.Load(), **at)


def _assign(name, value, at):
    return _ast.Assign(targets=[_ast.Name(id=name, ctx=_ast.Store(), **at)], value=value, **at)


def _method(name, args, at):
    """__tts_asserts__.name(*args)"""
    return _ast.Call(func=_ast.Attribute(value=_load(NAME, at), attr=name, ctx=_ast.Load(), **at),
                     args=args, keywords=[], **at)


def _try_assign(name, value, at):
    """try: name = value / except __tts_asserts__.Error: name = __tts_asserts__.caught()"""
    error = _ast.Attribute(value=_load(NAME, at), attr="Error", ctx=_ast.Load(), **at)
    handler = _ast.ExceptHandler(type=error, name=None,
                                 body=[_assign(name, _method("caught", [], at), at)], **at)
    return _ast.Try(body=[_assign(name, value, at)], handlers=[handler], orelse=[],
                    finalbody=[], **at)
