"""Answers of free text: the "text" domain of the server's problems (search.answers reads a
problem's answers by its domain). A request with an `answer_pattern` (a regular expression)
answers what its last match captures (its first group, else the whole match), None where
nothing matches; without one, the answer is the whole reply, stripped. Equal answers vote
together when they read the same up to case, spaces and a closing full stop ("Paris." and
"paris" are one answer).

    extract(Problem(prompt="x", domain="text", metadata={"answer_pattern": r"= (\\d+)"}),
            "2 + 3 = 5") == "5"
"""

from __future__ import annotations

import functools
import re

from search import answers
from search.types import Problem

TEXT = "text"  # the domain
ANSWER_PATTERN = "answer_pattern"  # the Problem.metadata key of the request's pattern


@functools.lru_cache(maxsize=256)
def pattern(text: str) -> re.Pattern[str]:
    """The compiled pattern; ValueError naming what is wrong with it."""
    try:
        compiled = re.compile(text, re.MULTILINE)
    except re.error as err:
        raise ValueError(f"answer_pattern {text!r} is not a regular expression: {err}") from None
    if compiled.groups > 1:
        raise ValueError(f"answer_pattern {text!r} has {compiled.groups} groups; give one (the "
                         "answer) or none (the whole match)")
    return compiled


def extract(problem: Problem, text: str) -> str | None:
    """The answer of a reply (see the module doc)."""
    given = problem.metadata.get(ANSWER_PATTERN)
    if given is None:
        return text.strip() or None
    matches = list(pattern(given).finditer(text))
    if not matches:
        return None
    last = matches[-1]
    answer = (last.group(1) if last.re.groups else last.group(0)) or ""
    return answer.strip() or None


def vote_key(problem: Problem, answer: str) -> str:
    """The form under which equal answers count together."""
    del problem
    return " ".join(answer.split()).rstrip(".").casefold()


answers.register(TEXT, extract=extract, vote_key=vote_key)
