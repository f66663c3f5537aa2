"""Which tests may share one program process (the caller's side of verifiers.code).

Tests run as Python runs them: an assert raises, `and`/`or`, `if`, any()/all() short-circuit.
So the calls a test makes can depend on whether an earlier answer was right, and a program
that kept count could learn it and answer a later test better. That signal never reaches a
later test: the caller gives each run a schedule fixed before any answer is seen, namely a
run of tests whose calls cannot depend on a verdict ("one question": `assert f(2, [1]) == 3`),
and at most one other test, last; the next test starts a new program process.

A test asks one question when it is straight-line code: imports and assignments that call
nothing, then one `assert` (message absent or a constant) or expression, with no `and`/`or`,
conditional expression, comprehension, lambda, walrus or chained comparison, and at most one
call of a name that is not a builtin in SAFE (calls of SAFE builtins take no keywords). Its
only program call is then its last: nothing it does after depends on the answer.
"""

from __future__ import annotations

import ast
import functools
import threading

SAFE = frozenset({"abs", "bool", "bytes", "complex", "dict", "float", "frozenset", "int",
                  "isinstance", "len", "list", "repr", "round", "set", "sorted", "str", "sum",
                  "tuple", "type"})
_BRANCHING = (ast.BoolOp, ast.IfExp, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp,
              ast.GeneratorExp, ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)
_SETUP = (ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign, ast.Pass)


# CPython 3.11's parser can fail with "AST constructor recursion depth mismatch" when threads
# parse at once (its recursion count is shared): one parse at a time
_PARSE = threading.Lock()


@functools.lru_cache(maxsize=4096)  # a search judges many programs on the same tests
def one_question(source: str) -> bool:
    """Whether the calls of test `source` are fixed before any answer is seen (see above)."""
    try:
        with _PARSE:
            body = ast.parse(source).body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return True  # it fails alone, calling nothing
    if not body or not isinstance(body[-1], (ast.Assert, ast.Expr)):
        return False
    if not all(isinstance(s, _SETUP) and not _has(s, ast.Call) for s in body[:-1]):
        return False
    last = body[-1]
    if isinstance(last, ast.Assert) and last.msg is not None and not isinstance(
            last.msg, ast.Constant):
        return False
    if _has(last, _BRANCHING) or any(isinstance(n, ast.Compare) and len(n.ops) > 1
                                     for n in ast.walk(last)):
        return False
    calls = [n for n in ast.walk(last) if isinstance(n, ast.Call)]
    other = [c for c in calls if not (isinstance(c.func, ast.Name) and c.func.id in SAFE
                                      and not c.keywords)]
    return len(other) <= 1


def _has(node: ast.AST, kinds) -> bool:
    return any(isinstance(n, kinds) for n in ast.walk(node))


def schedule(tests: list[str]) -> list[list[int]]:
    """The tests' indices in runs, in order: one-question tests together, each other test
    ending a run (nothing after it in its process can see its calls)."""
    runs: list[list[int]] = [[]]
    for i, test in enumerate(tests):
        runs[-1].append(i)
        if not one_question(test):
            runs.append([])
    return [r for r in runs if r]
