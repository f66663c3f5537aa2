"""A scorer is one file: a module of rewards/ declares its scorers on their class or factory
(search.scoring.registered_as), and rewards.scorers registers every declaration it reads in the
package's source, so a new file registers itself and nothing loads before it is used."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rewards.scorers import Check, declared, modules
from search import scoring

ROOT = Path(__file__).resolve().parent.parent
# what this project's scorers are called, and which check a problem before any model loads
NAMES = {"steps", "oracle", "oracle_steps", "self_eval", "unit_tests", "value"}
CHECKED = {"oracle", "oracle_steps", "value"}


def _python(code: str, *path: Path) -> list[str]:
    """Run `code` in a fresh interpreter with `path` (then this tree) first on sys.path (and
    as its working directory, which `python -c` puts before them)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, [*path, ROOT]))}
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=[*path, ROOT][0],
                         env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


_IMPORT_EACH = """
import json, sys
from importlib import import_module, metadata
from pathlib import Path
metadata.entry_points = lambda **kw: []
from search import plugins, scoring
plugins.DEFAULT.clear()  # no plug-in loads: only the modules' own decorators register
for path in sorted(Path(sys.argv[1]).glob("*.py")):  # the scorer modules, not the plug-in's
    if not path.name.startswith("_") and path.stem != "scorers":
        import_module("rewards." + path.stem)
print(json.dumps({name: [entry.target, entry.engine] for name, entry
                  in scoring.SCORERS._entries.items() if name != "logprob"}))
print(json.dumps({name: f"{check.__module__}:{check.__qualname__}"
                  for name, check in scoring.CHECKS.items()}))
"""


def test_the_registered_scorers_are_what_the_modules_declare():
    """Read from the source (rewards.scorers), the declarations name exactly the scorers,
    factories and checks that running the modules' decorators registers."""
    read = [d for module, source in modules().items() for d in declared(module, source)]
    assert {d.name for d in read} == NAMES
    assert {d.name for d in read if d.check is not None} == CHECKED
    # what the plug-in load registers, in a fresh interpreter (other tests add scorers here)
    loaded = _python("from search import scoring; print(' '.join(sorted(scoring.known())))")
    assert set(loaded[0].split()) == NAMES | {"logprob"}
    code = _IMPORT_EACH.replace("sys.argv[1]", repr(str(ROOT / "rewards")))
    entries, checks = map(json.loads, _python(code))
    assert entries == {d.name: [d.factory.target, d.factory.engine] for d in read}
    assert checks == {d.name: d.check.target for d in read if d.check is not None}


def test_loading_the_plugin_imports_no_scorer_module():
    lines = _python("""
        import sys
        from search import scoring
        scoring.known()
        print(sorted(m for m in sys.modules if m.startswith("rewards")), "torch" in sys.modules)
        print(scoring.load("steps").name, sorted(m for m in sys.modules if m.startswith("rewards.")))
        """)
    assert lines == ["['rewards', 'rewards.scorers'] False",
                     "steps ['rewards.scorers', 'rewards.verifier']"]


def test_messages_are_the_scorers_own():
    from search.api import check_scorer
    from search.types import Problem

    with pytest.raises(ValueError, match="^scorer SelfEvalScorer needs the generator engine$"):
        scoring.load("self_eval")
    with pytest.raises(ValueError, match="^scorer value_scorer needs the generator engine$"):
        scoring.load("value")
    with pytest.raises(ValueError, match=r"scorer 'oracle' compares with the gold answer, but "
                       r"problem 'p' has none; give Problem\(answer=...\)"):
        check_scorer("oracle", Problem("q", id="p"), "tiny-arith")
    with pytest.raises(ValueError, match="scorer 'value' needs a value head saved next to the "
                       "model, and model '/nowhere' has none"):
        check_scorer("value", Problem("q"), "/nowhere")


_NEW_SCORER = '''
"""A scorer added as one file: the longer the text, the better."""
from search.scoring import registered_as
from search.session import Bindable


def needs_answer(problem, model):
    if problem.answer is None:
        raise ValueError(f"scorer 'longest' wants a gold answer with {model}")


@registered_as("longest", "wordiest", check=needs_answer)
class Longest(Bindable):
    name = "longest"

    def score(self, problem, nodes):
        return [float(len(node.text)) for node in nodes]


@registered_as("with_engine", engine=True)
def with_engine(engine):
    scorer = Longest()
    scorer.name = f"with_engine({engine})"
    return scorer
'''

_USE_IT = r"""
import sys
import rewards, search
from search import api, scoring
from search.engines.fake import ScriptedEngine
from search.types import Problem
print(rewards.__file__.startswith(sys.argv[1]), sorted(scoring.known()))
print("rewards.new_scorer" in sys.modules)
steps = [("so \\boxed{4}.", 0.7), ("so the answer is \\boxed{5}.", 0.3)]
engine = ScriptedEngine(lambda path: steps if not path else [])
for name in ("longest", "wordiest"):
    r = search.solve(Problem("2+2?", answer="4"), "best_of_n", engine=engine, progress=False, n=2, select="score",
                     scorer=name)
    print(r.answer, r.scorer, r.score)
print(scoring.load("with_engine", engine="E").name)
for call in (lambda: scoring.load("with_engine"), lambda: api.check_scorer("wordiest", Problem("q"), "m")):
    try:
        call()
    except ValueError as err:
        print(err)
"""


def test_a_new_file_in_rewards_registers_itself(tmp_path):
    """A copy of the package with one file added, first on sys.path: its scorers are known,
    made, checked and used, with no other file edited."""
    shutil.copytree(ROOT / "rewards", tmp_path / "rewards",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "rewards" / "new_scorer.py").write_text(_NEW_SCORER)
    for name in ("scorers.py", "__init__.py"):  # the entry module is the project's, unedited
        assert (tmp_path / "rewards" / name).read_text() == (ROOT / "rewards" / name).read_text()
    code = _USE_IT.replace("sys.argv[1]", repr(str(tmp_path)))
    lines = _python(code, tmp_path)
    known = sorted(NAMES | {"logprob", "longest", "wordiest", "with_engine"})
    longer = float(len("so the answer is \\boxed{5}."))  # it wins over the likelier step
    assert lines == [f"True {known}", "False", f"5 longest {longer}", f"5 wordiest {longer}",
                     "with_engine(E)", "scorer with_engine needs the generator engine",
                     "scorer 'longest' wants a gold answer with m"]


@pytest.mark.parametrize("decorator", [
    "@registered_as(NAME)", "@registered_as", "@registered_as('x', check=lambda p, m: None)",
    "@scoring.registered_as('x', engine=ENGINE)", "@registered_as('x', 2)",
    "@registered_as('x', fast=True)"])
def test_a_declaration_that_cannot_be_read_is_refused(decorator):
    source = f"import x\n\n{decorator}\nclass S:\n    pass\n"
    with pytest.raises(ValueError, match=r"^rewards.bad, line 3: registered_as takes its names "
                       "as string literals"):
        declared("rewards.bad", source)


def test_a_plain_declaration_is_read_as_written():
    source = ("from search import scoring\n\ndef ok(problem, model): pass\n\n"
              "@scoring.registered_as('a', 'b', check=ok, engine=True)\ndef make(engine): pass\n"
              "\nclass Helper:\n    pass\n")
    found = declared("rewards.good", source)
    assert [(d.name, d.factory, d.check) for d in found] == [
        (name, scoring.Factory("rewards.good:make", True),
         Check("rewards.good:ok")) for name in "ab"]
