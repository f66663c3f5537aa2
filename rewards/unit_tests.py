"""A verifier reward for code: the share of a problem's public tests a finished program passes.

    scorer = UnitTestScorer()
    scorer.score(problem, nodes)  # -> [pass rate in [0, 1]] per node; unfinished nodes 0

Only `problem.tests` (the public tests) are run, never `problem.hidden_tests`: those are for
grading. Programs run in the sandbox of verifiers.code (a subprocess with namespaces, seccomp
and rlimits) and the tests in its trusted judge (another subprocess), never in this process. Each program actually run costs one scorer call; a
program already run for the same problem and tests is answered from a cache without a call.

Which program a solution text means: verifiers.grade.program_of.

Stdin/stdout problems (APPS, CodeContests: problems.apps) carry their cases as tests made by
verifiers.code.stdin_case; run_tests judges those with run_io (the program reads each case's
input, its output is compared whitespace-normalised, each case under its time limit), so the
reward is the share of public cases answered right, and PG-TD searches on them unchanged.

Every search it scores for records the sandbox its programs ran in on its meter (Meter.notes,
so Result.stats["sandbox"]): {"isolation": the report's layers, e.g. "bwrap,seccomp,rlimits",
"gaps": what that mode does not isolate here, verifiers.code.rlimits_gaps() under the
rlimits mode, else []}.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from search.scoring import registered_as
from search.session import Bindable
from search.types import Node, Problem
from verifiers.grade import program_of


@registered_as("unit_tests")
class UnitTestScorer(Bindable):
    """Scorer: public-test pass rate of each finished node's program (0 if unfinished)."""

    name = "unit_tests"

    def __init__(self, *, timeout: float = 5.0) -> None:
        self.timeout = timeout
        # (problem id, tests, program) -> (pass rate, the sandbox it ran in)
        self._cache: dict[tuple[str, tuple[str, ...], str], tuple[float, dict[str, Any]]] = {}

    def score(self, problem: Problem, nodes: Sequence[Node]) -> list[float]:
        """Each node's pass rate. One call is charged per program run in the sandbox (a
        program already run comes from the cache); a call that runs none (every program
        cached, or no node finished) is charged one per node, as any scorer's."""
        rated = [self._pass_rate(problem, node) for node in nodes]
        runs = sum(ran for _, ran in rated)
        self.meter.charge_scorer(calls=runs or len(nodes))
        return [rate for rate, _ in rated]

    def _pass_rate(self, problem: Problem, node: Node) -> tuple[float, bool]:
        """The node's pass rate, and whether its program ran now (not from the cache)."""
        if not node.finished or not problem.tests:
            return 0.0, False
        program = program_of(problem, node.text)
        key = (problem.id, problem.tests, program)
        ran = key not in self._cache
        if ran:
            from verifiers.code import run_tests  # the sandbox; imported only when code is run

            report = run_tests(program, problem.tests, entry_point=problem.entry_point,
                               timeout=self.timeout)
            self._cache[key] = (report.pass_rate, sandbox(report.isolation))
        rate, where = self._cache[key]
        self.meter.notes["sandbox"] = where
        return rate, ran


def sandbox(isolation: str) -> dict[str, Any]:
    """What Result.stats["sandbox"] says of a run with these layers ("bwrap,seccomp,rlimits"):
    the layers, and under the rlimits mode (no namespaces) what it leaves unisolated here."""
    from verifiers.code import rlimits_gaps

    layers = isolation.split(",") if isolation else []
    namespaced = any(mode in layers for mode in ("bwrap", "unshare"))
    return {"isolation": isolation,
            "gaps": [] if namespaced or not layers else sorted(rlimits_gaps())}
