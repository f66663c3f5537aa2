"""Final answers from solution text, by problem domain: what the core needs to vote and to
choose, read through extractors the plug-ins register (verifiers.answers registers "math"
and "code"), so the core holds no grader.

    register("math", extract=extract_answer, vote_key=normalize)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from search.types import Problem


@dataclass(frozen=True)
class Reader:
    """How one domain's answers are read: extract(problem, text) -> the answer or None;
    vote_key(problem, answer) -> the form under which equal answers count together."""

    extract: Callable[[Problem, str], str | None]
    vote_key: Callable[[Problem, str], str]


READERS: dict[str, Reader] = {}


def register(domain: str, *, extract: Callable[[Problem, str], str | None],
             vote_key: Callable[[Problem, str], str]) -> None:
    """Read the answers of `domain`'s problems with these two functions."""
    READERS[domain] = Reader(extract, vote_key)


def reader(problem: Problem) -> Reader:
    """The registered reader of the problem's domain (the plug-ins are loaded first); a
    domain nobody registered reads as "math", Problem's default domain."""
    if problem.domain not in READERS:
        from search import plugins

        plugins.load()
    found = READERS.get(problem.domain) or READERS.get("math")
    if found is None:
        raise ValueError(f"no answer reader for domain {problem.domain!r} (problem "
                         f"{problem.id!r}) and none for 'math'; known: "
                         f"{', '.join(sorted(READERS)) or 'none'}")
    return found


def extract(problem: Problem, text: str) -> str | None:
    """The answer a solution gives: a math expression, or a program for code problems (the
    code it writes out, or else the prompt's stub completed by the text, as base models and
    the embedded tiny-code continue a function body)."""
    return reader(problem).extract(problem, text)


def vote_key(problem: Problem, answer: str) -> str:
    """The form under which equal answers are counted together in a vote."""
    return reader(problem).vote_key(problem, answer)
