"""Independent references for rpc, first_finish, pgtd, compute_optimal and UnitTestScorer.

Scripted trees (search.engines.fake) with hand-computable answers; real code runs only through
the verifiers.code sandbox (skipped if absent). Slow-marked tests run on SmolLM2.
"""

from __future__ import annotations

import importlib.util
import math
from typing import Any

import numpy as np
import pytest
from helpers import status_from_tree
from scipy.stats import weibull_min

import search
from search.algos.compute_optimal import bin_of, fit_table, load_table, quantile_edges
from search.algos.rpc import RpcMark
from search.engines.fake import ScriptedEngine, ScriptedScorer, path_of
from search.types import Budget, Node, Problem, Step
from search.weibull import fit_weibull_mixture, prune_low

HAVE_SANDBOX = importlib.util.find_spec("verifiers.code") is not None
needs_sandbox = pytest.mark.skipif(not HAVE_SANDBOX, reason="verifiers/code.py not present")
MATH = Problem(prompt="toy", id="toy")


def scripted(tree, **kw):
    return ScriptedEngine(lambda p: tree.get(p, []), **kw)


def answer_tree(first, answer_of, length_of=lambda t: 1):
    """root -> first steps (text, prob); each continues deterministically for length_of(t) - 1
    filler steps, then "The answer is <answer_of(t)>." with probability 1."""
    tree: dict[tuple[str, ...], list[tuple[str, float]]] = {(): list(first)}
    for t, _ in first:
        path = (t,)
        for i in range(length_of(t) - 1):
            tree[path] = [(f"{t}{i} ", 1.0)]
            path = path + (f"{t}{i} ",)
        tree[path] = [(f"The answer is {answer_of(t)}.", 1.0)]
    return tree


def firsts(res):
    """The first step of every finished candidate, in candidate order."""
    nodes = {n.id: n for n in res.tree.walk()}
    return [path_of(nodes[c.node_id])[0] for c in res.candidates if c.finished]


# -- RPC ------------------------------------------------------------------------------------
def test_weibull_fit_recovers_a_known_mixture():
    hi = weibull_min.rvs(12.0, scale=0.85, size=360, random_state=np.random.default_rng(0))
    lo = weibull_min.rvs(4.0, scale=0.35, size=240, random_state=np.random.default_rng(1))
    mix = fit_weibull_mixture(np.concatenate([hi, lo]))
    assert mix.weight == pytest.approx(0.6, abs=0.05)
    assert mix.lam_hi == pytest.approx(0.85, rel=0.05) and mix.lam_lo == pytest.approx(0.35, rel=0.1)
    assert mix.k_hi == pytest.approx(12.0, rel=0.25) and mix.k_lo == pytest.approx(4.0, rel=0.25)
    post = mix.posterior_low(np.concatenate([hi, lo]))
    assert np.mean((post > 0.5) == np.r_[np.zeros(360), np.ones(240)]) > 0.97


def test_prune_low_drops_only_the_low_cluster():
    p = [0.90, 0.91, 0.89, 0.92, 0.93, 0.88, 0.50, 0.45, 0.48]
    mask, mix = prune_low(p)
    assert mix is not None and mask.tolist() == [False] * 6 + [True] * 3
    mask, mix = prune_low([0.9, 0.9, 0.5, 0.5, 0.7])  # three distinct values: no fit
    assert mix is None and not mask.any()


def test_rpc_answer_scores_match_hand_computation():
    # three distinct paths (no pruning below 4 distinct probabilities); "a" is likeliest and
    # most often sampled, but "b" and "c" together carry more distinct-path probability
    first = [("a", 0.6), ("b", 0.25), ("c", 0.15)]
    tree = answer_tree(first, {"a": 5, "b": 6, "c": 6}.get)
    res = search.solve(MATH, algo="rpc", engine=scripted(tree),
                       seed=0, n=12)
    sampled = firsts(res)
    assert set(sampled) == {"a", "b", "c"} and sampled.count("a") > sampled.count("b") + \
        sampled.count("c")  # majority vote would say 5
    p = {t: math.sqrt(q) for t, q in first}  # 2 tokens: exp(mean logprob) = sqrt(q * 1)
    total = p["a"] + p["b"] + p["c"]
    want = {"5": p["a"] / total, "6": (p["b"] + p["c"]) / total}
    for c in res.candidates:
        assert c.score == pytest.approx(want[str(c.answer)])
    assert res.answer == "6" and res.stats["pruned"] == 0


