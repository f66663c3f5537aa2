"""The layers hold: search/ (the core) imports no plug-in (rewards, verifiers, problems,
reports) at run time, and the project's modules import each other without a cycle; every
algorithm ends through the one finish path of search/algos/_run.py.

Imports are read with `ast` from every module, function-level ones included; only those under
`if TYPE_CHECKING:` are left out (they never run). `import a.b` or `from a.b import c` is an
edge to the module a.b (or a.b.c when that is a module); the parent package's __init__ that
Python runs on the way is not an edge, or every package would be a cycle with its own
__init__. `import a` and `from a import name` (a a package, name not a submodule) are edges to
a's __init__."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORE = "search"
PLUGINS = ("rewards", "verifiers", "problems", "reports")
PACKAGES = (CORE, *PLUGINS)


def modules(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under each package (a package is its
    __init__)."""
    out: dict[str, Path] = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _type_checking(test: ast.expr) -> bool:
    """`if TYPE_CHECKING:` or `if typing.TYPE_CHECKING:`."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def runtime_imports(tree: ast.AST) -> list[tuple[int, ast.Import | ast.ImportFrom]]:
    """Every import statement that can run (at any depth: functions, try, if), skipping the
    bodies of `if TYPE_CHECKING:` (their else branches run)."""
    found: list[tuple[int, ast.Import | ast.ImportFrom]] = []

    def walk(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node.test):
            for child in node.orelse:
                walk(child)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append((node.lineno, node))
        for child in ast.iter_child_nodes(node):
            walk(child)

    walk(tree)
    return found


def _absolute(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute name a (possibly relative) `from ... import` names."""
    if not node.level:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def edges(root: Path, packages: tuple[str, ...]) -> list[tuple[str, str, str]]:
    """(importer, imported, "file:line") for every runtime import of a project module."""
    mods = modules(root, packages)
    out: list[tuple[str, str, str]] = []
    for module, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        for line, node in runtime_imports(tree):
            where = f"{path.relative_to(root)}:{line}"
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = _absolute(module, path, node)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                           for a in node.names]
            for target in targets:
                # `import a.b.c` of a non-module attribute path: the longest module prefix
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                if target and target != module:
                    out.append((module, target, where))
    return out


def core_violations(root: Path, core: str, plugins: tuple[str, ...]) -> list[str]:
    """'file:line imports X' for each runtime import of a plug-in from inside the core."""
    return [f"{where} imports {dst}" for src, dst, where in edges(root, (core, *plugins))
            if src.split(".")[0] == core and dst.split(".")[0] in plugins]


def cycles(root: Path, packages: tuple[str, ...]) -> list[list[str]]:
    """The import graph's strongly connected components of more than one module (Tarjan's
    algorithm, iterative), each sorted: every module in one imports every other, through a
    chain of imports."""
    graph: dict[str, set[str]] = {m: set() for m in modules(root, packages)}
    for src, dst, _ in edges(root, packages):
        graph[src].add(dst)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work: list[tuple[str, list[str]]] = [(start, sorted(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph[nxt])))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _describe(component: list[str], root: Path, packages: tuple[str, ...]) -> str:
    """A cycle with the import lines that close it."""
    members = set(component)
    lines = [f"  {where}: {src} -> {dst}" for src, dst, where in edges(root, packages)
             if src in members and dst in members]
    return " <-> ".join(component) + "\n" + "\n".join(lines)


# -- the project --------------------------------------------------------------------------------
def test_core_imports_no_plugin_at_run_time():
    bad = core_violations(ROOT, CORE, PLUGINS)
    assert not bad, "search/ (the core) imports a plug-in at run time (move what it needs " \
        "into the core, or import it under `if TYPE_CHECKING:`):\n" + "\n".join(bad)


def test_no_import_cycle_among_the_projects_modules():
    found = cycles(ROOT, PACKAGES)
    assert not found, "import cycles:\n" + "\n".join(_describe(c, ROOT, PACKAGES)
                                                     for c in found)


def test_the_packages_form_layers():
    """Between packages too the imports go one way: search <- verifiers <- problems <- rewards
    <- reports at most (no package reaches back up), and only reports imports reports."""
    order = {"search": 0, "verifiers": 1, "problems": 2, "rewards": 3, "reports": 4}
    up = sorted({f"{where} imports {dst}" for src, dst, where in edges(ROOT, PACKAGES)
                 if order[dst.split(".")[0]] > order[src.split(".")[0]]})
    assert not up, "an import against the layers:\n" + "\n".join(up)


