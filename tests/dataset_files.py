"""Small datasets written in the formats problems.datasets reads, for tests/test_datasets*.py:
JSONL, JSON, CSV, Parquet, save_to_disk folders, and `datasets` cache entries for hub ids."""

from __future__ import annotations

import csv
import dataclasses
import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from search.types import Problem

MATH500 = [
    {"problem": "Compute $2+3$.", "solution": "$2+3=\\boxed{5}$.", "answer": "5",
     "subject": "Prealgebra", "level": 1, "unique_id": "test/prealgebra/1.json"},
    {"problem": "Solve $x^2=4$ for $x>0$.", "solution": "$x=\\boxed{2}$.", "answer": "2",
     "subject": "Algebra", "level": 3, "unique_id": "test/algebra/7.json"},
    {"problem": "What is $\\frac{1}{2}+\\frac{1}{3}$?", "solution": "$\\boxed{\\frac56}$",
     "answer": "\\frac{5}{6}", "subject": "Prealgebra", "level": 2,
     "unique_id": "test/prealgebra/9.json"},
]
# The local copy (Qwen2.5-Math's) numbers rows with idx; openai/gsm8k has no such column.
GSM8K = [{"question": f"Ann has {n} apples and buys {n} more. How many now?",
          "answer": f"She has {n} + {n} = <<{n}+{n}={2 * n}>>{2 * n}.\n#### {2 * n:,}", "idx": i}
         for i, n in enumerate((3, 600, 7))]
AIME24 = [{"id": 60 + i, "problem": f"Find the remainder of {n} divided by 1000.",
           "solution": f"It is {n % 1000:03d}.", "answer": f"{n % 1000:03d}",
           "url": f"https://example.org/{i}"} for i, n in enumerate((1025, 2113))]
# The local copy stores the text twice (problem and question) and answers as floats.
AMC23 = [{"id": i, "problem": f"How many sides has a {s}?", "question": f"How many sides has a {s}?",
          "answer": float(n), "url": f"https://example.org/amc/{i}"}
         for i, (s, n) in enumerate((("triangle", 3), ("hexagon", 6)))]
HUMANEVAL = [{"task_id": "HumanEval/0", "entry_point": "inc",
              "prompt": 'def inc(x):\n    """>>> inc(1)\n    2\n    """\n',
              "canonical_solution": "    return x + 1\n",
              "test": "def check(candidate):\n    assert candidate(1) == 2\n"}]
LOCAL = {"math500": MATH500, "gsm8k": GSM8K, "aime24": AIME24, "amc23": AMC23,
         "humaneval": HUMANEVAL}


def hub_rows(name: str, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows as the hub copy holds them: gsm8k without idx, amc23 with only question."""
    drop = {"gsm8k": {"idx"}, "amc23": {"problem"}}.get(name, set())
    return [{k: v for k, v in r.items() if k not in drop} for r in rows]


def write_jsonl(file: Path, rows: Sequence[dict[str, Any]]) -> Path:
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return file


def write_csv(file: Path, rows: Sequence[dict[str, Any]]) -> Path:
    with file.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return file


def dataset(rows: Sequence[dict[str, Any]]) -> Any:
    import datasets

    return datasets.Dataset.from_list(list(rows))


def write_parquet(file: Path, rows: Sequence[dict[str, Any]]) -> Path:
    dataset(rows).to_parquet(str(file))
    return file


def save_folder(folder: Path, rows: Sequence[dict[str, Any]], split: str | None = None) -> Path:
    """Dataset.save_to_disk, or DatasetDict({split: ...}) when split is given."""
    import datasets

    found = dataset(rows)
    (datasets.DatasetDict({split: found}) if split else found).save_to_disk(str(folder))
    return folder


def cache_entry(cache: Path, repo: str, rows: Sequence[dict[str, Any]], *, split: str,
                config: str = "default", commit: str = "0" * 40) -> Path:
    """A `datasets` cache entry for hub dataset `repo`, as load_dataset leaves one after a
    download: the library's Parquet builder prepares the Arrow file and dataset_info.json
    under <name>/<config>/0.0.0/<commit>, then the folder takes the hub layout's
    "<owner>___<name>" (the builder adds the owner only for data files on the hub)."""
    from datasets.naming import camelcase_to_snakecase
    from datasets.packaged_modules.parquet.parquet import Parquet

    owner, name = repo.split("/")
    build = cache / "build"
    source = write_parquet(cache / f"{owner}-{name}-{split}.parquet", rows)
    builder = Parquet(cache_dir=str(build), dataset_name=name, config_name=config,
                      config_id=config, data_files={split: str(source)}, hash=commit)
    builder.download_and_prepare()
    snake = camelcase_to_snakecase(name)
    target = cache / f"{owner}___{snake}"
    shutil.copytree(build / snake, target, dirs_exist_ok=True)
    shutil.rmtree(build)
    source.unlink()
    return target


def same(p: Problem) -> Problem:
    """The Problem without where it was read from (the only field that differs by source)."""
    return dataclasses.replace(p, metadata={k: v for k, v in p.metadata.items()
                                            if k != "origin"})
