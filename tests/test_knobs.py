"""Every name, knob, value and text is checked before any model loads (issue 19, item 3/4):
search.solve, the command line and the eval grid refuse them with a message that says what
was wrong and what is allowed. A model load is an error here (the loader is replaced), so a
check that ran after it would show up as that error instead."""

from __future__ import annotations

import inspect
import subprocess
import sys
from typing import Any

import pytest

import search
import search.api
from reports.eval.grid import make_grid, parse_knobs
from search import knobs, registry
from search.__main__ import main
from search.engines.fake import ScriptedEngine, ScriptedScorer
from search.types import Node, Problem

PROBLEM = Problem(prompt="toy", id="toy", answer="7")
TREE = {(): [("a ", 0.5), ("b ", 0.5)], ("a ",): [("The answer is 7.", 1.0)],
        ("b ",): [("The answer is 3.", 1.0)]}


@pytest.fixture
def no_load(monkeypatch):
    """Loading any model fails the test: the checks must come first."""
    def refuse(name: str, **kwargs: Any) -> Any:
        raise AssertionError(f"a model was loaded ({name}) before the input was checked")

    monkeypatch.setattr(search.api, "_load_engine", refuse)
    monkeypatch.setattr(search.api, "_ENGINES", {})


def engine() -> ScriptedEngine:
    return ScriptedEngine(lambda path: TREE.get(path, []))


# every value rule an algorithm used to check in its body, now declared beside it
RULES = [
    ("beam", {"n": 8, "m": 3}, "m must divide n (got m=3, n=8)"),
    ("beam", {"m": 0}, "m must be >= 1"),
    ("beam", {"lookahead": -1}, "lookahead must be >= 0"),
    ("dvts", {"n": 6, "m": 4}, "m must divide n"),
    ("diverse_beam", {"n": 8, "m": 2, "groups": 3}, "groups must divide n/m"),
    ("diverse_beam", {"level": "tok"}, "level must be one of 'step', 'token'"),
    ("diverse_beam", {"diversity": "cosine"}, "diversity must be one of 'hamming', 'ngram'"),
    ("diverse_beam", {"ngram": 0}, "ngram must be >= 1"),
    ("astar", {"width": 0}, "width must be >= 1"),
    ("astar", {"g": "max"}, "g must be one of 'last', 'mean', 'sum'"),
    ("astar", {"ties": "lifo"}, "ties must be one of 'deep', 'fifo'"),
    ("astar", {"cost": "log"}, "cost must be one of 'complement', 'neglog'"),
    ("astar", {"duplicates": "drop"}, "duplicates must be one of 'keep', 'merge'"),
    ("beam", {"duplicates": "drop"}, "duplicates must be one of 'keep', 'merge'"),
    ("dvts", {"duplicates": "drop"}, "duplicates must be one of 'keep', 'merge'"),
    ("diverse_beam", {"duplicates": "drop"}, "duplicates must be one of 'keep', 'merge'"),
    ("particle_gibbs", {"reference": "best"}, "reference must be one of 'reward', 'weight'"),
    ("particle_gibbs", {"pool": "first"}, "pool must be one of 'all', 'last'"),
    ("rpc", {"fit_bounds": "paper"}, "fit_bounds must be one of 'authors', 'project'"),
    ("rpc", {"fit_starts": 0}, "fit_starts must be between 1 and 12"),
    ("astar", {"admissible": True, "g": "mean"}, "g must be 'sum' for admissible search"),
    ("astar", {"h_weight": -0.5}, "h_weight must be >= 0"),
    ("first_finish", {"n": 2, "k": 3}, "k must be <= n"),
    ("best_of_n", {"n": 0}, "n must be >= 1"),
    ("diverse_beam", {"lam": float("nan")}, "lam must be >= 0"),
    ("first_finish", {"chunk_tokens": 0}, "chunk_tokens must be >= 1"),
    ("mcts", {"iterations": 0}, "iterations must be >= 1"),
    ("mcts", {"c": -1.0}, "c must be >= 0"),
    ("mcts", {"evaluate": "value"}, "evaluate must be one of 'prm', 'rollout'"),
    ("particle_filter", {"tau": 0.0}, "tau must be > 0"),
    ("particle_filter", {"ess_threshold": 1.5}, "ess_threshold must be between 0 and 1"),
    ("particle_filter", {"resample": "stratified"}, "resample must be one of 'multinomial'"),
    ("particle_gibbs", {"n": 1}, "n must be >= 2"),
    ("pgtd", {"rollouts": 0}, "rollouts must be >= 1"),
    ("pgtd", {"horizon": 0}, "horizon must be >= 1"),
    ("rpc", {"live_after": 0}, "live_after must be >= 1"),
    ("compute_optimal", {"table": {"edges": [1.0]}}, "table must be one load_table reads"),
    # rules every algorithm shares (search.knobs.COMMON)
    ("best_of_n", {"temperature": -0.1}, "temperature must be >= 0"),
    ("best_of_n", {"top_p": 0.0}, "top_p must be in (0, 1]"),
    ("best_of_n", {"select": "best"}, "select must be one of 'score', 'vote', 'weighted_vote'"),
    ("best_of_n", {"agg": "max"}, "agg must be one of 'last', 'mean', 'min', 'prod'"),
    ("greedy", {"step_tokens": 0}, "step_tokens must be >= 1"),
    ("beam", {"max_depth": 0}, "max_depth must be >= 1"),
]


