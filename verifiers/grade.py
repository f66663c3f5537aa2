"""Grading a solution text against a problem's gold: one entry point for every report.

    g = grade(problem, text)
    g.correct    # math: the final answer equals the gold (verifiers.math.verify; a choice
                 # problem's options, in its metadata or its prompt, let a letter match its
                 # option's text);
                 # code: the program passes the hidden tests (the full check)
    g.verified   # what a search could check without the gold: code, the program passes
                 # the public tests; math, given `solution=` (the text the answer came from),
                 # the arithmetic step checker finds no wrong equation in it; else None

    grade(problem, answer, solution=text)    # math: grade `answer`, verify `text`
    g.unread     # math: why the conclusion of the text (`solution`'s when given) was not read
                 # with confidence (verifiers.math.verify's `unread`): never correct, counted
                 # apart from wrong answers; guess=True grades the last statement instead

A public-passing program that fails its hidden tests is a false positive of public-test
verification (`g.false_positive`); a right-looking calculation that reaches a wrong answer (a
skipped or misread step: the checker knows arithmetic, not the problem) is one of the step
checker's. Programs run only in the sandbox of verifiers.code.

The step checker as a verifier of a whole solution (`steps_verified`): verifiers.steps.check_step
on every line (steps end at a blank line, so a line never spans two; checking the text in one
piece would join a line's last number to the next line's first); it passes when no equation is
wrong, including a solution with none to check, which the checker has nothing against.

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

from search.types import Problem
from verifiers._math import choice
from verifiers.code import TestReport, run_tests
from verifiers.domains import written_code
from verifiers.math import unread_reason, verify
from verifiers.steps import check_step


@dataclass(frozen=True)
class Grade:
    correct: bool
    verified: bool | None = None  # public tests (code) / step checker (math); None: no check
    detail: str = ""  # why it is wrong, when it is
    unread: str | None = None  # math: why the conclusion was not read with confidence

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


def options_of(problem: Problem) -> dict[str, str]:
    """A multiple-choice problem's options, {letter: text}: its metadata's "choices" /
    "options" (a list, lettered A, B, ..., or a mapping), else those its prompt lists ("(A) 12
    (B) 27", or one a line); {} for a problem with none."""
    given = problem.metadata.get("choices") or problem.metadata.get("options")
    return choice.options_of(given if given else problem.prompt)


def steps_verified(solution: str) -> bool:
    """The step checker's verdict on a whole solution: no line has a wrong equation."""
    return all(check_step(line).status != "wrong" for line in solution.splitlines())


def grade(problem: Problem, text: str, *, timeout: float = 5.0,
          solution: str | None = None, guess: bool = False) -> Grade:
    """Grade `text` against `problem`'s gold answer (math) or hidden tests (code). solution
    (math): the full solution `text` was extracted from, to verify with the step checker;
    its conclusion must be read with confidence, else the grade is unread. guess (math): read
    the last statement where the conclusion is unsure (verifiers.math.verify)."""
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
    verdict = verify(str(problem.answer), text, options=options_of(problem), guess=guess)
    verified = None if solution is None else bool(text.strip()) and steps_verified(solution)
    unread = verdict.unread or (None if guess or solution is None else unread_reason(solution))
    if unread:
        return Grade(False, verified, f"unread: {unread}", unread)
    return Grade(verdict.correct, verified, "" if verdict.correct else verdict.reason)
