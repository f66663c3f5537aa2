"""The judge's rule: no code of a test runs, or runs differently, because an answer was right or
wrong (verifiers/_sandbox/judge.py, _Asserts). Measured from the program's side: the calls it
gets. HumanEval/77, 78, 95, 97, 117 and 148 have asserts whose message calls the candidate
again; a judge that evaluates a message only when its assert fails gives a wrong answer one
more call, which a program can count."""

from __future__ import annotations

import pytest
import test_sandbox
from test_sandbox_humaneval import _humaneval, _parallel

import problems.humaneval  # noqa: F401 - at import: it sets the OpenMP environment once
from verifiers.code import run_tests

canary = test_sandbox.canary
host_untouched = test_sandbox.host_untouched

MARK = "<call>"
# Appended to a canonical solution: the entry point, wrapped, writes MARK on each call from
# the judge (not on the solution's own recursive calls) and returns what ANSWER makes of the
# right result.
COUNTER = '''
import os as _tts_os
_tts_real, _tts_depth, _tts_calls = {entry}, [0], [0]
def _tts_perturbed(r):
    if type(r) is bool:
        return not r
    if type(r) in (int, float):
        return r + 1
    if type(r) is str:
        return r + "x"
    if type(r) in (list, tuple):
        return type(r)([*r, None])
    return 0 if r is None else None
def {entry}(*args, **kwargs):
    _tts_depth[0] += 1
    try:
        r = _tts_real(*args, **kwargs)
    finally:
        _tts_depth[0] -= 1
    if _tts_depth[0]:
        return r
    _tts_os.write(1, b"{mark}")
    _tts_calls[0] += 1
    return {answer}
'''
ANSWERS = {
    "right": "r",
    "perturbed": "_tts_perturbed(r)",
    "none": "None",
    "every_other_wrong": "_tts_perturbed(r) if _tts_calls[0] % 2 else r",
    "raises": "(_ for _ in ()).throw(ValueError('wrong'))",
}


def _calls(problem, answer: str) -> tuple[int, bool]:
    program = problem.metadata["solution"] + COUNTER.format(
        entry=problem.entry_point, mark=MARK, answer=ANSWERS[answer])
    report = run_tests(program, problem.hidden_tests, entry_point=problem.entry_point,
                       timeout=20)
    assert report.error is None, (problem.id, answer, report)
    return report.output.count(MARK), report.passed_all


@pytest.mark.parametrize("answer", sorted(set(ANSWERS) - {"right"}))
def test_humaneval_calls_do_not_depend_on_the_answers(answer):
    """All 164 HumanEval tests: each makes as many calls into a wrong solution as into the
    canonical one (and the wrong one fails, the canonical one passes)."""
    problems = _humaneval()
    right = _parallel(lambda p: _calls(p, "right"), problems)
    wrong = _parallel(lambda p: _calls(p, answer), problems)
    assert all(passed for _, passed in right)
    assert [p.id for p, (_, passed) in zip(problems, wrong) if passed] == []
    differ = {p.id: (r[0], w[0]) for p, r, w in zip(problems, right, wrong) if r[0] != w[0]}
    # a raise the test's own statement does not catch ends the test: HumanEval/32's
    # `solution = candidate(...)` is outside its assert (and raising, the program knows
    # its answer is no answer: that tells it nothing of which answers are right)
    assert differ == ({"humaneval/32": (100, 1)} if answer == "raises" else {})
    assert min(count for count, _ in right) >= 1


PROGRAM = "def f(x):\n    print('call', x)\n    return x + 1 if x != 3 else 0\n"


def _seen(test: str) -> tuple[list[str], str]:
    report = run_tests(PROGRAM, [test], entry_point="f")
    reason = report.results[0].reason if not report.passed_all else ""
    return report.output.split("call ")[1:], reason


@pytest.mark.parametrize(("test", "calls", "reason"), [
    # a message calling the program is never run, right or wrong; a constant one is the reason
    ("assert f(1) == 2, f'{f(100)}'", ["1\n"], ""),
    ("assert f(3) == 4, f'{f(100)}'", ["3\n"],
     "AssertionError (line 1; its message is not evaluated)"),
    ("assert f(3) == 4, 'three'\nassert f(4) == 5", ["3\n", "4\n"], "AssertionError: three"),
    # an assert that raises is recorded, and the test goes on
    ("assert f(None) == 1\nassert f(7) == 8", ["None\n", "7\n"], "TypeError"),
    # every operand of a top-level and/or, every item of all()/any()
    ("assert f(3) == 4 and f(5) == 6 and f(6) == 7", ["3\n", "5\n", "6\n"], "AssertionError"),
    ("assert f(1) == 2 or f(5) == 6", ["1\n", "5\n"], ""),
    ("assert all(f(i) == i + 1 for i in range(2, 6))", ["2\n", "3\n", "4\n", "5\n"],
     "AssertionError"),
    ("assert any(f(i) == i + 1 for i in range(1, 4))", ["1\n", "2\n", "3\n"], ""),
    # the verdicts short-circuiting gives: a later operand's error after the deciding one
    ("assert f(1) == 2 or f(None)", ["1\n", "None\n"], ""),
    ("assert f(3) == 4 and f(None)", ["3\n", "None\n"], "AssertionError"),
    ("assert f(None) or f(1) == 2", ["None\n", "1\n"], "TypeError"),
    # both sides of a comparison, every argument (HumanEval/33: tuple(f(x)) == tuple(f(y)))
    ("assert tuple(f(3)) == tuple(f(1))", ["3\n", "1\n"], "TypeError"),
    ("assert [f(None), f(2)] == [1, 3]", ["None\n", "2\n"], "TypeError"),
    ("assert max(f(None), f(2), key=f(5)) > 0", ["None\n", "2\n", "5\n"], "TypeError"),
    # a part that raised never reaches the operation (no `Raised != 5` that passes)
    ("assert f(f(None) + f(1)) != 5", ["None\n", "1\n"], "TypeError"),
    ("assert not (f(None) + 1 < f(2))", ["None\n", "2\n"], "TypeError"),
])
def test_the_rule_on_each_form(test, calls, reason):
    seen, got = _seen(test)
    assert seen == calls
    assert got.startswith(reason) and (reason or not got)


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
    assert report.results[0].reason.startswith("NameError")


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
    assert message evaluated because the assert failed) to mean "wrong". It passed the third
    test when messages ran on failure; now it never hears, and passes nothing."""
    tests = ["assert f(1) == 2, f'f(1) gave {f(1)}'", "assert f(5) == 10", "assert f(1) == 2"]
    report = run_tests(RECALLED, tests, entry_point="f")
    assert report.num_passed == 0, report
    assert report.results[0].reason == "AssertionError (line 1; its message is not evaluated)"