def test_rpc_pruning_removes_a_low_probability_crowd():
    # two likely paths answer 4; a crowd of unlikely ones answers 9 and would outweigh them
    high = [("h1", 0.26), ("h2", 0.24)]
    low = [(f"l{i}", 0.04 + 0.002 * i) for i in range(10)]
    tree = answer_tree(high + low, lambda t: 4 if t.startswith("h") else 9)
    res = search.solve(MATH, algo="rpc", engine=scripted(tree),
                       seed=0, n=24)
    nodes = {n.id: n for n in res.tree.walk()}
    pruned = {path_of(nodes[c.node_id])[0] for c in res.candidates
              if (mark := nodes[c.node_id].scores.get(RpcMark)) and mark.rpc_pruned}
    sampled = set(firsts(res))
    assert pruned == {t for t in sampled if t.startswith("l")} and pruned
    unpruned_pc = {a: sum(math.sqrt(q) for t, q in high + low if t in sampled and
                          (t.startswith("h") == (a == "4"))) for a in ("4", "9")}
    assert unpruned_pc["9"] > unpruned_pc["4"]  # without pruning PC would answer 9
    assert res.answer == "4"


def test_rpc_live_pruning_stops_low_paths_early():
    first = [(f"h{i}", 0.2) for i in range(4)] + [(f"l{i}", 0.015 + 0.001 * i) for i in range(10)]
    tree = answer_tree(first, lambda t: 4 if t.startswith("h") else 9, length_of=lambda t: 6)
    off = search.solve(MATH, algo="rpc", engine=scripted(tree), seed=2, n=16)
    live = search.solve(MATH, algo="rpc", engine=scripted(tree), seed=2, n=16, live=True,
                        live_after=1)
    assert live.stats["live_pruned"] > 0 and off.stats["live_pruned"] == 0
    assert live.usage.generated_tokens < off.usage.generated_tokens
    assert live.answer == off.answer == "4"
    nodes = {n.id: n for n in live.tree.walk()}
    stopped = [nodes[c.node_id] for c in live.candidates if not c.finished]
    assert stopped and all(path_of(n)[0].startswith("l") for n in stopped)


# -- First Finish Search ----------------------------------------------------------------------
FFS_FIRST = [("s", 0.15), ("t", 0.15), ("m", 0.3), ("L", 0.4)]
FFS_LEN = {"s": 2, "t": 2, "m": 4, "L": 8}  # steps before the answer step
FFS_TREE = answer_tree(FFS_FIRST, {"s": 1, "t": 2, "m": 2, "L": 1}.get, FFS_LEN.get)


def test_ffs_returns_the_shortest_finisher_and_saves_tokens():
    kw: dict[str, Any] = dict(seed=4, n=8)
    ffs = search.solve(MATH, algo="first_finish", engine=scripted(FFS_TREE), count_saved=True,
                       chunk_tokens=1, **kw)  # rounds of one token: one scripted step
    bon = search.solve(MATH, algo="best_of_n", engine=scripted(FFS_TREE), **kw)
    sampled = [path_of(c)[0] for c in ffs.tree.children]  # launch order
    shortest = min(FFS_LEN[t] for t in sampled)
    winner = next(t for t in sampled if FFS_LEN[t] == shortest)  # ties go to launch order
    chosen = next(c for c in ffs.candidates if c.text == ffs.text)
    assert ffs.text.startswith(winner) and chosen.score == -(shortest + 1)
    assert ffs.answer == {"s": "1", "t": "2"}[winner]
    assert ffs.stats["stopped"] == sum(FFS_LEN[t] > shortest for t in sampled)
    # best-of-n on the same samples runs every path to its end: sum of lengths (+answer step)
    full = sum(FFS_LEN[t] + 1 for t in sampled)
    assert bon.usage.generated_tokens == full > ffs.usage.generated_tokens
    assert ffs.usage.generated_tokens + ffs.stats["saved_tokens"] == full
    assert len(list(ffs.tree.walk())) == 1 + ffs.usage.generated_tokens  # no counterfactuals


