"""The scripted grid that the sharded-eval tests run (tests/test_eval_ray.py on Ray workers,
tests/test_eval_workers.py on local worker processes) and compare with a run in this process:
three arith problems, a two-step scripted engine that can kill the process running it, and
row helpers. Everything is module level, so a worker unpickles it by reference (local
workers have tests/ on their path) or by value (Ray's cloudpickle)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from problems import arith
from reports.eval.grid import make_grid
from search.engines.fake import ScriptedEngine, ScriptedScorer

PROBLEMS = arith.generate(3, seed=7, difficulty=2)
GRID: dict[str, Any] = dict(algos=["best_of_n", "beam"], budgets=[2, 4], seeds=[0, 1],
                            dataset="arith")
CELLS = len(make_grid(PROBLEMS, GRID["algos"], GRID["budgets"], GRID["seeds"]))


def children(path: tuple[str, ...]) -> list[tuple[str, float]]:
    """Two steps: a first step, then "The answer is X." for each gold or a wrong X."""
    if not path:
        return [("think ", 0.6), ("guess ", 0.4)]
    if len(path) == 1:
        return [(f"The answer is {p.answer}.", 1.0) for p in PROBLEMS] + \
            [("The answer is 1.", 2.0)]
    return []


def value(path: tuple[str, ...]) -> float:
    return 0.9 if path[0] == "think " else 0.2


def scorer() -> ScriptedScorer:
    return ScriptedScorer(value)


class Engine(ScriptedEngine):
    """kill: a file; the first worker to expand after it appears takes it and dies.
    deadly: a problem id whose search kills whichever process starts it."""

    def __init__(self, kill: str | None = None, deadly: str | None = None) -> None:
        super().__init__(children, tokens_per_step=2)
        self.kill, self.deadly, self.name = kill, deadly, "scripted"

    def root(self, problem):
        if problem.id == self.deadly:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().root(problem)

    def expand(self, nodes, n=1, **kw):
        if self.kill and os.path.exists(self.kill):
            try:
                os.rename(self.kill, self.kill + ".taken")  # exactly one process wins
            except FileNotFoundError:
                pass
            else:
                os.kill(os.getpid(), signal.SIGKILL)
        return super().expand(nodes, n, **kw)


def strip(row: dict[str, Any]) -> dict[str, Any]:
    """A row without its timing fields."""
    out = {k: v for k, v in row.items() if k != "time"}
    out["usage"] = {k: v for k, v in row["usage"].items() if k != "seconds"}
    return out


def file_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def by_key(rows) -> dict[str, dict[str, Any]]:
    return {r["key"]: strip(r) for r in rows}
