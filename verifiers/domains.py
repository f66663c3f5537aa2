"""Reading answers out of solution text, registered with the core (search.answers) as the
readers of the "math" and "code" domains; search.plugins imports this module.

math: the final answer (verifiers.math.extract_answer), voted under its normal form.
code: the program the solution writes out (its last fenced block, or a bare
`def <entry_point>`), else the prompt's stub completed by the text (base models and the
embedded tiny-code continue a function body); voted under its stripped text.
"""

from __future__ import annotations

import re

from search import answers
from search.types import Problem
from verifiers.math import extract_answer, normalize

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


def code_answer(problem: Problem, text: str) -> str | None:
    """A code solution's program: the code it writes out, else the prompt's stub completed
    by the text (None for empty text)."""
    code = written_code(problem, text)
    return code if code is not None or not text.strip() else problem.prompt + text


answers.register("math", extract=lambda _problem, text: extract_answer(text),
                 vote_key=lambda _problem, answer: normalize(answer))
answers.register("code", extract=code_answer, vote_key=lambda _problem, answer: answer.strip())