@pytest.mark.parametrize(("algo", "given", "message"), RULES,
                         ids=[f"{a}-{'-'.join(k)}" for a, k, _ in RULES])
def test_value_rules_fail_before_the_model_and_on_direct_calls(no_load, algo, given, message):
    with pytest.raises(ValueError, match=f"^{algo}: .*{message_re(message)}"):
        search.solve(PROBLEM, algo, engine="tiny-arith", scorer="logprob", **given)
    # the same rule guards a direct call of the algorithm function (one place, not two)
    eng = engine()
    with pytest.raises(ValueError, match=message_re(message)):
        registry.get(algo)(PROBLEM, eng, ScriptedScorer(lambda p: 0.5), eng.meter, **given)


def message_re(text: str) -> str:
    import re

    return re.escape(text)


@pytest.mark.parametrize("algo", registry.names())
def test_every_algorithm_accepts_its_defaults_and_refuses_wrong_types(no_load, algo):
    fn = registry.get(algo)
    defaults = knobs.defaults(fn)
    assert "seed" not in defaults and list(defaults) == registry.knob_names(algo)
    assert registry.check_knobs(algo, {}) == defaults
    for name, default in defaults.items():
        tp = knobs.annotation(fn, name)
        bad: Any = "nonsense" if not knobs.conforms("nonsense", tp) else 3.5
        if knobs.conforms(bad, tp):
            continue  # a knob that takes anything
        with pytest.raises(TypeError, match=f"^{algo}: knob {name} takes .*, got {bad!r}"):
            search.solve(PROBLEM, algo, engine="tiny-arith", **{name: bad})
        assert knobs.conforms(default, tp), (algo, name, default)


def test_types_follow_the_annotations():
    fn = registry.get("beam")
    assert knobs.conforms(3, knobs.annotation(fn, "temperature"))  # an int is a number
    assert not knobs.conforms(True, knobs.annotation(fn, "n"))  # a bool is not an int
    assert not knobs.conforms(8.0, knobs.annotation(fn, "n"))
    assert not knobs.conforms("\n\n", knobs.annotation(fn, "stop"))  # a list, not a string
    assert knobs.conforms(["\n"], knobs.annotation(fn, "stop"))
    assert knobs.conforms(None, knobs.annotation(fn, "stop"))
    assert knobs.describe(knobs.annotation(fn, "stop")) == "a list of strings or None"


@pytest.mark.parametrize(("algo", "name", "text", "value"), [
    ("beam", "n", "8", 8), ("beam", "temperature", "0.5", 0.5), ("beam", "temperature", "1", 1),
    ("beam", "select", "vote", "vote"), ("beam", "select", "1", "1"),
    ("beam", "stop", '["\\n"]', ["\n"]), ("beam", "stop", "none", None),
    ("astar", "admissible", "true", True), ("astar", "admissible", "False", False),
    ("compute_optimal", "table", "my.json", "my.json"),
])
def test_command_line_text_is_read_as_the_knobs_type(algo, name, text, value):
    got = knobs.parse(registry.get(algo), name, text)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize(("argv", "message"), [
    (["--algo", "beam", "--knob", "n=8", "--knob", "m=3"], "beam: m must divide n (got m=3, n=8)"),
    (["--knob", "n="], "best_of_n: knob n takes an int, got nothing after '='"),
    (["--knob", "n=eight"], "best_of_n: knob n takes an int, got 'eight'"),
    (["--knob", "seed=3"], "seed is not a knob of best_of_n(): it is solve's own argument"),
    (["--knob", "temprature=1"], "did you mean 'temperature'"),
    (["--scorer", "stepz"], "unknown scorer 'stepz'"),
    (["--scorer", "prm:/no/such/prm"], "no model directory at '/no/such/prm'"),
    (["--model", "tiny-arth"], "did you mean 'tiny-arith'"),
    (["--model", "/no/such/model"], "no model directory"),
    (["--model", "openai:localhost:8080#m"], "must start with http"),
    (["--algo", "bean"], "did you mean 'beam'"),
    (["--tokens", "0"], "Budget.tokens must be positive"),
], ids=["m-divides-n", "empty", "not-int", "seed", "typo", "scorer", "prm", "model-typo",
        "model-dir", "openai-spec", "algo", "budget"])