def private_imports(root: Path, packages: tuple[str, ...]) -> list[str]:
    """'file:line from M import _name' for each import of another module's private name (a
    private submodule of the importer's own package is fine: verifiers._sandbox_host)."""
    mods = modules(root, packages)
    found = []
    for module, path in mods.items():
        for line, node in runtime_imports(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = _absolute(module, path, node)
            for alias in node.names:
                own_module = f"{base}.{alias.name}" in mods and \
                    base.split(".")[0] == module.split(".")[0]
                if alias.name.startswith("_") and not alias.name.startswith("__") and \
                        not own_module:
                    found.append(f"{path.relative_to(root)}:{line} from {base} import "
                                 f"{alias.name}")
    return found


def test_no_module_imports_another_modules_private_names():
    bad = private_imports(ROOT, PACKAGES)
    assert not bad, "make these public where they are shared:\n" + "\n".join(bad)


def test_no_source_module_over_400_lines():
    """The style's limit: a module is read top to bottom; past ~400 lines it holds two."""
    long = {str(path.relative_to(ROOT)): n for path in modules(ROOT, PACKAGES).values()
            if (n := len(path.read_text().splitlines())) > 400}
    assert not long, f"split these into coherent modules: {long}"


FINISHES = ("finish", "finish_delegated")  # search/algos/_run.py; Run.finish calls finish


def own_returns(node: ast.AST) -> list[ast.Return]:
    """The return statements of a function, not of the functions defined inside it."""
    found = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Return):
            found.append(child)
        if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
                          | ast.ClassDef):
            found += own_returns(child)
    return found


def unfinished_algorithms(algos: Path) -> list[str]:
    """'file:line' of each return of an algorithm (the function `name` of algos/name.py) that
    does not hand back a call of _run's one finish path: `finish` or `finish_delegated`
    imported from search.algos._run, or a Run's `.finish(...)`; 'file' alone where the file
    has no such function."""
    found = []
    for path in sorted(algos.glob("[!_]*.py")):
        tree = ast.parse(path.read_text(), str(path))
        imported = {alias.asname or alias.name for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) and node.module == "search.algos._run"
                    for alias in node.names}
        fn = next((node for node in tree.body if isinstance(node, ast.FunctionDef)
                   and node.name == path.stem), None)
        if fn is None:
            found.append(path.name)
            continue
        for ret in own_returns(fn):
            call = ret.value.func if isinstance(ret.value, ast.Call) else None
            ok = (isinstance(call, ast.Name) and call.id in FINISHES and call.id in imported) \
                or (isinstance(call, ast.Attribute) and call.attr == "finish")
            if not ok:
                found.append(f"{path.name}:{ret.lineno}")
    return found


def test_every_algorithm_ends_through_the_one_finish_path():
    bad = unfinished_algorithms(ROOT / CORE / "algos")
    assert not bad, "end these through search/algos/_run.py (finish, Run.finish or " \
        "finish_delegated):\n" + "\n".join(bad)


def test_every_package_is_scanned():
    """The scan sees the whole tree (a renamed package would make the checks vacuous)."""
    mods = modules(ROOT, PACKAGES)
    for pkg in PACKAGES:
        assert pkg in mods and sum(m.startswith(pkg + ".") for m in mods) >= 3, pkg
    assert "search.api" in mods and "rewards.registry" in mods


# -- the detector itself, on planted trees ------------------------------------------------------
def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_detector_names_a_core_import_of_a_plugin_with_file_and_line(tmp_path):
    root = _tree(tmp_path, {
        "core/__init__.py": "",
        "core/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                     "    from plug.x import X\nelse:\n    import os\n",
        "core/b.py": "import os\n\ndef f():\n    from plug import x\n    return x\n",
        "core/c.py": "def g():\n    try:\n        import plug.x as px\n    except ImportError:\n"
                     "        px = None\n    return px\n",
        "plug/__init__.py": "",
        "plug/x.py": "from core.a import *\nX = 1\n",
    })
    bad = core_violations(root, "core", ("plug",))
    assert bad == ["core/b.py:4 imports plug.x", "core/c.py:3 imports plug.x"], bad
    (root / "plug/y.py").write_text("from core.b import _helper\nfrom plug import x\n")
    assert private_imports(root, ("core", "plug")) == ["plug/y.py:1 from core.b import _helper"]
    # the TYPE_CHECKING import alone is no violation
    (root / "core/b.py").write_text("import os\n")
    (root / "core/c.py").write_text("")
    assert core_violations(root, "core", ("plug",)) == []


