"""Tests run as Python runs them, in runs whose calls no verdict changes (verifiers/_sandbox/
asserts.py): which tests ask one question, how a list of tests is cut into runs, and that a
program that learns from a message's extra call wins nothing; plus the judge's module and
MemoryError rules."""

from __future__ import annotations

import pytest
import test_sandbox
from test_sandbox_humaneval import _humaneval

import problems.humaneval  # noqa: F401 - at import: it sets the OpenMP environment once
from verifiers._sandbox import asserts
from verifiers.code import run_tests

canary = test_sandbox.canary
host_untouched = test_sandbox.host_untouched

FORMS = [  # (test, whether its calls are fixed before any answer is seen)
    ("assert f(1) == 2", True),
    ("assert f(1) == 2, 'the message'", True),
    ("assert abs(f(1) - 2) < 1e-6", True),
    ("xs = [1]\nimport math\nassert f(xs) != math.pi", True),
    ("assert math.isclose(f(1), 1)", False),
    ("f(1)", True),
    ("assert f(1) == 2, f'{f(1)}'", False),
    ("assert f(1) == 2 and g(2)", False),
    ("assert f(1) == g(2)", False),
    ("x = f(1)\nassert x == 2", False),
    ("assert any(f(x) for x in range(3))", False),
    ("assert 0 < f(1) < 3", False),
    ("assert f(1) if g() else 0", False),
    ("for i in range(3):\n    assert f(i) == i", False),
    ("assert sorted(f(1), key=len) == []", False),
    ("def check(c):\n    assert c(1) == 2\ncheck(f)", False),
]


@pytest.mark.parametrize(("test", "fixed"), FORMS)
def test_which_tests_ask_one_question(test, fixed):
    assert asserts.one_question(test) is fixed


def test_schedule_ends_a_run_after_each_test_whose_calls_can_depend_on_a_verdict():
    tests = ["assert f(1) == 2", "assert f(1) == 2 and f(2) == 3", "assert f(3) == 4",
             "assert f(4) == 5", "x = f(1)\nassert x", "assert f(5) == 6"]
    assert asserts.schedule(tests) == [[0, 1], [2, 3, 4], [5]]
    assert asserts.schedule([]) == []


def test_humaneval_checks_and_docstring_tests_run_in_few_processes():
    """Every HumanEval check is one test (one run); the docstring examples, one question
    each, mostly share one run."""
    tasks = _humaneval()
    assert all(len(asserts.schedule(list(p.hidden_tests))) == 1 for p in tasks)
    runs = [len(asserts.schedule(list(p.tests))) for p in tasks if p.tests]
    assert sum(r == 1 for r in runs) >= 0.8 * len(runs), runs


def test_a_program_memory_error_subclass_is_not_the_runs_memory_error():
    program = ("class Oops(MemoryError):\n    pass\ndef f():\n    raise Oops('mine')\n"
               "def g():\n    return [0] * 10 ** 10\n")
    own = run_tests(program, ["f()"])
    assert own.error is None and own.results[0].reason == "MemoryError: mine"
    real = run_tests(program, ["assert g()"], memory_mb=256)
    assert real.error == "memory"
    at_load = run_tests("class Oops(MemoryError):\n    pass\nraise Oops('x')\n", ["pass"])
    assert at_load.error == "program_error"


def test_the_judge_imports_a_module_only_under_its_own_name():
    """`import json as math` in the program does not make the judge import json for a test
    that says `math` (which module a test's name means is the test's choice)."""
    report = run_tests("import json as math\nimport math as json\n",
                       ["assert math.sqrt(4) == 2", "assert json is None"])
    assert [r.passed for r in report.results] == [False, False]
    assert "no name of the program" in report.results[0].reason


RECALLED = r'''
answers, pending = {}, [None]
def f(x):
    if pending[0] == x:  # called again at once with the same argument: the answer was wrong
        answers[x] = 2 * x if answers.get(x, 0) == 0 else 0
        pending[0] = None
        return answers[x]
    pending[0] = x
    return answers.setdefault(x, 0)
'''


def test_a_message_that_calls_again_teaches_nothing_within_a_run():
    """The program guesses 0, and takes an immediate second call with the same argument (an
    assert message evaluated because the assert failed) to mean "wrong". The message runs, as
    in Python, but ends its run: the tests after it start a new process, which never heard."""
    tests = ["assert f(1) == 2, f'f(1) gave {f(1)}'", "assert f(5) == 10", "assert f(1) == 2"]
    report = run_tests(RECALLED, tests, entry_point="f")
    assert report.num_passed == 0, report
    assert report.results[0].reason.startswith("AssertionError: f(1) gave")
