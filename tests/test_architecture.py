"""The layers hold: search/ (the core) imports no plug-in (rewards, verifiers, problems,
training, reports) at run time, no plug-in reaches into a private module of the core (or of another
plug-in), no module hands on another package's objects as its own, and the project's modules
import each other without a cycle; every algorithm ends one way: its Run's finish
(search.algos), or Outcome.of what another search's finish found. The detectors live in
tests/import_graph.py; the tests at the end of this file plant each violation in a scratch
tree and check the detector names it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from import_graph import (
    against_layers,
    core_violations,
    cycles,
    describe,
    foreign_private_imports,
    layer_of,
    modules,
    private_imports,
    reexports,
    unfinished_algorithms,
)
from thread_state import thread_keyed_state

ROOT = Path(__file__).resolve().parent.parent
CORE = "search"
PLUGINS = ("rewards", "verifiers", "problems", "training", "reports")
PACKAGES = (CORE, *PLUGINS)
PACKAGES_BOTTOM_UP = ("search", "verifiers", "problems", "rewards", "training", "reports")
CORE_LAYERS = (("search.types", "search.marks", "search.budget", "search.session"),  # vocabulary
               ("search.runtime",),                                   # torch machinery
               ("search.engines",),
               ("search.scoring", "search.aggregate", "search.logprob"),
               ("search.algos",),
               ("search.api", "search.many", "search.cli", "search.__main__"))  # the wiring
# reports/ by room (reports/__init__.py): the libraries, the runner, drawing, what uses them all
REPORTS_LAYERS = (("reports.analysis", "reports.grader"),  # rows and statistics; grader corpus
                  ("reports.eval",),                        # running grids -> rows
                  ("reports.figures",),                     # plots, tree viewer
                  ("reports.studies", "reports.bench"),     # questions and benchmarks
                  ("reports.demo",))


# -- the project --------------------------------------------------------------------------------
def test_core_imports_no_plugin_at_run_time():
    bad = core_violations(ROOT, CORE, PLUGINS)
    assert not bad, "search/ (the core) imports a plug-in at run time (move what it needs " \
        "into the core, or import it under `if TYPE_CHECKING:`):\n" + "\n".join(bad)


def test_no_import_cycle_among_the_projects_modules():
    found = cycles(ROOT, PACKAGES)
    assert not found, "import cycles:\n" + "\n".join(describe(c, ROOT, PACKAGES)
                                                     for c in found)


def test_the_packages_form_layers():
    """Between packages too the imports go one way: search <- verifiers <- problems <- rewards
    <- training <- reports at most (no package reaches back up: a scorer finds what it needs
    at run time through the core's registries, never in training), and only reports imports
    reports."""
    up = against_layers(ROOT, PACKAGES, [[p] for p in PACKAGES_BOTTOM_UP])
    assert not up, "an import against the layers:\n" + "\n".join(up)


def test_the_cores_layers_import_only_those_below():
    """The README's map of the core: the vocabulary, the torch runtime, the engines, the scorer
    contract, the algorithms, the wiring, each importing only the layers listed before it (the
    runtime no engine, so a scorer that runs a model needs no engine's internals). Helper
    modules outside the map (knobs, registry, models, select, answers, plugins, ...) are not
    ranked."""
    up = against_layers(ROOT, (CORE,), CORE_LAYERS)
    assert not up, "an import against the core's layers:\n" + "\n".join(up)


def test_every_reports_module_sits_in_a_room_and_the_rooms_form_layers():
    """reports/ is split by what each folder holds (its package doc): a module sits in one of
    the rooms, and a room imports only those listed before it in REPORTS_LAYERS (the studies
    and benchmarks use the runner and the statistics; the runner draws nothing)."""
    loose = sorted(m for m in modules(ROOT, ("reports",))
                   if m != "reports" and layer_of(m, REPORTS_LAYERS) is None)
    assert not loose, f"put these in a room of reports/ (or add the room to REPORTS_LAYERS " \
        f"and reports/__init__.py): {loose}"
    up = against_layers(ROOT, ("reports",), REPORTS_LAYERS)
    assert not up, "an import against the rooms of reports/:\n" + "\n".join(up)


def test_no_module_imports_another_modules_private_names():
    bad = private_imports(ROOT, PACKAGES)
    assert not bad, "make these public where they are shared:\n" + "\n".join(bad)


def test_no_plugin_imports_a_private_module_of_another_package():
    bad = foreign_private_imports(ROOT, PACKAGES)
    assert not bad, "a module imports another package's private module (a path component " \
        "starting with '_'; give the package a public module for what is shared):\n" + \
        "\n".join(bad)


def test_no_module_hands_on_another_packages_objects():
    bad = reexports(ROOT, PACKAGES)
    assert not bad, "import these from where they are defined, and delete the shim:\n" + \
        "\n".join(bad)


def test_no_source_module_over_400_lines():
    """The style's limit: a module is read top to bottom; past ~400 lines it holds two."""
    long = {str(path.relative_to(ROOT)): n for path in modules(ROOT, PACKAGES).values()
            if (n := len(path.read_text().splitlines())) > 400}
    assert not long, f"split these into coherent modules: {long}"


def test_every_algorithm_ends_through_the_one_finish_path():
    bad = unfinished_algorithms(ROOT / CORE / "algos")
    assert not bad, "end these with their Run's finish (search.algos: run.finish(leaves)), or " \
        "Outcome.of(another search's Result):\n" + "\n".join(bad)


def test_no_state_is_keyed_by_the_calling_thread():
    """A search's state travels with it (search.session.Session), never found by thread:
    no threading.local, no ContextVar, no thread identity used as a key (issue 34)."""
    bad = thread_keyed_state(ROOT, PACKAGES)
    assert not bad, "pass the state explicitly (a Session, an argument) instead:\n" + \
        "\n".join(bad)


def test_every_package_is_scanned():
    """The scan sees the whole tree (a renamed package would make the checks vacuous)."""
    mods = modules(ROOT, PACKAGES)
    for pkg in PACKAGES:
        assert pkg in mods and sum(m.startswith(pkg + ".") for m in mods) >= 3, pkg
    assert "search.api" in mods and "rewards.scorers" in mods


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
    assert "core/types.py:2: core.types -> plug.p" in describe(["core.types", "plug.p"], root,
                                                                  ("core", "plug"))


def test_detector_names_an_algorithm_that_builds_its_own_result(tmp_path):
    root = _tree(tmp_path, {
        "algos/_smc.py": "",
        "algos/good.py": "from search.algos import Run\n\ndef good(problem):\n"
                         "    def inner():\n        return 1\n"
                         "    run = Run.begin(problem)\n"
                         "    return run.finish([inner()])\n",
        "algos/hands.py": "from search.types import Outcome\n\ndef hands(result):\n"
                          "    return Outcome.of(result)\n",
        "algos/bad.py": "from dataclasses import replace\n\ndef bad(result):\n"
                        "    return replace(result, algo='bad')\n",
        "algos/odd.py": "def finish():\n    pass\n\ndef odd():\n    return finish()\n",
        "algos/own.py": "from search.select import Outcome\n\ndef own(x):\n"
                        "    if x:\n        return Outcome.of(x)\n    return x.finish()\n",
        "algos/gone.py": "def other():\n    pass\n",
    })
    assert unfinished_algorithms(root / "algos") == ["bad.py:4", "gone.py", "odd.py:5",
                                                     "own.py:5", "own.py:6"]


def test_detector_names_an_import_against_the_layers(tmp_path):
    root = _tree(tmp_path, {
        "core/__init__.py": "",
        "core/types.py": "",
        "core/rt/__init__.py": "",
        "core/rt/kv.py": "import core.types\n",
        "core/eng/__init__.py": "",
        "core/eng/hf.py": "from core.rt import kv\nimport core.helper\n",
        "core/helper.py": "import core.eng.hf\n",                 # unranked: not checked
        "core/algo.py": "import core.eng.hf\n",
    })
    layers = [["core.types"], ["core.rt"], ["core.eng", "core.algo"]]
    assert layer_of("core.eng.hf", layers) == 2 and layer_of("core.helper", layers) is None
    assert layer_of("core.rt.kv", [["core"], ["core.rt"]]) == 1  # the longest name wins
    assert against_layers(root, ("core",), layers) == []
    (root / "core/rt/kv.py").write_text("import core.types\n\ndef f():\n"
                                        "    from core.eng import hf\n")
    (root / "core/types.py").write_text("from core.rt.kv import f\n")
    assert against_layers(root, ("core",), layers) == ["core/rt/kv.py:4 imports core.eng.hf",
                                                      "core/types.py:1 imports core.rt.kv"]


def test_detector_names_every_kind_of_thread_keyed_state(tmp_path):
    root = _tree(tmp_path, {
        "search/__init__.py": "",
        "search/plain.py": "import threading\nlock = threading.Lock()\n"
                           "def mine(owner):\n"
                           "    return threading.current_thread() is owner\n",
        "search/local.py": "import threading\n_local = threading.local()\n",
        "search/alias.py": "from threading import local as L\nstate = L()\n",
        "search/sub.py": "import threading as t\nclass State(t.local):\n    x = 0\n",
        "search/ident.py": "import threading\nMETERS = {}\n"
                           "def meter():\n    return METERS[threading.get_ident()]\n",
        "search/weak.py": "import threading, weakref\nW = weakref.WeakKeyDictionary()\n"
                          "def put(v):\n    W[threading.current_thread()] = v\n",
        "search/method.py": "from _thread import get_ident\nD = {}\n"
                            "def put(v):\n    D.setdefault(get_ident(), v)\n",
        "search/ref.py": "import threading\nkey = threading.get_native_id\n",
        "search/ctx.py": "from contextvars import ContextVar\nMETER = ContextVar('m')\n",
    })
    bad = thread_keyed_state(root, ("search",))
    files = sorted({b.split(":")[0] for b in bad})
    assert files == sorted(f"search/{m}.py" for m in (
        "local", "alias", "sub", "ident", "weak", "method", "ref", "ctx")), bad
    assert "search/local.py:2: threading.local() keeps state per thread" in bad
    assert any(b.startswith("search/sub.py:2:") and "base of class State" in b for b in bad)
    assert any(b.startswith("search/ident.py:4: threading.get_ident()") for b in bad)
    assert any(b.startswith("search/weak.py:4: threading.current_thread()") for b in bad)
    assert len(bad) == 8


def test_detector_names_a_plugin_import_of_a_private_core_module(tmp_path):
    root = _tree(tmp_path, {
        "core/__init__.py": "",
        "core/api.py": "from core._inner import f\n",           # the core's own: fine
        "core/_inner.py": "def f():\n    pass\n",
        "core/algos/__init__.py": "",
        "core/algos/_run.py": "",
        "core/algos/beam.py": "from core.algos import _run\n",
        "core/_rt/__init__.py": "",
        "core/_rt/kv.py": "",
        "plug/__init__.py": "",
        "plug/_own.py": "",
        "plug/ok.py": "from plug import _own\nimport core.api\n",
        "plug/a.py": "def g():\n    from core._inner import f\n    return f\n",
        "plug/b.py": "from core.algos import _run\nimport core._rt.kv\n",
        "plug/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                     "    from core.algos._run import x\n",
        "other/__init__.py": "",
        "other/d.py": "from plug._own import y\n",            # another plug-in's private
    })
    packages = ("core", "plug", "other")
    assert foreign_private_imports(root, packages) == [
        "other/d.py:1 imports plug._own", "plug/a.py:2 imports core._inner",
        "plug/b.py:1 imports core.algos._run", "plug/b.py:2 imports core._rt.kv"]
    for name in ("plug/a.py", "plug/b.py", "other/d.py"):
        (root / name).write_text("import core.api\n")
    assert foreign_private_imports(root, packages) == []


def test_detector_names_a_module_that_hands_on_another_packages_objects(tmp_path):
    root = _tree(tmp_path, {
        "core/__init__.py": "from core.api import run\n__all__ = ['run']\n",  # its own: fine
        "core/api.py": "def run():\n    pass\nX = 1\n",
        "plug/__init__.py": '"""doc"""\nfrom core.api import X, run\n__all__ = ["X", "run"]\n',
        "plug/base.py": '"""A shim."""\nfrom __future__ import annotations\n'
                        "from core.api import run\n",
        "plug/reg.py": "from core.api import X, run\n__all__ = ('X',)\n\nrun()\n",
        "plug/use.py": "from core.api import run\n\nrun()\n",  # uses it: fine
    })
    assert reexports(root, ("core", "plug")) == [
        "plug/__init__.py: __all__ hands on core.api.X",
        "plug/__init__.py: __all__ hands on core.api.run",
        "plug/__init__.py: only imports (core.api)",
        "plug/base.py: only imports (core.api)",
        "plug/reg.py: __all__ hands on core.api.X"]
    (root / "plug/__init__.py").write_text('"""doc"""\n')
    (root / "plug/base.py").unlink()
    (root / "plug/reg.py").write_text("from core.api import run\n\nrun()\n")
    assert reexports(root, ("core", "plug")) == []


# -- the plug-ins register themselves; the core finds them through search.plugins only ---------
_FRESH = r"""
import sys
from importlib import metadata
if sys.argv[1] == "no-metadata":  # a source tree without the distribution installed
    metadata.entry_points = lambda **kw: []
import search
from search import answers, models, plugins, scoring
from search.types import Problem
assert not [m for m in ("rewards", "verifiers", "problems", "training", "reports")
            if m in sys.modules]
# the core holds the logprob scorer itself; nothing else is registered yet
assert scoring.SCORERS.registered() == ["logprob"] and "tiny-arith" not in models.EMBEDDED.registered()
assert answers.READERS.registered() == []
print(sorted(plugins.entry_modules().values()))
print(scoring.load("steps").name, models.check_model("tiny-code"))
print(answers.extract(Problem("q"), "so the answer is \\boxed{42}"))
print(answers.extract(Problem("def f():", domain="code", entry_point="f"), "```python\nx = 1\n```"))
assert "reports" not in sys.modules
"""


@pytest.mark.parametrize("how", ["entry-points", "no-metadata"])
def test_names_resolve_through_the_plugins_after_a_bare_import_search(how):
    """`import search` alone loads no plug-in; the first name to resolve loads them all
    (with the installed entry points, and from search.plugins.DEFAULT without metadata)."""
    out = subprocess.run([sys.executable, "-c", _FRESH, how], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines == ["['rewards.scorers', 'training.reasoners', 'verifiers.domains']",
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


def test_this_projects_installed_entry_points_give_way_to_the_source_trees(monkeypatch):
    """Installed metadata of this project older than its pyproject.toml (a plug-in module
    since renamed, one since dropped) is not read: DEFAULT, the source tree's table, is."""
    from types import SimpleNamespace

    from search import plugins

    def entry(name: str, value: str, dist: str) -> SimpleNamespace:
        return SimpleNamespace(name=name, value=value, dist=SimpleNamespace(name=dist))

    stale = [entry("rewards", "rewards.gone", "tts_search"),
             entry("problems", "problems.gone", "TTS-Search"),
             entry("other", "json.decoder:JSONDecoder", "other-dist")]
    monkeypatch.setattr(plugins.metadata, "entry_points", lambda **kw: stale)
    assert plugins.entry_modules() == {**plugins.DEFAULT, "other": "json.decoder"}