def test_command_line_refuses_bad_input_before_loading(no_load, capsys, argv, message):
    assert main(["What is 2+3?", "--model", "tiny-arith", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err, err


def test_seed_is_solves_own_argument_not_a_knob(no_load):
    assert all("seed" not in registry.knob_names(a) for a in registry.names())
    with pytest.raises(TypeError, match="seed is not a knob of beam"):
        registry.check_knobs("beam", {"seed": 3})
    with pytest.raises(ValueError, match=r"--knob 'seed=3': none of beam has a knob 'seed'"):
        parse_knobs(["seed=3"], ["beam"])


def test_an_unfetched_embedded_model_fails_before_anything_loads(no_load, monkeypatch, tmp_path):
    monkeypatch.setenv("TTS_CACHE", str(tmp_path))
    monkeypatch.setattr("search.models.smollm2_gguf", lambda: None)
    with pytest.raises(FileNotFoundError, match="not fetched yet: run `python -m search.models"):
        search.solve("What is 2+3?", engine="smollm2-135m")


@pytest.mark.parametrize("fields", [
    {"prompt": "What is 2+\udcff?"}, {"prompt": "ok", "messages": ({"role": "user",
                                                                   "content": "\ud800"},)},
    {"prompt": "ok", "tests": ("assert f() == '\udfff'",)}, {"prompt": "ok", "answer": "\udc80"},
], ids=["prompt", "message", "test", "answer"])
def test_text_that_is_not_utf8_is_refused_at_the_problem(no_load, fields):
    with pytest.raises(ValueError, match=r"is not valid text: .* lone surrogate"):
        Problem(**fields)
    if set(fields) == {"prompt"}:
        with pytest.raises(ValueError, match="Problem.prompt is not valid text"):
            search.solve(fields["prompt"], engine="tiny-arith")
    assert Problem(prompt="emoji 🙂 and é are fine").prompt


def test_the_grid_checks_knob_types_and_the_merged_width_knobs():
    with pytest.raises(TypeError, match="beam: knob n takes an int, got 'x'"):
        parse_knobs(["beam.n=x"], ["beam"])
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        make_grid([PROBLEM], ["beam"], [4], knobs={"beam": {"temperature": -1.0}})
    with pytest.raises(ValueError, match=r"groups must divide n/m \(got groups=3, n=8, m=4\)"):
        make_grid([PROBLEM], ["diverse_beam"], [8], knobs={"diverse_beam": {"groups": 3}})
    with pytest.raises(ValueError, match="lookahead must be >= 0"):  # after the width merge
        make_grid([PROBLEM], ["beam"], [8], knobs={"beam": {"lookahead": -2}})
    with pytest.raises(TypeError, match="knob n takes an int, got 'none'"):
        parse_knobs(["beam.n=none"], ["beam"])


def test_a_refused_command_never_imports_torch():
    """What keeps a bad knob instant with any model: nothing heavy is imported to refuse it
    (the CLI's wall time is measured in the report, not asserted here)."""
    code = ("import sys; from search.__main__ import main; "
            "rc = main(['x', '--model', 'smollm2-135m', '--algo', 'beam', '--knob', 'n=8', "
            "'--knob', 'm=3']); print(rc, 'torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.split() == ["2", "False", "False"], out.stderr
    assert "m must divide n" in out.stderr


def test_rules_wrapper_keeps_the_signature():
    for algo in registry.names():
        fn = registry.get(algo)
        params = inspect.signature(fn).parameters
        assert list(params)[:4] == ["problem", "engine", "scorer", "meter"], algo
        assert fn.__name__ == algo


def test_a_direct_call_with_good_knobs_runs(no_load):
    eng = engine()
    result = registry.get("beam")(PROBLEM, eng, ScriptedScorer(lambda p: 0.5), eng.meter,
                                  n=4, m=2, seed=1)
    assert result.status == "ok" and isinstance(result.tree, Node)


def test_a_hub_id_missing_here_fails_before_anything_loads(no_load, monkeypatch, capsys):
    """An org/name id neither in the local Hugging Face cache nor reachable is refused at
    once (not after a model load and a minute of download retries), as model or PRM."""
    from search import models

    monkeypatch.setattr(models, "_hub_reachable", lambda: False)
    with pytest.raises(FileNotFoundError, match="'org/none' is not in the local Hugging Face "
                                                "cache and the hub cannot be reached"):
        search.solve("What is 2+3?", engine="org/none")
    assert main(["What is 2+3?", "--model", "tiny-arith", "--scorer", "prm:org/none-prm"]) == 2
    assert "'org/none-prm' is not in the local" in capsys.readouterr().err
    monkeypatch.setattr(models, "_hub_reachable", lambda: True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="the hub is off"):
        search.solve("What is 2+3?", engine="org/none")
