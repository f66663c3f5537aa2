"""reports/bench/engine.py's counterfactual prefill count, by hand on a small tree."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from search.types import Node, Problem, Step

spec = importlib.util.spec_from_file_location(
    "bench_engine", Path(__file__).resolve().parents[1] / "reports" / "bench" / "engine.py")
assert spec is not None and spec.loader is not None
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def step(n: int) -> Step:
    return Step("x" * n, tuple(range(n)), (0.0,) * n, "stop")


def test_resent_prefixes_counts_every_expanded_sequence_once():
    root = Node(problem=Problem(prompt="q"), prompt_ids=[1] * 10)  # a 10-token prompt
    a, b = Node(parent=root, step=step(3)), Node(parent=root, step=step(4))
    a1, a2 = Node(parent=a, step=step(2)), Node(parent=a, step=step(5))
    Node(parent=a1, step=step(1))
    Node(parent=b, step=step(6))
    # expanded: root (10), a (10+3), a1 (10+3+2), b (10+4); leaves a2 and b's child are not
    assert bench.resent_prefixes(root) == 10 + 13 + 15 + 14
    assert bench.resent_prefixes(a2) == 0
