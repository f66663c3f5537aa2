"""What the synthetic generators (problems.arith, problems.codegen) share: the check of a
request for n problems at one difficulty."""

from __future__ import annotations


def check_request(n: int, difficulty: int, low: int, high: int, unit: str) -> None:
    """ValueError unless low <= difficulty <= high (`unit`s per problem: "operations",
    "stages") and n >= 0."""
    if not low <= difficulty <= high:
        raise ValueError(f"difficulty must be in [{low}, {high}] {unit}, got {difficulty}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
