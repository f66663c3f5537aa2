"""Grading a solution text against a problem's gold: one entry point for every report.

    g = grade(problem, text)
    g.correct    # math: the final answer equals the gold (verifiers.math.verify);
                 # code: the program passes the hidden tests (the full check)
    g.verified   # code: the program passes the public tests, i.e. what a search could check
                 # without the gold (None for math, where no cheap verifier is implied)

A public-passing program that fails its hidden tests is a false positive of public-test
verification (`g.false_positive`). Programs run only in the sandbox of verifiers.code.

Which program a solution text means (`program_of`):
  - a fenced ```python block (the last one), or a bare `def <entry_point>` (chat models, which
    rewrite the whole function): the problem's prompt is put in front when it is valid Python
    by itself, as HumanEval prompts are (imports, helpers, and the stub whose docstring-only
    body the solution's own def replaces), so the solution may use what the prompt imported;
  - otherwise the text is a completion of the prompt (base models continue the function body):
    prompt + text.
"""

from __future__ import annotations

from dataclasses import dataclass

from search.answers import written_code
from search.types import Problem
from verifiers.code import TestReport, run_tests
from verifiers.math import verify


@dataclass(frozen=True)
class Grade:
    correct: bool
    verified: bool | None = None  # public tests passed (code); None where there are none
    detail: str = ""  # why it is wrong, when it is

    @property
    def false_positive(self) -> bool:
        return bool(self.verified) and not self.correct


def _compiles(source: str) -> bool:
    try:
        compile(source, "<prompt>", "exec")
    except (SyntaxError, ValueError):
        return False
    return True


def program_of(problem: Problem, text: str) -> str:
    """The program a solution text stands for (see the module docstring)."""
    code = written_code(problem, text)
    if code is None:
        return problem.prompt + text
    return f"{problem.prompt.rstrip()}\n\n\n{code}\n" if _compiles(problem.prompt) else code


def grade(problem: Problem, text: str, *, timeout: float = 5.0) -> Grade:
    """Grade `text` against `problem`'s gold answer (math) or hidden tests (code)."""
    if problem.domain == "code":
        if not problem.hidden_tests:
            raise ValueError(f"code problem {problem.id!r} has no hidden tests to grade with")
        program = program_of(problem, text)
        def run(tests: tuple[str, ...]) -> TestReport:
            return run_tests(program, tests, entry_point=problem.entry_point, timeout=timeout)

        public = run(problem.tests).passed_all if problem.tests else None
        hidden = run(problem.hidden_tests)
        detail = "" if hidden.passed_all else (hidden.detail or
                                               f"{hidden.num_passed}/{len(hidden.results)} "
                                               "hidden tests passed")
        return Grade(hidden.passed_all, public, detail)
    if problem.answer is None:
        raise ValueError(f"math problem {problem.id!r} has no gold answer to grade with")
    verdict = verify(str(problem.answer), text)
    return Grade(verdict.correct, None, "" if verdict.correct else verdict.reason)
