"""Held-out programs, honest and hostile, judged in every mode: honest ones pass as Python runs
them (short-circuits, lazy any/all, caught AssertionErrors, `__main__` blocks, exceptions with
their type and args, identity and aliasing in answers, property tests of thousands of calls);
hostile ones fail (no entry point behind a builtin's name, answers that alias what a test
checks is fresh, a program that learns from which calls it gets)."""

from __future__ import annotations

import pytest
import test_sandbox

from verifiers.code import rlimits_gaps, run_tests

canary = test_sandbox.canary
host_untouched = test_sandbox.host_untouched
mode = test_sandbox.mode


def judge(program, tests, mode, **kwargs):
    return run_tests(program, tests, isolation=mode, unisolated=rlimits_gaps(), **kwargs)


# (name, program, tests, entry point): each must pass every test
HONEST = [
    ("main_block_reads_input",
     "def double(x):\n    return 2 * x\n\nif __name__ == '__main__':\n"
     "    print(double(int(input())))\n",
     ["assert double(2) == 4"], "double"),
    ("main_block_runs_unittest",
     "import unittest\n\ndef inc(x):\n    return x + 1\n\nclass T(unittest.TestCase):\n"
     "    def test_inc(self):\n        self.assertEqual(inc(1), 2)\n\n"
     "if __name__ == '__main__':\n    unittest.main()\n",
     ["assert inc(1) == 2"], "inc"),
    ("guarded_call",
     "def head(xs):\n    return xs[0]\n",
     ["xs = []\nassert not xs or head(xs) == xs[0]", "assert [] == [] or head([])"], "head"),
    ("lazy_any_over_an_endless_iterator",
     "def is_target(x):\n    return x == 7\n",
     ["import itertools\nassert any(is_target(x) for x in itertools.count())",
      "import itertools\nassert not all(not is_target(x) for x in itertools.count())"],
     "is_target"),
    ("test_catches_its_assertion_error",
     "def f(x):\n    return x + 1\n",
     ["try:\n    assert f(1) == 99\n    caught = False\nexcept AssertionError:\n"
      "    caught = True\nassert caught and f(1) == 2"], "f"),
    ("unicode_decode_error_with_its_args",
     "def dec(b):\n    return b.decode('utf-8')\n",
     ["try:\n    dec(b'\\xff')\n    raised = None\nexcept UnicodeDecodeError as e:\n"
      "    raised = e\nassert type(raised) is UnicodeDecodeError\n"
      "assert raised.start == 0 and raised.reason == 'invalid start byte'"], "dec"),
    ("exception_args",
     "def look(d, k):\n    if k not in d:\n        raise KeyError(k, len(d))\n    return d[k]\n",
     ["try:\n    look({}, 'a')\nexcept KeyError as e:\n    assert e.args == ('a', 0)\n"
      "else:\n    assert False"], "look"),
    ("identity_of_an_argument_returned",
     "def push(s, x):\n    s.append(x)\n    return s\n",
     ["s = []\nassert push(s, 1) is s and s == [1]"], "push"),
    ("aliased_arguments",
     "def extend_with(a, b):\n    a.extend(b)\n    return a\n",
     ["xs = [1, 2]\nextend_with(xs, xs)\nassert xs == [1, 2, 1, 2]"], "extend_with"),
    ("nested_mutation",
     "def set_first(m):\n    m[0][0] = 1\n",
     ["m = [[0], [0]]\nset_first(m)\nassert m == [[1], [0]]"], "set_first"),
    ("builtin_named_function_the_program_defines",
     "def max(a, b):\n    return b if b > a else a\n\ndef abs(x):\n    return x if x > 0 else -x\n",
     ["assert max(3, 2) == 3 and abs(-4) == 4"], "max"),
    ("iterators_and_ranges",
     "def evens(n):\n    return range(0, n, 2)\n\ndef squares(n):\n    return (i * i for i in range(n))\n"
     "\ndef strs(xs):\n    return map(str, xs)\n\nnumbers = iter([1, 2, 3])\n\n"
     "def first():\n    return next(numbers)\n",
     ["assert list(evens(5)) == [0, 2, 4] and evens(5) == range(0, 5, 2)",
      "it = squares(3)\nassert next(it) == 0 and list(it) == [1, 4]",
      "assert list(strs([1, 2])) == ['1', '2'] and first() == 1"], None),
    ("objects_of_the_programs_classes",
     "class Stack:\n    def __init__(self):\n        self.items = []\n"
     "    def push(self, x):\n        self.items.append(x)\n        return self\n"
     "    def pop(self):\n        return self.items.pop()\n"
     "    def __len__(self):\n        return len(self.items)\n"
     "    def __iter__(self):\n        return iter(self.items)\n"
     "    def __getitem__(self, i):\n        return self.items[i]\n"
     "\ndef make():\n    return Stack()\n"
     "\ndef adder(n):\n    return lambda x: x + n\n",
     ["s = Stack()\nassert s.push(1) is s and s.push(2).items == [1, 2] and s.pop() == 2",
      "s = Stack().push(3).push(4)\nassert len(s) == 2 and list(s) == [3, 4] and s[1] == 4 and s",
      "assert not Stack()",
      "assert make() is not make() and adder(2)(3) == 5"], None),
    ("program_function_as_an_argument",
     "def inc(x):\n    return x + 1\n\ndef apply_twice(f, x):\n    return f(f(x))\n",
     ["assert apply_twice(inc, 1) == 3"], "apply_twice"),
    ("answer_of_600k_ints",
     "def big(n):\n    return list(range(n))\n\ndef total(xs):\n    return sum(xs)\n",
     ["assert big(600000) == list(range(600000))",
      "assert total(list(range(600000))) == 179999700000"], "big"),
]

