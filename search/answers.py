"""Final answers from solution text, by problem domain: what the core needs to vote and to
choose, read through extractors the plug-ins register (verifiers.domains registers "math"
and "code"), so the core holds no grader. READERS is a search.plugins.Registry: another
package adds a domain's reader by an entry point in the group "tts_search.answers" (name =
"module:reader", a Reader). With no reader at all (no plug-in loaded) the core reads the
last \\boxed{...} of a solution (PLAIN), so the default path still runs.

    register("math", extract=extract_answer, vote_key=normalize)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from search.plugins import Registry
from search.types import Problem


@dataclass(frozen=True)
class Reader:
    """How one domain's answers are read: extract(problem, text) -> the answer or None;
    vote_key(problem, answer) -> the form under which equal answers count together."""

    extract: Callable[[Problem, str], str | None]
    vote_key: Callable[[Problem, str], str]


READERS: Registry[Reader] = Registry("answers", "answer reader")


def register(domain: str, *, extract: Callable[[Problem, str], str | None],
             vote_key: Callable[[Problem, str], str]) -> None:
    """Read the answers of `domain`'s problems with these two functions."""
    READERS.add(domain, Reader(extract, vote_key))


def _last_boxed(text: str) -> str | None:
    """The contents of the last \\boxed{...} in text (braces balanced), else None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 1, start + len("\\boxed{")
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j].strip()
    return None  # unclosed


# the core's fallback: the last boxed answer, voted with its spaces removed
PLAIN = Reader(lambda _problem, text: _last_boxed(text),
               lambda _problem, answer: "".join(answer.split()))


def reader(problem: Problem) -> Reader:
    """The registered reader of the problem's domain (the plug-ins are loaded first); a
    domain nobody registered reads as "math", Problem's default domain; with no "math"
    reader either (no plug-in loaded), the core's PLAIN reader."""
    for domain in (problem.domain, "math"):
        if domain in READERS:
            return READERS.get(domain)
    return PLAIN


def extract(problem: Problem, text: str) -> str | None:
    """The answer a solution gives: a math expression, or a program for code problems (the
    code it writes out, or else the prompt's stub completed by the text, as base models and
    the embedded tiny-code continue a function body)."""
    return reader(problem).extract(problem, text)


def vote_key(problem: Problem, answer: str) -> str:
    """The form under which equal answers are counted together in a vote."""
    return reader(problem).vote_key(problem, answer)
