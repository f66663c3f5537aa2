"""Test-time-compute reasoning search: `search.solve(problem, algo=..., budget=...)`."""

from search.types import Budget, Candidate, Node, Problem, Result, Step, Usage

__all__ = ["Budget", "Candidate", "Node", "Problem", "Result", "Step", "Usage", "solve", "algos"]


def __getattr__(name: str):  # lazy: importing `search` must not import torch
    if name == "solve":
        from search.solve import solve

        return solve
    if name == "algos":
        from search.registry import names

        return names()
    raise AttributeError(f"module 'search' has no attribute {name!r}")
