"""Test-time-compute reasoning search: `search.solve(problem, algo=..., budget=...)`."""

from search.api import get_engine, solve, solve_many  # noqa: E402  (torch loads only when a model does)
from search.registry import names as algorithms  # noqa: E402
from search.types import Budget, Candidate, Node, Problem, Result, Step, Usage

__all__ = ["Budget", "Candidate", "Node", "Problem", "Result", "Step", "Usage", "algorithms",
           "get_engine", "solve", "solve_many"]
