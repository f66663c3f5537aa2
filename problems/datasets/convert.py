"""Rows -> Problems: field mapping, column checks, per-row errors, and the converter for
datasets of your own.

A dataset of your own has a row per problem with these fields (map other column names with
fields={"problem": "question"}, on the command line --field problem=question):

    problem       the question or task text (required)
    answer        the gold answer (math); "rationale #### 42" keeps 42 (GSM8K's convention)
    tests         code: assert snippets run on the program to grade it (a list, or one string)
    public_tests  code: snippets the search may run (default none)
    entry_point   code: the function the tests call
    id            default: the row's index from 0; the Problem's id is "<source>/<id>"
    solution, subject, level, difficulty   kept in metadata (level/difficulty as integers)

A row with tests is a code task, else a math problem (a "domain" column overrides).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from problems.datasets.readers import Rows
from search.types import Problem

# row, its index from 0, the dataset's origin (for metadata and messages) -> a Problem
Convert = Callable[[dict[str, Any], int, str], Problem]
# columns a converter reads: a name, or a tuple of names of which one is enough
Needs = Sequence[str | tuple[str, ...]]

# GSM8K rationales mark calculator calls as "<<16-3-4=9>>"; they are tool markup, not prose.
CALC = re.compile(r"<<[^<>]*>>")
_THOUSANDS = re.compile(r"-?\d{1,3}(,\d{3})+(\.\d+)?")


def parse_fields(pairs: Sequence[str]) -> dict[str, str]:
    """["problem=question", ...] -> {"problem": "question"} (our field = the dataset's column)."""
    out: dict[str, str] = {}
    for pair in pairs:
        ours, sep, theirs = pair.partition("=")
        if not sep or not ours.strip() or not theirs.strip():
            raise ValueError(f"--field {pair!r}: expected FIELD=COLUMN, e.g. problem=question")
        out[ours.strip()] = theirs.strip()
    return out


def to_problems(rows: Rows, convert: Convert, needs: Needs,
                fields: Mapping[str, str] | None = None) -> list[Problem]:
    """Every row converted, after mapping `fields` ({our field: their column}); a missing
    column, a malformed row (named by its number from 1) or a repeated id is a ValueError."""
    columns = rows.columns
    fields = dict(fields or {})
    for ours, theirs in fields.items():
        if theirs not in columns:
            raise ValueError(f"{rows.origin}: no column {theirs!r} to read {ours!r} from "
                             f"(columns: {', '.join(columns) or 'none'})")
    have = set(columns) | set(fields)
    for need in needs:
        options = (need,) if isinstance(need, str) else need
        if rows.rows and not have & set(options):
            name = " or ".join(map(repr, options))
            raise ValueError(f"{rows.origin}: no column {name} (columns: {', '.join(columns)}); "
                             f"map one with --field {options[0]}=COLUMN")
    out = []
    for index, row in enumerate(rows.rows):
        mapped = {**row, **{ours: row[theirs] for ours, theirs in fields.items() if theirs in row}}
        try:
            out.append(convert(mapped, index, rows.origin))
        except KeyError as err:  # a bare KeyError('answer') would not say where
            raise ValueError(f"{rows.origin}: row {index + 1} lacks the field {err}") from None
        except (TypeError, AttributeError, ValueError) as err:
            raise ValueError(f"{rows.origin}: row {index + 1} is malformed ({err})") from None
    repeated = [i for i, n in Counter(p.id for p in out).items() if n > 1]
    if repeated:
        raise ValueError(f"{rows.origin}: problem ids repeat ({', '.join(repeated[:3])}); "
                         "each row needs its own id")
    return out


def number(value: Any) -> str:
    """A gold answer as text: integral floats lose their ".0"."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def text(row: Mapping[str, Any], field: str) -> str:
    value = row[field]
    if not isinstance(value, str):
        raise TypeError(f"{field!r} must be text, got {type(value).__name__}")
    return value


def _snippets(value: Any, field: str) -> tuple[str, ...]:
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(s, str) for s in items):
        raise TypeError(f"{field!r} must be a string or a list of strings")
    return tuple(s for s in items if s.strip())


def _integer(value: Any) -> Any:
    """3, 3.0 and "3" -> 3 (difficulty filters compare ints); anything else as it is."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        return int(value)
    return value


def gold(answer: Any, solution: Any) -> tuple[str, Any]:
    """(answer, solution) of a math row; "rationale #### 1,234" -> ("1234", "rationale")."""
    if isinstance(answer, str) and "####" in answer:
        rationale, _, final = answer.rpartition("####")
        final = final.strip()
        if _THOUSANDS.fullmatch(final):
            final = final.replace(",", "")
        return final, solution if solution is not None else CALC.sub("", rationale).strip()
    if answer is None or isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
        raise TypeError(f"'answer' must be text or a number, got {type(answer).__name__}")
    return number(answer), solution


def generic(source: str) -> Convert:
    """The converter for a dataset of your own, its ids prefixed with `source`."""

    def convert(row: dict[str, Any], index: int, origin: str) -> Problem:
        hidden = _snippets(row.get("tests"), "tests")
        domain = row.get("domain") or ("code" if hidden else "math")
        if domain not in ("math", "code"):
            raise ValueError(f"domain must be 'math' or 'code', got {domain!r}")
        answer, solution = None, row.get("solution")
        if domain == "code" and not hidden:
            raise ValueError("a code task needs tests to be graded with")
        if domain == "math":
            if "answer" not in row:
                raise KeyError("answer")
            answer, solution = gold(row["answer"], solution)
        extra = {k: _integer(row[k]) if k != "subject" else row[k]
                 for k in ("level", "difficulty", "subject") if row.get(k) is not None}
        return Problem(
            prompt=text(row, "problem"), id=f"{source}/{row.get('id', index)}", answer=answer,
            domain=domain, tests=_snippets(row.get("public_tests"), "public_tests"),
            hidden_tests=hidden, entry_point=row.get("entry_point"),
            metadata={**extra, "solution": solution, "source": source, "origin": origin,
                      "grader": domain})

    return convert


GENERIC_NEEDS: Needs = ("problem", ("answer", "tests"))
