"""APPS-format problems (Hendrycks et al. 2021; CodeContests reads the same way) as Problems.

    problems.apps.load("apps_test.jsonl", limit=100)    # rows as on the hub (JSONL or JSON)
    problems.apps.load("APPS/test")                      # or the original folders: 0000/, ...
    problems.apps.from_row(row)                          # one row

A row holds `question`, `input_output` (JSON text or a dict: {"inputs": [...], "outputs":
[...]}, and "fn_name" for a call-based problem), optionally `solutions` (JSON text or a list),
`starter_code`, `difficulty`, `url`, `problem_id`. A stdin problem's cases become
verifiers.code.stdin_case tests, so grading (hidden_tests: every case) and the unit_tests
scorer (tests: the first `public` cases) judge them with run_io: the program reads stdin,
its stdout is compared whitespace-normalised, each case under a time limit. A call-based
problem's cases become asserts on its function (APPS's checker takes the output wrapped in a
one-item list, or not). A row that names a method of a class (LeetCode's `class Solution`)
is refused: the sandbox calls functions, not methods of the program's objects.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from search.types import Problem
from verifiers.code import stdin_case

INSTRUCTION = ("\n\nWrite a Python 3 program that reads the input from standard input and "
               "prints the answer to standard output.")


def load(path: str | os.PathLike[str], *, limit: int | None = None,
         public: int = 1) -> list[Problem]:
    """The problems of an APPS file (JSONL, or a JSON list of rows) or folder of problem
    folders (question.txt, input_output.json, solutions.json...), in order, at most `limit`.
    public: how many of each problem's cases are its public tests (the rest are hidden)."""
    where = Path(path).expanduser()
    if not where.exists():
        raise FileNotFoundError(f"no APPS file or folder at {where}")
    rows = _folder_rows(where) if where.is_dir() else _file_rows(where)
    out: list[Problem] = []
    for i, row in enumerate(rows):
        if limit is not None and len(out) >= limit:
            break
        try:
            out.append(from_row(row, public=public, source=str(where)))
        except ValueError as exc:
            raise ValueError(f"{where}: row {i}: {exc}") from None
    return out


def from_row(row: Mapping[str, Any], *, public: int = 1, source: str = "apps") -> Problem:
    """One APPS row as a Problem (see the module docstring)."""
    question = row.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ValueError("no question")
    io = _json(row.get("input_output"), "input_output")
    if not isinstance(io, dict):
        raise ValueError("input_output is not a JSON object")
    inputs, outputs = io.get("inputs"), io.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list) or not inputs or len(
            inputs) != len(outputs):
        raise ValueError("input_output needs equally long, non-empty inputs and outputs")
    fn_name = io.get("fn_name")
    starter = row.get("starter_code") or ""
    if fn_name is not None:
        if "class Solution" in starter:
            raise ValueError(f"{fn_name} is a method of class Solution, not a function")
        tests = [_call_test(str(fn_name), args, expected) for args, expected in zip(inputs, outputs)]
        prompt = question + (f"\n\n{starter}" if starter else "")
    else:
        tests = [stdin_case(_text(given), _text(expected)) for given, expected in zip(inputs, outputs)]
        prompt = question + INSTRUCTION
    solutions = row.get("solutions")
    solutions = _json(solutions, "solutions") if solutions else []
    pid = row.get("problem_id", row.get("id", ""))
    return Problem(prompt=prompt, id=f"apps/{pid}", domain="code", tests=tuple(tests[:public]),
                   hidden_tests=tuple(tests), entry_point=str(fn_name) if fn_name else None,
                   metadata={"source": "apps", "origin": source, "grader": "code",
                             "judge": "function" if fn_name else "stdin",
                             "solutions": [s for s in solutions if isinstance(s, str)],
                             "difficulty": row.get("difficulty"), "url": row.get("url")})


def _call_test(fn_name: str, args: Any, expected: Any) -> str:
    if not isinstance(args, list):
        raise ValueError(f"call-based inputs must be lists of arguments, got {args!r:.80}")
    ok = [expected, expected[0]] if isinstance(expected, list) and len(expected) == 1 else [
        expected]
    return f"assert {fn_name}(*{args!r}) in {ok!r}"


def _text(value: Any) -> str:
    """A case's input or output: APPS stores text, sometimes a list of lines."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "\n".join(value) + "\n"
    raise ValueError(f"a stdin case must be text, got {type(value).__name__}")


def _json(value: Any, what: str) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError as exc:
            raise ValueError(f"{what} is not JSON ({exc})") from None
    return value if value is not None else {}


def _file_rows(path: Path) -> Iterable[Mapping[str, Any]]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        rows = json.loads(text)
        return rows if isinstance(rows, list) else [rows]
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _folder_rows(path: Path) -> Iterable[Mapping[str, Any]]:
    """The original release: one folder per problem (or `path` itself is one)."""
    folders = [path] if (path / "question.txt").is_file() else sorted(
        p for p in path.iterdir() if (p / "question.txt").is_file())
    for folder in folders:
        row: dict[str, Any] = {"problem_id": folder.name,
                               "question": (folder / "question.txt").read_text(encoding="utf-8")}
        for name, key in (("input_output.json", "input_output"), ("solutions.json", "solutions"),
                          ("starter_code.py", "starter_code")):
            if (folder / name).is_file():
                row[key] = (folder / name).read_text(encoding="utf-8")
        if (folder / "metadata.json").is_file():
            meta = json.loads((folder / "metadata.json").read_text(encoding="utf-8"))
            row.update({k: meta[k] for k in ("difficulty", "url") if k in meta})
        yield row