# (name, program, tests, entry point): each must fail at least one test
HOSTILE = [
    ("no_entry_point_behind_a_builtin", "x = 1\n", ["assert max(1, 2) == 2"], "max"),
    ("no_entry_point_behind_a_builtin_unnamed", "x = 1\n", ["assert sum([1, 2]) == 3"], "sum"),
    ("clone_returns_its_argument",
     "def clone(x):\n    return x\n", ["x = [1, 2]\ny = clone(x)\nassert y == x and y is not x"],
     "clone"),
    ("rows_are_one_list",
     "def grid(n):\n    return [[0] * n] * n\n",
     ["g = grid(3)\ng[0][0] = 1\nassert g[1][0] == 0"], "grid"),
    ("dict_values_alias",
     "def table(keys):\n    row = []\n    return {k: row for k in keys}\n",
     ["t = table('ab')\nt['a'].append(1)\nassert t['b'] == []"], "table"),
    # learns across tests from which calls it got: guess 0 first; if g() does not follow the
    # first f(1), the guess was wrong, so answer the other candidate next time
    ("learns_from_a_short_circuit",
     "seen = []\ndef f(x):\n    seen.append('f')\n    return 7 if seen[-2:] == ['f', 'f'] else 0\n"
     "def g():\n    seen.append('g')\n    return 0\n",
     ["assert f(1) == 7 and g() == 0", "assert f(1) == 7"], "f"),
    ("learns_from_an_assert_that_stopped_a_test",
     "seen = []\ndef f(x):\n    seen.append('f')\n    return 7 if seen[-2:] == ['f', 'f'] else 0\n"
     "def g():\n    seen.append('g')\n    return 0\n",
     ["assert f(1) == 7\ng()", "assert f(1) == 7"], "f"),
    ("learns_from_a_caught_failure_count",
     "calls = []\ndef f(x):\n    calls.append(x)\n    return len(calls) % 2\n",
     ["assert f(0) == 1 and f(1) == 1 and f(2) == 1", "assert f(0) == 0"], "f"),
    ("object_equal_to_everything",
     "class Eq:\n    def __eq__(self, other):\n        return True\n    def __bool__(self):\n"
     "        return True\n\ndef f(x):\n    return Eq()\n",
     ["assert f(1) == 2", "assert not f(1) != 2", "assert 2 in [f(1)]",
      "assert f(1) in {2}"], "f"),
    ("raises_a_fake_assertion_error_subclass",
     "class Fine(AssertionError):\n    pass\n\ndef f(x):\n    raise Fine('ok')\n",
     ["assert f(1) == 2"], "f"),
]


@pytest.mark.parametrize("name,program,tests,entry", HONEST, ids=[h[0] for h in HONEST])
def test_honest_programs_pass(mode, name, program, tests, entry):
    report = judge(program, tests, mode, entry_point=entry, timeout=30)
    assert report.passed_all, (report.error, report.detail, [r.reason for r in report.results])


@pytest.mark.parametrize("name,program,tests,entry", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_programs_fail(mode, name, program, tests, entry):
    report = judge(program, tests, mode, entry_point=entry)
    assert not report.passed_all
    if name.startswith(("learns_", "object_")):  # it must win nothing: not one test passes
        assert report.num_passed == 0, [r.reason for r in report.results]


def test_property_test_of_2500_calls_on_1000_int_lists(mode):
    """An honest property test: 2,500 calls, each on a list of 1,000 ints (each answer a list
    of 1,000 ints), under the documented caps."""
    program = "def my_sort(xs):\n    return sorted(xs)\n"
    test = ("import random\nrng = random.Random(0)\nfor _ in range(2500):\n"
            "    xs = [rng.randrange(10**6) for _ in range(1000)]\n"
            "    assert my_sort(xs) == sorted(xs)\n")
    report = judge(program, [test], mode, entry_point="my_sort", timeout=120)
    assert report.passed_all, (report.error, report.detail)


def test_no_entry_point_is_a_name_error(mode):
    report = judge("x = 1\n", ["assert max(1, 2) == 2"], mode, entry_point="max")
    assert "NameError" in report.results[0].reason


FUTEX = '''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
word = ctypes.c_int(0)
def futex(op):
    """errno of FUTEX_WAIT (op 0, shared) or FUTEX_WAIT_PRIVATE (op 128) on a word holding 0,
    told to wait only if it holds 1: EAGAIN (11) where the call is allowed."""
    libc.syscall.restype = ctypes.c_long
    libc.syscall(202, ctypes.byref(word), op, 1, None)
    return ctypes.get_errno()
def sigpending():
    import resource
    return resource.getrlimit(resource.RLIMIT_SIGPENDING)
'''


def test_shared_futex_is_refused(mode):
    """A shared futex (keyed by the page it sits on: two runs mapping the same image could
    signal each other) is refused; a private one works; RLIMIT_SIGPENDING is set."""
    report = judge(FUTEX, ["assert futex(0) == 1", "assert futex(128) == 11",
                           "assert sigpending() == (16, 16)"], mode)
    if "seccomp" not in report.isolation:
        pytest.skip("no seccomp filter here")
    assert [r.passed for r in report.results] == [True, True, True], report