def test_ffs_k_votes_over_the_first_k_finishers():
    res = {k: search.solve(MATH, algo="first_finish", engine=scripted(FFS_TREE), seed=4, n=8,
                           k=k, chunk_tokens=1) for k in (1, 5)}
    sampled = [path_of(c)[0] for c in res[5].tree.children]
    order = sorted(range(8), key=lambda i: (FFS_LEN[sampled[i]], i))[:5]
    answers = [{"s": "1", "t": "2", "m": "2", "L": "1"}[sampled[i]] for i in order]
    assert answers.count("1") != answers.count("2")  # no tie on this seed
    assert res[5].answer == max(("1", "2"), key=answers.count)
    assert res[1].answer != res[5].answer  # the vote changes the answer on this seed
    assert res[5].usage.generated_tokens > res[1].usage.generated_tokens


# -- PG-TD ----------------------------------------------------------------------------------
# steps are code tokens; greedy decoding writes `x + 2`, the tests want f(x) = 2x
CODE_TREE = {
    (): [("def f(x):\n", 1.0)],
    ("def f(x):\n",): [("    return", 0.8), ("    y =", 0.2)],
    ("def f(x):\n", "    return"): [(" x", 0.6), (" 2", 0.4)],
    ("def f(x):\n", "    return", " x"): [(" + 2\n", 0.7), (" * 2\n", 0.3)],
    ("def f(x):\n", "    return", " 2"): [(" * x\n", 1.0)],
    ("def f(x):\n", "    y ="): [(" x + x\n", 1.0)],
}
CODE = Problem(prompt="Write f(x) that doubles x.", id="double", domain="code", entry_point="f",
               tests=("assert f(3) == 6", "assert f(0) == 0"), hidden_tests=("assert f(5) == 10",))


def passes(path):
    return 1.0 if "".join(path) in ("def f(x):\n    return x * 2\n",
                                     "def f(x):\n    return 2 * x\n") else 0.0


def code_engine():
    return ScriptedEngine(lambda p: CODE_TREE.get(p, []), end="\x00")


def test_pgtd_finds_a_passing_program_where_greedy_fails():
    engine, scorer = code_engine(), ScriptedScorer(passes)
    greedy = search.solve(CODE, algo="best_of_n", engine=code_engine(), scorer=scorer, n=1,
                          temperature=0.0, select="score")
    assert greedy.answer is not None and greedy.score == 0.0  # greedy writes x + 2
    res = search.solve(CODE, algo="pgtd", engine=engine, scorer=scorer, budget=Budget(tokens=200))
    assert res.status == "ok" and res.score == 1.0 and passes((res.text,)) == 1.0
    assert res.stats["programs"] >= 2 and res.stats["cache_hits"] >= 1  # x+2 reused via cache
    assert res.usage.generated_tokens < 20


def test_pgtd_without_early_stop_keeps_the_first_best_program():
    res = search.solve(CODE, algo="pgtd", engine=code_engine(), scorer=ScriptedScorer(passes),
                       early_stop=False, rollouts=30)
    scored = [c.score for c in res.candidates]
    assert res.score == 1.0 and scored.count(1.0) == 2  # both passing programs were found
    assert res.text == next(c.text for c in res.candidates if c.score == 1.0)


def finished_node(problem, text):
    root = Node(problem=problem, prompt_ids=(0,))
    return Node(parent=root, step=Step(text, (1,), (0.0,), "eos"))


@needs_sandbox
def test_unit_test_scorer_runs_public_tests_in_the_sandbox():
    from rewards.unit_tests import UnitTestScorer

    res = search.solve(CODE, algo="pgtd", engine=code_engine(), scorer="unit_tests",
                       budget=Budget(tokens=200))
    assert res.score == 1.0 and passes((res.text,)) == 1.0
    scorer = UnitTestScorer()
    square = finished_node(CODE, "def f(x):\n    return x * x\n")  # passes f(0) == 0 only
    double = finished_node(CODE, "```python\ndef f(x):\n    return 2 * x\n```")
    unfinished = Node(parent=square.parent, step=Step("def f(x):", (1,), (0.0,), "stop"))
    assert scorer.score(CODE, [unfinished, square, double, square]) == [0.0, 0.5, 1.0, 0.5]
    assert scorer.meter.scorer_calls == 2  # the repeated program came from the cache
    hidden_only = Problem(prompt="p", domain="code", hidden_tests=("assert False",))
    assert scorer.score(hidden_only, [finished_node(hidden_only, "def f(): pass")]) == [0.0]


