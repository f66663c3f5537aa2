"""Final answers from solution text, by problem domain."""

from __future__ import annotations

import re

from search.types import Problem

_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)(?:```|\Z)", re.S)


def extract_code(text: str) -> str | None:
    """The last fenced code block (an unterminated final fence counts), else None."""
    blocks = [b.strip("\n") for b in _FENCE.findall(text)]
    blocks = [b for b in blocks if b.strip()]
    return blocks[-1] if blocks else None


def extract(problem: Problem, text: str) -> str | None:
    """The answer a solution gives: a math expression, or a program for code problems."""
    if problem.domain == "code":
        code = extract_code(text)
        if code is None and problem.entry_point and f"def {problem.entry_point}" in text:
            code = text  # a bare function, as completion-style models write it
        return code
    from verifiers.math import extract_answer

    return extract_answer(text)


def vote_key(problem: Problem, answer: str) -> str:
    """The form under which equal answers are counted together in a vote."""
    if problem.domain == "code":
        return answer.strip()
    from verifiers.math import normalize

    return normalize(answer)
