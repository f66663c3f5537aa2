"""Grading a run: its chosen answer and every candidate, against the problem's gold; never raises.

    grader = Grader()
    grader.result(problem, result)          # -> Graded(correct, verified, error, unread) of the answer
    grader.candidates(problem, result)      # -> one Graded per candidate, in order

Math: verifiers.math.verify(gold, answer) on the extracted answer, the one the row records, so
a reader can re-check a row from its own fields. No answer (unfinished path, nothing
extractable) is wrong. verified = the arithmetic step checker's verdict on the whole solution
text (verifiers.grade.steps_verified: no wrong equation in it, and it reached an answer), the
imperfect verifier reports.studies.flaws studies on math; a candidate with no answer is not
verified.
Code: the program the text stands for (verifiers.grade.program_of: a fenced block, a bare
`def`, or a completion of the prompt) runs in the sandbox; correct = passes the hidden tests,
verified = passes the public ones (None when the problem has none). A finished candidate is
graded even when search.answers.extract found no program in it (completion-style text).
An exception while grading gives correct=False and error="Type: message".
Unread (math): the solution's conclusion was not read with confidence (verifiers.grade's
`unread`: a language no table reads, a cut-off text, doubt around an unmarked last
statement); never correct, its reason in `unread` so a report counts it apart from wrong
answers. Grader(guess=True) grades the last statement instead, as before abstention.
"""

from __future__ import annotations

from dataclasses import dataclass

from search.types import Candidate, Problem, Result

CACHE_SIZE = 4096  # code verdicts kept per Grader (programs repeat across seeds and algos)


@dataclass(frozen=True)
class Graded:
    correct: bool
    verified: bool | None = None
    error: str | None = None
    unread: str | None = None  # why the conclusion was not read (math); counted apart


class Grader:
    """Grades texts; remembers code verdicts, which cost two sandbox runs each."""

    def __init__(self, *, timeout: float = 5.0, guess: bool = False) -> None:
        self.timeout = timeout
        self.guess = guess
        self._code: dict[tuple[str, str], Graded] = {}

    def text(self, problem: Problem, text: str | None, *, solution: str | None = None
             ) -> Graded:
        """Grade one answer (math) or solution text (code); None grades as wrong. solution
        (math): the text the answer came from, verified by the step checker."""
        if text is None:
            return Graded(False)
        if problem.domain != "code":
            return self._grade(problem, text, solution)
        key = (problem.id, text)
        graded = self._code.get(key)  # (one lookup: safe while other threads grade too)
        if graded is None:
            if len(self._code) >= CACHE_SIZE:
                self._code.clear()
            graded = self._code[key] = self._grade(problem, text)
        return graded

    def _grade(self, problem: Problem, text: str, solution: str | None = None) -> Graded:
        from verifiers.grade import grade  # imports the sandbox only when grading starts

        try:
            g = grade(problem, text, timeout=self.timeout, solution=solution, guess=self.guess)
        except Exception as err:  # a grading failure is recorded, never fatal to the grid
            return Graded(False, None, f"{type(err).__name__}: {err}")
        return Graded(bool(g.correct), g.verified, None, g.unread)

    def candidate(self, problem: Problem, cand: Candidate) -> Graded:
        if problem.domain == "code":
            return self.text(problem, cand.text if cand.finished else None)
        if not cand.finished or cand.answer is None:
            return Graded(False, False)  # no answer reached: nothing for a verifier to accept
        return self.text(problem, cand.answer, solution=cand.text)

    def result(self, problem: Problem, result: Result) -> Graded:
        """The chosen answer; a run that chose nothing (answer None) is wrong."""
        if result.answer is None:
            return Graded(False)
        if problem.domain == "code":
            return self.text(problem, result.text)
        return self.text(problem, result.answer, solution=result.text)

    def candidates(self, problem: Problem, result: Result) -> list[Graded]:
        return [self.candidate(problem, c) for c in result.candidates]