def test_pgtd_scores_by_public_tests_by_default(monkeypatch):
    """With no scorer, solve() gives pgtd on a code problem the unit-test scorer (PG-TD's
    public-test pass rate); other algorithms keep the log-probability scorer."""
    from search.api import default_scorer
    from search.scoring import known

    assert default_scorer("pgtd", CODE) == "unit_tests"
    assert {default_scorer(a, CODE) for a in search.algorithms() if a != "pgtd"} == {"logprob"}
    made = []

    def fake_unit_tests(engine=None):  # the registry entry, without needing the sandbox
        made.append(ScriptedScorer(passes))
        return made[-1]

    monkeypatch.setitem(known(), "unit_tests", fake_unit_tests)  # the plug-ins loaded
    res = search.solve(CODE, algo="pgtd", engine=code_engine(), budget=Budget(tokens=200))
    assert len(made) == 1 and res.score == 1.0 and passes((res.text,)) == 1.0
    other = search.solve(CODE, algo="best_of_n", engine=code_engine(), n=2)
    assert len(made) == 1 and other.score is not None and other.score < 0  # a log-probability


@pytest.mark.parametrize("problem", [
    "What is 2 + 3?",  # a math question
    Problem(prompt="Write f.", id="untested", domain="code", entry_point="f",
            hidden_tests=("assert f() == 1",)),  # hidden tests are never the search's
    Problem(prompt="toy", id="math-with-tests", tests=("assert True",))])
def test_pgtd_without_public_tests_needs_a_scorer(problem):
    # raised before any model loads: the engine name would fail to load
    with pytest.raises(ValueError, match="pgtd scores programs by a code problem's public"):
        search.solve(problem, algo="pgtd", engine="no/such-model")
    res = search.solve(problem, algo="pgtd", engine=code_engine(), scorer=ScriptedScorer(passes),
                       rollouts=4)
    assert res.algo == "pgtd"  # an explicit scorer is used as given


@needs_sandbox
def test_pgtd_default_scorer_runs_the_public_tests_in_the_sandbox():
    default = search.solve(CODE, algo="pgtd", engine=code_engine(), budget=Budget(tokens=200))
    named = search.solve(CODE, algo="pgtd", engine=code_engine(), scorer="unit_tests",
                         budget=Budget(tokens=200))
    assert default.score == 1.0 and passes((default.text,)) == 1.0
    assert [(c.text, c.score) for c in default.candidates] == \
        [(c.text, c.score) for c in named.candidates]
    assert default.usage.scorer_calls == named.usage.scorer_calls >= 1


def test_program_of_reads_chat_and_completion_styles():
    from rewards.unit_tests import program_of

    stub = Problem(prompt='from math import sqrt\n\n\ndef g(a):\n    """Root plus one."""\n',
                   domain="code", entry_point="g", tests=("assert g(4) == 3",))
    body = "    return sqrt(a) + 1\n"
    assert program_of(stub, body) == stub.prompt + body  # a base model continues the body
    chat = program_of(stub, f"Sure:\n```python\ndef g(a):\n{body}```\nDone.")
    assert chat.startswith(stub.prompt) and chat.endswith(f"def g(a):\n{body}")
    prose = Problem(prompt="Write g.", domain="code", entry_point="g", tests=("assert g(4) == 3",))
    assert program_of(prose, f"def g(a):\n{body}") == f"def g(a):\n{body}"  # prompt is no code
    if HAVE_SANDBOX:
        from verifiers.code import run_tests

        assert run_tests(chat, stub.tests).passed_all  # sqrt comes from the prompt's import


