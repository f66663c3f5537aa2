"""Test-time-compute reasoning search: `search.solve(problem, algo=..., budget=...)`."""

import os
import sys

# OpenMP's idle threads sleep instead of spinning (set before torch loads its runtime, unless
# the user chose): with the default "active" policy, spinning threads starve a CPU-bound
# neighbour on a machine with few cores; results do not change (search/runtime/omp.py)
_chosen = os.environ.get("OMP_WAIT_POLICY")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# the policy OpenMP runs under: the user's, else ours, unless torch loaded its runtime first
WAIT_POLICY = (_chosen or ("" if "torch" in sys.modules else "PASSIVE")).upper()

from search.api import get_engine, solve  # noqa: E402  (torch loads only when a model does)
from search.many import solve_many  # noqa: E402
from search.registry import names as algorithms  # noqa: E402
from search.types import Budget, Candidate, Node, Problem, Result, Step, Usage  # noqa: E402

__all__ = ["Budget", "Candidate", "Node", "Problem", "Result", "Step", "Usage", "algorithms",
           "get_engine", "solve", "solve_many"]
