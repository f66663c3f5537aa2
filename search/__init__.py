"""Test-time-compute reasoning search: `search.solve(problem, algo=..., budget=...)`."""

# (no module imported here loads torch: search.runtime.omp sets OpenMP's wait policy first)
from search.api import get_engine, solve
from search.many import solve_many
from search.registry import names as algorithms
from search.runtime.omp import WAIT_POLICY
from search.types import Budget, Candidate, Node, Problem, Result, Step, Usage

__all__ = ["WAIT_POLICY", "Budget", "Candidate", "Node", "Problem", "Result", "Step", "Usage",
           "algorithms", "get_engine", "solve", "solve_many"]
