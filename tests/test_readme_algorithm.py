"""The README's example algorithm is a whole plug-in, and every algorithm test passes on it.

The source is read out of README.md ("Adding your own": the pycon block from its first
import to the end of the function, prompts stripped), written as a module of a package
installed the way the README documents (its entry-point table, `tts_search.algorithms`),
and run through the algorithm contract here; the slow test runs every algorithm test file
on it in a fresh process, the package on its path, as another user's installed one would
be.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import test_algos_contract as contract
from plugin_package import installed
from test_readme import README, blocks

from search import knobs, registry
from search.traits import traits

REPO = Path(__file__).resolve().parents[1]
# every test file that runs each registered algorithm (parametrized by its name)
ALGORITHM_TESTS = ("test_algos_contract.py", "test_algo_state.py", "test_budget_limits.py",
                   "test_eval_runner.py", "test_hardening_budget.py",
                   "test_hardening_determinism.py", "test_hardening_bad_input.py",
                   "test_knobs.py", "test_registry.py", "test_scorer_choice.py",
                   "test_select_ties.py", "test_serve.py", "test_eval_reuse.py",
                   "test_first_day_budgets.py")


def example() -> tuple[str, str]:
    """(name, module source) of the README's algorithm: the pycon lines from the block's
    first import to the function's last line, the `>>> ` and `... ` prompts stripped."""
    text = README.read_text()
    [block] = [b for b in blocks(text) if b.kind == "pycon" and "@rules(" in b.text]
    lines = block.text.split("\n")
    first = next(i for i, line in enumerate(lines) if line.startswith(">>> from "))
    deco = next(i for i, line in enumerate(lines) if line.startswith(">>> @rules("))
    end = next(i for i in range(deco + 1, len(lines)) if not lines[i].startswith("... "))
    source = "\n".join(line[4:] for line in lines[first:end]) + "\n"
    name = re.search(r"^def (\w+)\(", source, re.M)
    assert name is not None, source
    return name.group(1), source


def entry_points(name: str) -> tuple[str, str]:
    """(module, entry_points.txt text) for `name`, from the README's toml table."""
    found = []
    for block in (b for b in blocks(README.read_text()) if b.kind == "toml"):
        group = ""
        for line in block.text.split("\n"):  # tomllib is 3.11+; the project runs on 3.10
            if line.startswith("["):
                group = line
            elif group == '[project.entry-points."tts_search.algorithms"]' and (
                    m := re.match(rf'{name}\s*=\s*"([\w.]+:[\w.]+)"', line)):
                found.append(m.group(1))
    [target] = found
    return target.partition(":")[0], f"[tts_search.algorithms]\n{name} = {target}\n"


NAME, SOURCE = example()


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    module, points = entry_points(NAME)
    with installed(tmp_path, monkeypatch, module, SOURCE, points):
        assert NAME in registry.names()
        yield NAME


def test_the_example_is_a_whole_file_with_the_rules_the_readme_states():
    """Imports, one decorated function, nothing else; max_depth among its knobs (it does not
    declare another bound) and its width declared."""
    body = ast.parse(SOURCE).body
    assert [type(node).__name__ for node in body] == ["ImportFrom"] * 3 + ["FunctionDef"]
    space: dict[str, object] = {}
    exec(SOURCE, space)  # noqa: S102 - the README's own code
    fn = space[NAME]
    declared = traits(fn)  # type: ignore[arg-type]
    assert declared.depth_limit and "max_depth" in knobs.names(fn)  # type: ignore[arg-type]
    assert declared.width is not None and not declared.deterministic


@pytest.mark.parametrize("test", [contract.test_contract,
                                  contract.test_contract_tiny_budget_is_honest])
def test_the_algorithm_contract_holds_for_the_readme_algorithm(plugin, test):
    test(plugin)


@pytest.mark.slow
def test_every_algorithm_test_passes_on_the_readme_algorithm(tmp_path):
    """The algorithm test files in a fresh process with the README's package on its path
    (an installed distribution: its dist-info names the entry point), each test of the
    README's algorithm run (those parametrized by its name)."""
    module, points = entry_points(NAME)
    (tmp_path / f"{module}.py").write_text(SOURCE)
    info = tmp_path / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(points)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(tmp_path), str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow",
         "-k", NAME, *[str(REPO / "tests" / f) for f in ALGORITHM_TESTS]],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=3000)
    tail = done.stdout[-3000:]
    assert done.returncode == 0, tail
    passed = re.search(r"(\d+) passed", tail)
    # the algorithm tests parametrized by an algorithm's name: 23 of them when written
    assert passed is not None and int(passed.group(1)) >= 20 and "skipped" not in tail, tail
