"""search.solve end to end on a tiny random Llama: API, budget, seeds, bad input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import networkx as nx
import pytest
from helpers import status_from_tree

import search
from search.models import ModelNotFoundError
from search.types import Budget, Problem

REPO = Path(__file__).resolve().parents[1]
KNOBS: dict[str, dict[str, Any]] = {"best_of_n": dict(n=4, step_tokens=6, max_depth=5),
         "beam": dict(n=4, m=2, step_tokens=6, max_depth=5)}


@pytest.mark.parametrize("pkg", ["search", "verifiers", "rewards", "problems", "reports"])
def test_packages_import_from_this_repository(pkg):
    """Same-named PyPI packages exist; ours must win."""
    mod = __import__(pkg)
    assert Path(mod.__file__).resolve().parent == REPO / pkg


@pytest.mark.parametrize("algo", sorted(KNOBS))
def test_solve_returns_a_result_with_tree_and_usage(tiny_engine, algo):
    res = search.solve("1+2=", algo=algo, engine=tiny_engine, seed=0,
                       stop=None, **KNOBS[algo])
    assert isinstance(res, search.Result) and res.algo == algo
    assert res.usage.generated_tokens > 0 and res.usage.prefill_tokens > 0
    assert res.usage.flops == pytest.approx(
        2 * tiny_engine.n_params * (res.usage.generated_tokens + res.usage.prefill_tokens),
        rel=0.5)
    graph = res.to_networkx()
    assert isinstance(graph, nx.DiGraph) and nx.is_tree(graph)
    assert graph.number_of_nodes() == sum(1 for _ in res.tree.walk())
    assert res.status == status_from_tree(res)
    assert len(res.candidates) >= 1
    if res.answer is None:
        assert res.text == ""  # nothing is made up


@pytest.mark.parametrize("algo", sorted(KNOBS))
def test_same_seed_same_result_different_seed_differs(tiny_engine, algo):
    def run(seed):
        res = search.solve("3*4=", algo=algo, engine=tiny_engine, seed=seed, stop=None,
                           **KNOBS[algo])
        return [c.text for c in res.candidates], res.usage.generated_tokens

    assert run(1) == run(1)
    assert run(1) != run(2)


@pytest.mark.parametrize("algo", sorted(KNOBS))
@pytest.mark.parametrize("tokens", [1, 10, 37, 100])
def test_token_budget_overshoots_by_at_most_one_batch(tiny_engine, algo, tokens):
    knobs: dict[str, Any] = dict(KNOBS[algo], max_depth=50)
    res = search.solve("5-3=", algo=algo, engine=tiny_engine, budget=Budget(tokens=tokens),
                       stop=None, **knobs)
    batch = knobs["n"] * knobs["step_tokens"]  # rows x step cap: the largest expansion batch
    assert res.usage.generated_tokens <= tokens + batch
    if res.usage.generated_tokens < tokens:
        assert res.status != "budget_exhausted"


def test_tiny_budget_says_so_instead_of_answering(tiny_engine):
    tiny_engine.eos_ids = frozenset()  # nothing can finish within one token
    res = search.solve("5-3=", algo="beam", engine=tiny_engine, budget=Budget(tokens=1),
                       stop=None, n=4, m=2, step_tokens=6)
    assert res.status == "budget_exhausted" and res.answer is None
    assert all(not c.finished and c.answer is None for c in res.candidates)


def test_prefill_counter_proves_no_reprefill(tiny_engine):
    """Beam search, 4 beams, 10 steps: the model sees the prompt once and each generated
    token at most once, >= 95% fewer prefilled tokens than re-sending full prefixes."""
    tiny_engine.eos_ids = frozenset()
    res = search.solve("12+34=", algo="beam", engine=tiny_engine, stop=None, n=16, m=4,
                       step_tokens=8, max_depth=10)
    prompt = len(res.tree.prompt_ids)
    assert max(n.depth for n in res.tree.walk()) == 10
    assert res.usage.prefill_tokens == prompt
    # what a loop over generate() would have prefilled: every expanded node's full prefix, once
    # per sampled child
    resent = sum(child.parent.n_tokens for child in res.tree.walk() if child.parent is not None)
    assert res.usage.prefill_tokens <= 0.05 * resent
    processed = (res.usage.flops / (2 * tiny_engine.n_params))
    assert processed <= prompt + res.usage.generated_tokens


def test_vote_counts_equivalent_answers_together():
    from search.select import candidates, majority_vote, weighted_vote
    from search.types import Node, Step

    p = Problem(prompt="q")
    root = Node(problem=p)
    texts = ["The answer is 1/2.", "The answer is \\frac{1}{2}.", "The answer is 3.",
             "The answer is 3.", "The answer is 0.5."]
    leaves = [Node(parent=root, step=Step(t, (1,), (0.0,), "eos")) for t in texts]
    cands = candidates(p, leaves, [0.1, 0.2, 0.3, 0.1, 0.9])
    # 1/2 and \frac{1}{2} normalise together: 2 votes each for "1/2" and "3"; tie broken by
    # summed score (0.3 vs 0.4) -> 3
    voted, weighted = majority_vote(p, cands), weighted_vote(p, cands)
    assert voted is not None and weighted is not None
    assert voted.answer == "3"
    # weighted: 1/2 -> 0.3, 3 -> 0.4, 0.5 -> 0.9
    assert weighted.answer == "0.5"


# -- bad input -----------------------------------------------------------------------------
def test_unknown_algorithm_suggests(tiny_engine):
    with pytest.raises(ValueError, match="did you mean 'beam'"):
        search.solve("1+1=", algo="beem", engine=tiny_engine)


def test_unknown_knob_suggests(tiny_engine):
    with pytest.raises(TypeError, match="did you mean 'step_tokens'"):
        search.solve("1+1=", algo="beam", engine=tiny_engine, step_token=5)


@pytest.mark.parametrize("bad", ["", "   ", None, 42])
def test_empty_or_non_string_problem(tiny_engine, bad):
    with pytest.raises((ValueError, TypeError), match="empty problem|must be a Problem"):
        search.solve(bad, engine=tiny_engine)


@pytest.mark.parametrize("field", ["tokens", "scorer_calls", "flops", "seconds"])
@pytest.mark.parametrize("value", [0, -5, float("nan")])
def test_zero_or_negative_budget(field, value):
    if field in ("tokens", "scorer_calls") and isinstance(value, float):  # counts are ints
        with pytest.raises(TypeError, match="must be an int"):
            Budget(**{field: value})  # type: ignore[arg-type]
        return
    with pytest.raises(ValueError, match="must be positive"):
        Budget(**{field: value})  # type: ignore[arg-type]


def test_missing_model_is_a_clear_error():
    with pytest.raises(ModelNotFoundError, match="no model directory"):
        search.solve("1+1=", engine="/nonexistent/model/dir")
    with pytest.raises(ModelNotFoundError, match="did you mean 'smollm2-135m'"):
        search.solve("1+1=", engine="smollm2-13m")


def test_cli_reports_bad_algorithm(capsys):
    from search.__main__ import main

    assert main(["1+1=", "--algo", "nope"]) == 2
    assert "unknown algorithm" in capsys.readouterr().err


@pytest.mark.parametrize("algo", sorted(KNOBS))
def test_budget_spent_before_the_first_step_returns_an_honest_empty_result(algo):
    """A seconds budget can run out before anything is generated: no crash, no answer."""
    from search.engines.fake import ScriptedEngine, ScriptedScorer

    engine = ScriptedEngine(lambda p: [("a.", 1.0)] if not p else [])
    res = search.solve("q", algo=algo, engine=engine, scorer=ScriptedScorer(lambda p: 1.0),
                       budget=Budget(seconds=1e-9))
    assert res.answer is None and res.status == "budget_exhausted" and not res.candidates
    assert res.usage.generated_tokens == 0


def test_cli_exits_fast_yet_flushes_and_runs_atexit(tmp_path):
    """`python -m search` ends with os._exit (skipping ~1.2 s of teardown after a SmolLM2
    solve), so it must flush its output and run atexit handlers (the sandbox pool's) itself:
    buffered output into a pipe and a handler's file survive, and the code is kept."""
    import subprocess
    import sys

    mark = tmp_path / "atexit-ran"
    code = ("import atexit, sys\n"
            f"atexit.register(lambda: open({str(mark)!r}, 'w').write('yes'))\n"
            "from search.__main__ import exit_now\n"
            "sys.stdout.write('x' * 100000)\n"  # more than a pipe's buffer: must be flushed
            "exit_now(3)\n")
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 3, run.stderr
    assert run.stdout == "x" * 100000
    assert mark.read_text() == "yes"
