"""No two modules share a file name where a reader would take one for the other. The few that
do are listed here with the reason each pair stays apart in a reader's mind; any other
shared name fails."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("search", "verifiers", "rewards", "problems", "reports", "training")
PACKAGE_FILES = ("__init__.py", "__main__.py")  # every package's own
ALLOWED = {
    # each engine package's Engine class, named by its package (hf/, openai/); the engine
    # benchmark is `python -m reports.bench.engine`
    "engine.py": {"search/engines/hf/engine.py", "search/engines/openai/engine.py",
                  "reports/bench/engine.py"},
    # the benchmark of the host's share of a step, and the sandbox caller's side (the
    # machine that hosts the sandbox): in reports/bench/ and verifiers/_sandbox/
    "host.py": {"reports/bench/host.py", "verifiers/_sandbox/host.py"},
}


def shared() -> dict[str, set[str]]:
    found: dict[str, set[str]] = defaultdict(set)
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            if path.name not in PACKAGE_FILES:
                found[path.name].add(str(path.relative_to(REPO)))
    return {name: paths for name, paths in found.items() if len(paths) > 1}


def test_no_basename_is_shared_but_those_allowed():
    wrong = {name: sorted(paths) for name, paths in shared().items()
             if not paths <= ALLOWED.get(name, set())}
    assert not wrong, f"modules sharing a file name (rename one, or say why in ALLOWED): {wrong}"
