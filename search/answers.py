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


def written_code(problem: Problem, text: str) -> str | None:
    """Code a solution writes out in full: its last fenced block, or a bare
    `def <entry_point>` (chat models rewrite the whole function); else None."""
    code = extract_code(text)
    if code is None and problem.entry_point and f"def {problem.entry_point}" in text:
        code = text
    return code


def extract(problem: Problem, text: str) -> str | None:
    """The answer a solution gives: a math expression, or a program for code problems (the
    code it writes out, or else the prompt's stub completed by the text, as base models and
    the embedded tiny-code continue a function body)."""
    if problem.domain == "code":
        code = written_code(problem, text)
        return code if code is not None or not text.strip() else problem.prompt + text
    from verifiers.math import extract_answer

    return extract_answer(text)


def vote_key(problem: Problem, answer: str) -> str:
    """The form under which equal answers are counted together in a vote."""
    if problem.domain == "code":
        return answer.strip()
    from verifiers.math import normalize

    return normalize(answer)
