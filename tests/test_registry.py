"""One registry type (search.plugins.Registry) for algorithms, scorers, answer readers and
datasets: entries by "module:attr", imported on first use; another package adds entries by
entry points, with no edit to this project; the core's default path runs with no plug-in."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from plugin_package import installed

import search
from search import answers, api, plugins, registry, scoring
from search.engines.fake import ScriptedEngine
from search.plugins import Registry

ROOT = Path(__file__).resolve().parent.parent

# -- the registry type ---------------------------------------------------------------------------


def _module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, text: str) -> None:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))


def test_an_entry_is_imported_only_when_its_name_is_used(tmp_path, monkeypatch):
    _module(tmp_path, monkeypatch, "reg_lazy_mod", "VALUE = {'a': 41}\n")
    reg: Registry[object] = Registry("lazy_things", "lazy thing",
                                     {"x": "reg_lazy_mod:VALUE", "y": 7})
    assert "reg_lazy_mod" not in sys.modules
    assert reg.registered() == ["x", "y"]
    assert "reg_lazy_mod" not in sys.modules  # listing imports nothing
    assert reg.get("y") == 7
    assert reg.get("x") == {"a": 41} and "reg_lazy_mod" in sys.modules


def test_an_unknown_name_lists_the_known_ones(tmp_path, monkeypatch):
    reg: Registry[int] = Registry("unk_things", "thing", {"alpha": 1, "beta": 2})
    with pytest.raises(ValueError, match=r"unknown thing 'alpah'; known: alpha, beta; "
                                         r"did you mean 'alpha'\?"):
        reg.get("alpah")
    with pytest.raises(ValueError, match="unknown thing 3; known: alpha, beta"):
        reg.get(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"unknown algorithm 'gredy'; known: .*greedy.*"
                                         r"did you mean 'greedy'"):
        registry.get("gredy")
    with pytest.raises(ValueError, match=r"unknown scorer 'stepz'; known: .*steps.*, or a "
                                         r"PRM path; did you mean 'steps'"):
        scoring.load("stepz")


def test_a_name_registered_twice_differently_is_refused_and_bad_targets_are_named(
        tmp_path, monkeypatch):
    reg: Registry[object] = Registry("twice_things", "thing", {"a": "m:A"})
    reg.add("a", "m:A")  # the same entry again is no conflict
    with pytest.raises(ValueError, match="two twice_things named 'a'"):
        reg.add("a", "m:B")
    reg.add("gone", "no_such_module_tts:X")
    with pytest.raises(ImportError, match=r"thing 'gone' \(no_such_module_tts:X\) does not load"):
        reg.get("gone")
    reg.add("flat", "no_colon")
    with pytest.raises(ValueError, match="'module:attribute', got 'no_colon'"):
        reg.get("flat")


# -- a package from outside adds an algorithm, a scorer and a dataset ------------------------------
TOY = '''
"""A third-party package: an algorithm, a scorer and a dataset for tts-search."""
from problems.datasets import Benchmark
from search.knobs import rules
from search.scoring import score_nodes
from search.select import by_score, candidates, pack
from search.types import Problem


@rules()
def pick_one(problem, engine, scorer, meter, *, seed=0, n=4):
    """n one-step solutions from the root; the scorer's best one answers."""
    root = engine.root(problem)
    kids = engine.expand([root], n, seed=seed)[0]
    cands = candidates(problem, kids, score_nodes(scorer, problem, kids, meter=meter))
    return pack(problem, root, cands, by_score(problem, cands), meter, chosen_by="pick_one")


class Longest:
    """Scores a step by its length in characters (no name: the registry must not add one)."""

    def score(self, problem, nodes):
        return [float(len(n.step.text)) for n in nodes]


def longest(engine=None):
    return Longest()


def _row(row, index, origin):
    return Problem(prompt=row["q"], id=f"toy/{index}", answer=row["a"], domain="math",
                   metadata={"source": "toy", "origin": origin, "grader": "math"})


TOY_SET = Benchmark("nobody/toy-set", None, "test", ("toy.jsonl",), _row, ("q", "a"))