def test_code_answers_of_completion_and_chat_styles():
    """A body continuing the stub is an answer (the completed function), so a search over a
    completion model selects among its programs; empty text is none."""
    from search.answers import extract, vote_key

    stub = Problem(prompt='def g(a):\n    """Double."""\n', domain="code", entry_point="g")
    body = "    return 2 * a\n"
    assert extract(stub, body) == stub.prompt + body
    assert extract(stub, "```python\ndef g(a):\n    return a + a\n```") == \
        "def g(a):\n    return a + a"
    assert extract(stub, "  \n") is None
    one, two = extract(stub, body), extract(stub, body + "\n")
    assert one is not None and two is not None and vote_key(stub, one) == vote_key(stub, two)


# -- compute_optimal ------------------------------------------------------------------------
TABLE = {"probe": {"n": 2, "signal": "score", "budget_fraction": 0.5},
         "edges": [0.5],
         "bins": [{"algo": "best_of_n", "knobs": {"n": 2, "select": "score"}, "tokens": None},
                  {"algo": "beam", "knobs": {"n": 4, "m": 2}, "tokens": 40}]}


@pytest.mark.parametrize("value,algo", [(1.0, "best_of_n"), (0.0, "beam")])
def test_compute_optimal_picks_by_probe_difficulty(value, algo):
    tree = answer_tree([("a", 0.5), ("b", 0.5)], {"a": 1, "b": 2}.get)
    res = search.solve(MATH, algo="compute_optimal", engine=scripted(tree),
                       scorer=ScriptedScorer(lambda p: value), budget=Budget(tokens=100),
                       table=TABLE)
    assert res.stats["chosen_algo"] == algo and res.stats["difficulty"] == 1.0 - value
    assert len(res.candidates) == (2 if algo == "best_of_n" else 4)
    probe_tokens = 2 * 2  # two 2-step samples
    assert res.usage.generated_tokens == probe_tokens + 2 * len(res.candidates)
    assert res.algo == "compute_optimal" and res.answer in {"1", "2"}


@pytest.mark.parametrize("value", [1.0, 0.0])
def test_compute_optimal_probe_bin_keeps_the_probes_answer(value):
    """A "probe" bin spends nothing after the probe: the answer, candidates and tokens are
    the probe's (two 2-step samples, 4 tokens); the other bin runs its search as before."""
    table = dict(TABLE, probe={**TABLE["probe"], "select": "weighted_vote"},
                 bins=[{"algo": "probe", "knobs": {}, "tokens": None}, TABLE["bins"][1]])
    tree = answer_tree([("a", 0.5), ("b", 0.5)], {"a": 1, "b": 2}.get)
    res = search.solve(MATH, algo="compute_optimal", engine=scripted(tree),
                       scorer=ScriptedScorer(lambda p: value), budget=Budget(tokens=100),
                       table=table)
    if value == 1.0:  # difficulty 0: the easy bin
        assert res.stats["chosen_algo"] == "probe" and not res.stats["fallback"]
        assert res.usage.generated_tokens == 4 and len(res.candidates) == 2
        assert res.selected_by.startswith("probe best_of_n: weighted_vote")
    else:
        assert res.stats["chosen_algo"] == "beam" and res.usage.generated_tokens > 4


def test_compute_optimal_agreement_signal_and_default_table():
    assert len(load_table()["bins"]) == len(load_table()["edges"]) + 1
    one_answer = answer_tree([("a", 0.5), ("b", 0.5)], lambda t: 1)
    kw: dict[str, Any] = dict(algo="compute_optimal", engine=scripted(one_answer), budget=Budget(tokens=100),
              scorer=ScriptedScorer(lambda p: 0.0))  # by score: hardest; by agreement: easy
    assert search.solve(MATH, table=TABLE, **kw).stats["chosen_algo"] == "beam"
    agree = dict(TABLE, probe={"n": 4, "signal": "agreement"})
    res = search.solve(MATH, table=agree, **{**kw, "engine": scripted(one_answer)})
    assert res.stats["difficulty"] == 0.0 and res.stats["chosen_algo"] == "best_of_n"
    with pytest.raises(ValueError, match="one more bin"):
        load_table(dict(TABLE, edges=[0.3, 0.6]))
    with pytest.raises(TypeError, match="no knob"):
        load_table(dict(TABLE, bins=[TABLE["bins"][0], {"algo": "beam", "knobs": {"q": 1}}]))


