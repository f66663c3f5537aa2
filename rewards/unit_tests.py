"""A verifier reward for code: the share of a problem's public tests a finished program passes.

    scorer = UnitTestScorer()
    scorer.score(problem, nodes)  # -> [pass rate in [0, 1]] per node; unfinished nodes 0

Only `problem.tests` (the public tests) are run, never `problem.hidden_tests`: those are for
grading. Programs run in the sandbox of verifiers.code (a subprocess with namespaces, seccomp
and rlimits), never in this process. Each program actually run costs one scorer call; a
program already run for the same problem and tests is answered from a cache without a call.

Which program a solution text means (`program_of`):
  - a fenced ```python block (the last one), or a bare `def <entry_point>` (chat models, which
    rewrite the whole function): the problem's prompt is put in front when it is valid Python
    by itself, as HumanEval prompts are (imports, helpers, and the stub whose docstring-only
    body the solution's own def replaces), so the solution may use what the prompt imported;
  - otherwise the text is a completion of the prompt (base models continue the function body):
    prompt + text.
"""

from __future__ import annotations

from collections.abc import Sequence

from search.answers import extract_code
from search.budget import Meter
from search.types import Node, Problem


def _compiles(source: str) -> bool:
    try:
        compile(source, "<prompt>", "exec")
    except (SyntaxError, ValueError):
        return False
    return True


def program_of(problem: Problem, text: str) -> str:
    """The program a solution text stands for (see the module docstring)."""
    code = extract_code(text)
    if code is None and problem.entry_point and f"def {problem.entry_point}" in text:
        code = text
    if code is None:
        return problem.prompt + text
    return f"{problem.prompt.rstrip()}\n\n\n{code}\n" if _compiles(problem.prompt) else code


class UnitTestScorer:
    """Scorer: public-test pass rate of each finished node's program (0 if unfinished)."""

    def __init__(self, *, timeout: float = 5.0) -> None:
        self.timeout = timeout
        self.meter = Meter()
        self._cache: dict[tuple[str, tuple[str, ...], str], float] = {}

    def score(self, problem: Problem, nodes: Sequence[Node]) -> list[float]:
        return [self._pass_rate(problem, node) for node in nodes]

    def _pass_rate(self, problem: Problem, node: Node) -> float:
        if not node.finished or not problem.tests:
            return 0.0
        program = program_of(problem, node.text)
        key = (problem.id, problem.tests, program)
        if key not in self._cache:
            from verifiers.code import run_tests  # the sandbox; imported only when code is run

            report = run_tests(program, problem.tests, entry_point=problem.entry_point,
                               timeout=self.timeout)
            self.meter.charge_scorer(calls=1)
            self._cache[key] = report.pass_rate
        return self._cache[key]