# an engine kind: "toy:WORD" is a scripted engine whose one step says "answer: WORD."
from search.answers import Reader
from search.engines.fake import ScriptedEngine
from search.engines.kinds import EngineKind


def _check(name):
    if not name.removeprefix("toy:").isalpha():
        raise ValueError(f"a toy engine is toy:WORD, got {name!r}")


def _load(name):
    word = name.removeprefix("toy:")
    return ScriptedEngine(lambda path: [] if path else [(f"answer: {word}.", 1.0)])


TOY_ENGINE = EngineKind(load=_load, check=_check)

def toy_model(dtype=None):
    return "model", "tokenizer", {"chat": False, "dtype": dtype}


# the answer reader of domain "letters": what follows "answer:", upper-cased to vote
LETTERS = Reader(lambda problem, text: text.rpartition("answer:")[2].strip(" .") or None,
                 lambda problem, answer: answer.upper())
'''

ENTRY_POINTS = '''
[tts_search.algorithms]
pick_one = toy_tts:pick_one

[tts_search.scorers]
longest = toy_tts:longest

[tts_search.datasets]
toy = toy_tts:TOY_SET

[tts_search.engines]
toy = toy_tts:TOY_ENGINE

[tts_search.answers]
letters = toy_tts:LETTERS

[tts_search.models]
toy-model = toy_tts:toy_model
'''

# every root step finishes; the longer the step, the larger its boxed answer
STEPS = [("so \\boxed{1}.", 0.5), ("so \\boxed{22}.", 0.3), ("so \\boxed{333}.", 0.2)]


@pytest.fixture
def toy_package(tmp_path, monkeypatch):
    """The package installed on sys.path as a distribution (a dist-info with its
    entry_points.txt), as pip would leave it; the registries read it, then forget it."""
    monkeypatch.setattr(api, "_ENGINES", {})  # engines it loads by name go with it
    with installed(tmp_path, monkeypatch, "toy_tts", TOY, ENTRY_POINTS):
        yield tmp_path


def test_a_package_from_outside_adds_an_algorithm_a_scorer_and_a_dataset(toy_package):
    from problems import datasets

    assert "pick_one" in registry.names() and "longest" in scoring.known()
    assert "toy" in datasets.names()
    data = toy_package / "data"
    data.mkdir()
    (data / "toy.jsonl").write_text('{"q": "1+1?", "a": "2"}\n{"q": "3*111?", "a": "333"}\n')
    probs = datasets.load("toy", data)
    assert [(p.id, p.prompt, p.answer) for p in probs] == [("toy/0", "1+1?", "2"),
                                                           ("toy/1", "3*111?", "333")]
    assert probs[1].metadata["source"] == "toy"

    engine = ScriptedEngine(lambda path: STEPS if not path else [])
    result = search.solve(probs[1], "pick_one", engine=engine, scorer="longest", n=6,
                          progress=False)
    # each candidate is scored by its text's length; the longest sampled step answers
    by_len = {text: float(len(text)) for text, _ in STEPS}
    for c in result.candidates:
        assert c.score == by_len[next(t for t in by_len if c.text.endswith(t))]
    best = max(result.candidates, key=lambda c: c.score)
    assert result.answer == best.answer and result.score == best.score
    assert result.algo == "pick_one" and result.scorer == "longest"
    assert result.knobs["n"] == 6 and len(result.candidates) == 6
    assert registry.knob_names("pick_one") == ["n"]
    # the scorer object the package made is used as it is: nothing set on it
    made = scoring.load("longest")
    assert not hasattr(made, "name") and not hasattr(made, "implicit")


def test_a_package_from_outside_adds_an_engine_kind_an_answer_reader_and_a_model(toy_package):
    from search.api import check_engine
    from search.types import Problem

    assert check_engine("toy:word") == "toy:word"
    with pytest.raises(ValueError, match="a toy engine is toy:WORD, got 'toy:two words'"):
        check_engine("toy:two words")
    letters = Problem("pick a letter", domain="letters")
    result = search.solve(letters, "greedy", engine="toy:bee", progress=False)
    assert (result.answer, result.model, result.status) == ("bee", "toy:bee", "ok")
    # the domain's vote key: "bee" and "BEE" count together
    assert answers.vote_key(letters, "bee") == answers.vote_key(letters, "BEE") == "BEE"
    # an embedded model by name
    from search import models

    assert models.check_model("toy-model") == "embedded"
    assert models.load_model("toy-model", dtype="d") == ("model", "tokenizer",
                                                          {"chat": False, "dtype": "d"})
    # a name with no registered prefix is still a transformers model's (checked as one)
    from search.models import ModelNotFoundError

    with pytest.raises(ModelNotFoundError, match="unknown model 'nokind:x'"):
        check_engine("nokind:x")


def test_the_packages_entries_go_when_it_is_gone(toy_package):
    assert "pick_one" in registry.names()
    sys.path.remove(str(toy_package))
    plugins.rescan()
    assert "pick_one" not in registry.names()
    with pytest.raises(ValueError, match="unknown algorithm 'pick_one'"):
        registry.get("pick_one")


# -- the core alone ------------------------------------------------------------------------------
_PLUGINS_OFF = r"""
import sys
from importlib import metadata
metadata.entry_points = lambda **kw: []  # no installed plug-in
from search import plugins
plugins.DEFAULT.clear()                  # and not this project's own
import search
from search.engines.fake import ScriptedEngine
steps = [("so \\boxed{4}.", 0.7), ("so \\boxed{5}.", 0.3)]
engine = ScriptedEngine(lambda path: steps if not path else [])
r = search.solve("2+2?", "greedy", engine=engine, progress=False)
print(r.answer, r.status, r.selected_by)
r = search.solve("2+2?", "best_of_n", engine=engine, progress=False, n=2, select="score")
print(r.answer, r.status, r.scorer)
print(sorted(m for m in ("rewards", "verifiers", "problems", "training", "reports")
            if m in sys.modules))
"""


def test_the_default_path_runs_with_no_plugin_loaded():
    """solve's default (greedy, and the free logprob scorer) needs no plug-in: the core
    holds the logprob scorer and reads a boxed answer itself."""
    out = subprocess.run([sys.executable, "-c", _PLUGINS_OFF], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["4 ok greedy (the one path)", "4 ok logprob", "[]"]


def test_solve_sets_nothing_on_a_scorer_it_is_given():
    from search.engines.fake import ScriptedScorer

    sc = ScriptedScorer(lambda path: 1.0)
    before = dict(vars(sc))
    engine = ScriptedEngine(lambda path: STEPS if not path else [])
    search.solve("q", "best_of_n", engine=engine, scorer=sc, n=2, progress=False)
    assert set(vars(sc)) == set(before)


def test_the_value_scorer_asks_the_engine_through_its_public_switch():
    """rewards' value scorer turns an engine's feature recording on by the engine's own
    method (HFEngine.record_features); an engine without one is a clear error, and nothing
    is set on it."""
    from rewards.value_head import value_scorer

    engine = ScriptedEngine(lambda path: STEPS if not path else [])
    before = dict(vars(engine))
    with pytest.raises(ValueError, match="ScriptedEngine records none"):
        value_scorer(engine)
    assert vars(engine) == before


def test_an_algorithm_without_a_module_declares_nothing_and_still_runs(monkeypatch):
    """A function made by exec (or typed at a doctest's prompt) has no __module__: it declares
    no width or determinism and is taken to consult its scorer (the safe default), instead of
    solve's declarations lookup raising KeyError."""
    space: dict = {}
    exec("def first_step(problem, engine, scorer, meter, *, seed=0):\n"
         "    return engine.expand([engine.root(problem)], 1, seed=seed)[0][0]", space)
    fn = space["first_step"]
    assert fn.__module__ is None
    monkeypatch.setitem(registry.ALGORITHMS._entries, "first_step_exec", fn)
    assert registry.width("first_step_exec") is None
    assert not registry.deterministic("first_step_exec")
    assert registry.uses_scorer("first_step_exec", {})