def test_fit_table_builds_a_table_from_eval_rows():
    rows = []
    for i in range(10):  # bin 0: equal accuracy, best_of_n is cheaper; bin 1: beam is better
        rows += [dict(problem_id=f"e{i}", bin=0, algo="best_of_n", knobs={"n": 4},
                      correct=i < 9, tokens=100),
                 dict(problem_id=f"e{i}", bin=0, algo="beam", knobs={"n": 8, "m": 4},
                      correct=i < 9, tokens=300),
                 dict(problem_id=f"h{i}", bin=1, algo="best_of_n", knobs={"n": 4},
                      correct=i < 2, tokens=100),
                 dict(problem_id=f"h{i}", bin=1, algo="beam", knobs={"n": 8, "m": 4},
                      correct=i < 6, tokens=300, budget=400)]
    table = fit_table(rows, edges=[0.3, 0.7])
    assert [b["algo"] for b in table["bins"]] == ["best_of_n", "beam", "beam"]
    assert table["bins"][1]["accuracy"] == pytest.approx(0.6)
    assert table["bins"][1]["tokens"] == 400 and table["bins"][2]["copied_from"] == 1
    costly = fit_table(rows, edges=[0.3, 0.7], token_cost=0.01)  # +0.4 acc < 200 tokens
    assert costly["bins"][1]["algo"] == "best_of_n"
    assert load_table(table)["edges"] == [0.3, 0.7]  # a fitted table is a valid table
    assert bin_of(0.3, [0.3, 0.7]) == 1 and bin_of(0.29, [0.3, 0.7]) == 0
    assert quantile_edges(range(101), 4) == [25.0, 50.0, 75.0]


# -- SmolLM2 end to end -----------------------------------------------------------------------
SMALL = {"rpc": dict(n=4, step_tokens=48, max_depth=4),
         "first_finish": dict(n=4, chunk_tokens=32, max_tokens=160),
         "compute_optimal": dict(table={
             "probe": {"n": 2, "step_tokens": 48, "max_depth": 3, "budget_fraction": 0.3},
             "edges": [0.5],
             "bins": [{"algo": "best_of_n", "knobs": {"n": 2, "step_tokens": 48, "max_depth": 3}},
                      {"algo": "beam", "knobs": {"n": 4, "m": 2, "step_tokens": 48,
                                                 "max_depth": 3}}]})}


@pytest.mark.slow
@pytest.mark.parametrize("algo", sorted(SMALL))
def test_end_to_end_on_smollm2(smollm2_engine, algo):
    res = search.solve("What is 17 * 23 - 5?", algo=algo, engine=smollm2_engine,
                       budget=Budget(tokens=400), seed=0, **SMALL[algo])
    assert res.algo == algo and res.usage.generated_tokens > 0
    assert res.usage.generated_tokens <= 400 + 4 * 48
    assert res.candidates and res.status == status_from_tree(res, Budget(tokens=400))
    assert smollm2_engine.cached_tokens == 0


@pytest.mark.slow
@needs_sandbox
def test_pgtd_on_smollm2_with_unit_tests(smollm2_engine):
    problem = Problem(prompt='def add(a, b):\n    """Return the sum of a and b."""\n', id="add",
                      domain="code", entry_point="add",
                      tests=("assert add(1, 2) == 3", "assert add(-1, 1) == 0"))
    res = search.solve(problem, algo="pgtd", engine=smollm2_engine, scorer="unit_tests",
                       budget=Budget(tokens=400), rollouts=6, width=2, horizon=96)
    assert res.algo == "pgtd" and res.stats["programs"] >= 1
    assert all(0.0 <= c.score <= 1.0 for c in res.candidates)
    assert res.usage.generated_tokens <= 400 + 96
    if res.status == "ok":  # the chosen program's public score is what the sandbox says
        from rewards.unit_tests import program_of
        from verifiers.code import run_tests
        rate = run_tests(program_of(problem, res.text), problem.tests).pass_rate
        assert rate == res.score