def test_detector_finds_cycles_across_and_within_packages(tmp_path):
    root = _tree(tmp_path, {
        "core/__init__.py": "from core.api import run\n",
        "core/api.py": "from core import types\n\ndef run():\n    from . import algo\n",
        "core/types.py": "X = 1\n",
        "core/algo.py": "from .api import run\n",          # algo <-> api: within a package
        "plug/__init__.py": "",
        "plug/p.py": "import core.types\n",
        "plug/q.py": "from plug.r import y\n",
        "plug/r.py": "def f():\n    from plug import q\n",  # q <-> r through a function
    })
    assert sorted(cycles(root, ("core", "plug"))) == [["core.algo", "core.api"],
                                                      ["plug.q", "plug.r"]]
    # a package __init__ importing its own submodule is no cycle (Python runs the parent
    # __init__ on the way to core.api, but that is not an edge), nor is a plug-in using core
    (root / "core/algo.py").write_text("import core.types\n")
    (root / "plug/r.py").write_text("y = 1\n")
    assert cycles(root, ("core", "plug")) == []
    # a cross-package cycle: the core imports the plug-in that imports it
    (root / "core/types.py").write_text("def f():\n    import plug.p\n")
    assert cycles(root, ("core", "plug")) == [["core.types", "plug.p"]]
    assert "core/types.py:2: core.types -> plug.p" in _describe(["core.types", "plug.p"], root,
                                                                  ("core", "plug"))


def test_detector_names_an_algorithm_that_builds_its_own_result(tmp_path):
    root = _tree(tmp_path, {
        "algos/_run.py": "",
        "algos/good.py": "from search.algos._run import finish\n\ndef good(run):\n"
                         "    def inner():\n        return 1\n"
                         "    if run:\n        return run.finish('good', [])\n"
                         "    return finish(inner())\n",
        "algos/bad.py": "from dataclasses import replace\n\ndef bad(result):\n"
                        "    return replace(result, algo='bad')\n",
        "algos/odd.py": "def finish():\n    pass\n\ndef odd():\n    return finish()\n",
        "algos/gone.py": "def other():\n    pass\n",
    })
    assert unfinished_algorithms(root / "algos") == ["bad.py:4", "gone.py", "odd.py:5"]


# -- the plug-ins register themselves; the core finds them through search.plugins only ---------
_FRESH = r"""
import sys
from importlib import metadata
if sys.argv[1] == "no-metadata":  # a source tree without the distribution installed
    metadata.entry_points = lambda **kw: []
import search
from search import answers, models, plugins, scoring
from search.types import Problem
assert not [m for m in ("rewards", "verifiers", "problems", "reports") if m in sys.modules]
assert scoring.SCORERS == {} and "tiny-arith" not in models.EMBEDDED and answers.READERS == {}
print(sorted(plugins.entry_modules().values()))
print(scoring.load("steps").name, models.check_model("tiny-code"))
print(answers.extract(Problem("q"), "so the answer is \\boxed{42}"))
print(answers.extract(Problem("def f():", domain="code", entry_point="f"), "```python\nx = 1\n```"))
import rewards.base, rewards.aggregate, rewards.registry, search.aggregate
assert rewards.base.Scorer is scoring.Scorer and rewards.base.score_nodes is scoring.score_nodes
assert rewards.aggregate.min is search.aggregate.min and rewards.registry.SCORERS is scoring.SCORERS
assert "reports" not in sys.modules
"""


@pytest.mark.parametrize("how", ["entry-points", "no-metadata"])
def test_names_resolve_through_the_plugins_after_a_bare_import_search(how):
    """`import search` alone loads no plug-in; the first name to resolve loads them all
    (with the installed entry points, and from search.plugins.DEFAULT without metadata),
    and the plug-ins' re-exports are the core's own objects."""
    out = subprocess.run([sys.executable, "-c", _FRESH, how], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines == ["['problems.reasoners', 'rewards.registry', 'verifiers.answers']",
                     "steps embedded", "42", "x = 1"], lines


def test_the_default_plugin_list_is_pyprojects_entry_point_table():
    text = (ROOT / "pyproject.toml").read_text()
    table = text.split('[project.entry-points."tts_search.plugins"]\n', 1)[1].split("\n\n")[0]
    declared = dict(line.replace(" ", "").replace('"', "").split("=")
                    for line in table.splitlines() if line and not line.startswith("#"))
    from search.plugins import DEFAULT

    assert declared == DEFAULT


def test_another_distributions_plugin_is_loaded_beside_this_projects(monkeypatch):
    """An entry point of the group from any installed distribution joins DEFAULT (stale or
    absent metadata of this project cannot drop its own plug-ins)."""
    from importlib import metadata

    from search import plugins

    extra = metadata.EntryPoint("extra", "json.decoder", plugins.GROUP)
    monkeypatch.setattr(plugins.metadata, "entry_points", lambda **kw: [extra])
    assert plugins.entry_modules() == {**plugins.DEFAULT, "extra": "json.decoder"}
    monkeypatch.setattr(plugins, "_loaded", {})
    assert plugins.load()["extra"] == "json.decoder"
