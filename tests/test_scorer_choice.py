"""A named scorer is always used, and every Result and eval row says what chose its answer
(issue 19 item 1); each scorer declares how a path's score is formed from its step scores,
and the step checker ranks finished paths by whether their answer follows from their work
(item 2). References are hand-computed on scripted trees."""

from __future__ import annotations

import importlib.util
import math
from typing import Any

import pytest

import search
from problems import arith
from reports.eval.grid import Grid
from reports.eval.sweep import read_rows, run_grid
from rewards.verifier import StepCheckScorer
from search import registry, scoring
from search.engines.fake import ScriptedEngine, ScriptedScorer, path_of
from search.types import Node, Problem, Step

HAVE_SANDBOX = importlib.util.find_spec("verifiers.code") is not None
needs_sandbox = pytest.mark.skipif(not HAVE_SANDBOX, reason="verifiers/code.py not present")
MATH = Problem(prompt="toy", id="toy", answer="7")

# a vote picks 3 (three of four first steps lead to it); the scorer prefers the path to 7
Tree = dict[tuple[str, ...], list[tuple[str, float]]]
VOTE_TREE: Tree = {(): [("a ", 0.75), ("b ", 0.25)],
             ("a ",): [("The answer is 3.", 1.0)], ("b ",): [("The answer is 7.", 1.0)]}


def vote_engine() -> ScriptedEngine:
    return ScriptedEngine(lambda p: VOTE_TREE.get(p, []))


def prefers_7() -> ScriptedScorer:
    return ScriptedScorer(lambda path: 0.9 if path[0] == "b " else 0.1)


# -- item 1: best_of_n follows the scorer ----------------------------------------------------
def test_best_of_n_votes_without_a_scorer_and_ranks_by_a_named_one():
    voted = search.solve(MATH, "best_of_n", engine=vote_engine(), n=8, seed=1)
    assert sum(c.answer == "3" for c in voted.candidates) > 4  # the majority is wrong here
    assert (voted.answer, voted.selected_by, voted.knobs["select"]) == ("3", "vote", "vote")
    assert voted.usage.scorer_calls == 0
    named = search.solve(MATH, "best_of_n", engine=vote_engine(), scorer=prefers_7(), n=8,
                         seed=1)
    assert (named.answer, named.knobs["select"]) == ("7", "score")
    assert named.selected_by == "score(ScriptedScorer, last)"
    assert named.usage.scorer_calls == 8  # every sample's leaf (agg "last": leaves only)
    assert [c.score for c in named.candidates] == \
        [0.9 if c.text.startswith("b ") else 0.1 for c in named.candidates]
    weighted = search.solve(MATH, "best_of_n", engine=vote_engine(), scorer=prefers_7(), n=8,
                            seed=1, select="weighted_vote")
    # hand-computed: 7 x 0.1 for 3 against 1 x 0.9 for 7
    assert [c.answer for c in weighted.candidates].count("3") == 7
    assert weighted.answer == "7" and weighted.selected_by == "weighted_vote(ScriptedScorer, last)"


def test_the_logprob_scorer_named_is_used_and_not_named_is_a_vote():
    named = search.solve(MATH, "best_of_n", engine=vote_engine(), scorer="logprob", n=8, seed=1)
    assert named.selected_by == "score(logprob, mean)" and named.usage.scorer_calls > 0
    # the per-step geometric-mean token probabilities, averaged along the path (agg "mean")
    for c in named.candidates:
        first = 0.75 if c.text.startswith("a ") else 0.25
        assert c.score == pytest.approx((first + 1.0) / 2)
    assert named.answer == "3"  # the likelier path: the logprob scorer is no verifier


@pytest.mark.parametrize("algo, knobs", [
    ("best_of_n", {"select": "vote"}), ("greedy", {}), ("rpc", {}), ("first_finish", {}),
    ("diverse_beam", {"level": "token"})])
def test_a_named_scorer_the_search_would_ignore_is_refused_before_any_model_loads(
        algo: str, knobs: dict[str, Any]) -> None:
    assert not registry.uses_scorer(algo, knobs)
    with pytest.raises(ValueError, match=f"{algo}.*never consults a scorer"):
        search.solve(MATH, algo, engine="no-such-model", scorer="steps", **knobs)
    search.solve(MATH, algo, engine=vote_engine(), **knobs)  # fine with none named


@pytest.mark.parametrize("algo", registry.names())
def test_every_result_says_what_chose_its_answer(algo):
    """selected_by names the rule, and the scorer and aggregation where scores decided."""
    knobs: dict[str, Any] = {"pgtd": {"rollouts": 4}, "mcts": {"iterations": 8}}.get(algo, {})
    scorer = prefers_7() if registry.uses_scorer(algo, knobs) else None
    res = search.solve(MATH, algo, engine=vote_engine(), scorer=scorer, seed=0, **knobs)
    assert res.answer is not None and res.selected_by
    if scorer is not None:
        assert "ScriptedScorer" in res.selected_by, res.selected_by
    else:
        assert "ScriptedScorer" not in res.selected_by
    if algo == "compute_optimal":  # the search its table chose, then that search's rule
        assert res.selected_by.startswith(f"{res.stats['chosen_algo']}: ") or \
            res.selected_by.startswith("probe best_of_n: ")


# a code problem whose likelier program fails its public test
CODE_TREE: Tree = {(): [("    return x + 2\n", 0.7), ("    return 2 * x\n", 0.3)]}
CODE = Problem(prompt="def f(x):\n    \"\"\"Double x.\"\"\"\n", id="double", domain="code",
               entry_point="f", tests=("assert f(3) == 6",), hidden_tests=("assert f(5) == 10",))


def code_engine() -> ScriptedEngine:
    return ScriptedEngine(lambda p: CODE_TREE.get(p, []), end="\n")


@needs_sandbox
def test_best_of_n_with_unit_tests_runs_them_and_the_row_says_so(tmp_path):
    """The README's HumanEval command: best_of_n with --scorer unit_tests runs the tests
    (scorer_calls > 0) and picks the program that passes, though most samples fail."""
    res = search.solve(CODE, "best_of_n", engine=code_engine(), scorer="unit_tests", n=6,
                       seed=0)
    assert sum("x + 2" in c.text for c in res.candidates) > 3
    assert "2 * x" in res.text and res.score == 1.0 and res.usage.scorer_calls == 2
    assert res.selected_by == "score(unit_tests, last)"
    out = tmp_path / "runs.jsonl"
    run_grid(Grid([CODE], algos=["best_of_n", "greedy"], budgets=[6], seeds=[0], dataset="code"),
             out=out, engine=code_engine(), scorer="unit_tests", model="scripted", quiet=True)
    rows = {r["algo"]: r for r in read_rows(out)}
    assert rows["best_of_n"]["scorer"] == "unit_tests" and rows["best_of_n"]["correct"]
    assert rows["best_of_n"]["selected_by"] == "score(unit_tests, last)"
    assert rows["best_of_n"]["usage"]["scorer_calls"] == 2
    # greedy consults no scorer: it ran with none, and its row names none
    assert rows["greedy"]["scorer"] is None and rows["greedy"]["usage"]["scorer_calls"] == 0
    assert rows["greedy"]["selected_by"] == "greedy (the one path)"


def test_eval_rows_without_a_scorer_record_the_vote(tmp_path):
    out = tmp_path / "runs.jsonl"
    run_grid(Grid([MATH], algos=["best_of_n"], budgets=[8], seeds=[1], dataset="toy"),
             out=out, engine=vote_engine(), model="scripted", quiet=True)
    [row] = read_rows(out)
    assert (row["selected_by"], row["scorer"], row["answer"]) == ("vote", None, "3")
    out2 = tmp_path / "named.jsonl"
    run_grid(Grid([MATH], algos=["best_of_n"], budgets=[8], seeds=[1], dataset="toy"),
             out=out2, engine=vote_engine(), scorer=prefers_7(), model="scripted", quiet=True)
    [row] = read_rows(out2)
    assert (row["selected_by"], row["scorer"], row["answer"]) == (
        "score(ScriptedScorer, last)", "ScriptedScorer", "7")


# -- item 2: path aggregation is the scorer's, and the step checker ranks finished paths -----
def test_every_scorer_declares_its_path_aggregation():
    from search.scoring import name, path_agg

    made = {name: path_agg(scoring.load(name)) for name in ("logprob", "steps", "oracle",
                                                             "unit_tests")}
    assert made == {"logprob": "mean", "steps": "min", "oracle": "last", "unit_tests": "last"}
    from rewards.prm import FORMATS
    from rewards.self_eval import SelfEvalScorer
    from rewards.value_head import ValueHeadScorer

    assert {f.family: f.path_agg for f in FORMATS.values()} == {"math_shepherd": "min",
                                                                "qwen_prm": "min"}
    assert (SelfEvalScorer.path_agg, ValueHeadScorer.path_agg) == ("prod", "last")
    assert name(scoring.load("steps")) == "steps" and name(scoring.load("unit_tests")) == \
        "unit_tests"


class ProdScorer(ScriptedScorer):
    path_agg = "prod"


STEPS_TREE: Tree = {(): [("x ", 1.0)], ("x ",): [("y ", 1.0)], ("x ", "y "): [("The answer is 7.", 1.0)]}
STEP_VALUE = {("x ",): 0.5, ("x ", "y "): 0.8, ("x ", "y ", "The answer is 7."): 0.9}


@pytest.mark.parametrize("algo", ["beam", "particle_filter", "dvts", "mcts", "diverse_beam",
                                  "particle_gibbs"])
def test_the_scorers_aggregation_is_the_default_and_agg_overrides_it(algo):
    engine = ScriptedEngine(lambda p: STEPS_TREE.get(p, []))
    knobs: dict[str, Any] = {"beam": {"n": 2, "m": 1}, "dvts": {"n": 2, "m": 1},
                             "diverse_beam": {"n": 2, "m": 1, "groups": 1},
                             "particle_gibbs": {"n": 2, "iterations": 1},
                             "particle_filter": {"n": 2}, "mcts": {"iterations": 4}}[algo]
    res = search.solve(MATH, algo, engine=engine, scorer=ProdScorer(STEP_VALUE.__getitem__),
                       **knobs)
    assert res.knobs["agg"] == "prod" and res.selected_by == "score(ProdScorer, prod)"
    assert res.answer == "7" and res.score == pytest.approx(0.5 * 0.8 * 0.9)
    low = search.solve(MATH, algo, engine=ScriptedEngine(lambda p: STEPS_TREE.get(p, [])),
                       scorer=ProdScorer(STEP_VALUE.__getitem__), agg="min", **knobs)
    assert low.knobs["agg"] == "min" and low.score == pytest.approx(0.5)


def test_step_checker_scores_a_final_step_by_whether_its_answer_follows():
    scorer = StepCheckScorer()

    def path(*steps: str, finished: bool = True) -> Node:
        node = Node(problem=MATH, prompt_ids=(0,))
        for i, text in enumerate(steps):
            last = i == len(steps) - 1
            node = Node(parent=node, step=Step(text, (1,), (0.0,),
                                               "eos" if last and finished else "stop"))
        return node

    work = ["Mia has 5 * 8 = 40 apples.\n\n", "Ana has 40 - 17 = 23 apples.\n\n"]
    cases = [
        (path(*work, "The answer is 23."), 1.0),  # follows from the last equation
        (path(*work, "The answer is 24."), 0.0),  # does not
        (path(*work, "The answer is 40."), 0.0),  # an earlier value, not the last
        (path("Mia has 5 * 8 = 41 apples.\n\n", "The answer is 41."), 0.0),  # the work is wrong
        (path("Mia has 40 apples.\n\n", "The answer is 40."), 0.5),  # nothing to check against
        (path(*work, "So 23 + 1 = 24 and the answer is 24."), 1.0),  # its own equation
        (path(*work, "So 23 + 1 = 25 and the answer is 25."), 0.0),  # a wrong one
        (path(*work, "So 23 + 1 = 24 and the answer is 23."), 0.0),  # not the last value
        (path(*work, "The answer is 23.", finished=False), 0.5),  # not the end: a plain step
        (path(*work[:1]), 1.0),  # a finished path whose last step is work, answer 40
    ]
    got = scorer.score(MATH, [node for node, _ in cases])
    assert got == [want for _, want in cases]
    assert scorer.meter.scorer_calls == len(cases)


def test_step_checker_scores_every_gold_arith_solution_1_and_a_wrong_answer_0():
    scorer = StepCheckScorer()
    for problem in arith.generate(40, seed=3, difficulty=5):
        steps = problem.metadata["solution"].split(arith.STEP_DELIMITER)
        for answer, want in ((problem.answer, 1.0), (str(int(str(problem.answer)) + 1), 0.0)):
            node = Node(problem=problem, prompt_ids=(0,))
            for i, text in enumerate(steps[:-1] + [f"The answer is {answer}."]):
                last = i == len(steps) - 1
                node = Node(parent=node, step=Step(text + ("" if last else "\n\n"), (1,),
                                                   (0.0,), "eos" if last else "stop"))
            values = [scorer.score(problem, [n])[0] for n in node.path()[1:]]
            # work steps right (1), the answer step as wanted; min over the path: want
            assert values == [1.0] * (len(steps) - 1) + [want], (problem.id, values)


# the likelier ending states a wrong answer; the step checker should rank it below the right one
ARITH_TREE: Tree = {
    (): [("Mia has 5 * 8 = 40 apples.\n\n", 1.0)],
    ("Mia has 5 * 8 = 40 apples.\n\n",): [("Ana has 40 - 17 = 23 apples.\n\n", 1.0)],
    ("Mia has 5 * 8 = 40 apples.\n\n", "Ana has 40 - 17 = 23 apples.\n\n"): [
        ("The answer is 32.", 0.8), ("The answer is 23.", 0.2)],
}
ARITH = Problem(prompt="Mia has 5 boxes with 8 apples in each box. Ana has 17 fewer apples "
                "than Mia. How many apples does Ana have now?", id="arith", answer="23")


@pytest.mark.parametrize("algo, knobs", [("beam", {"n": 8, "m": 2}),
                                         ("particle_filter", {"n": 8}),
                                         ("best_of_n", {"n": 8}), ("astar", {"width": 2}),
                                         ("dvts", {"n": 8, "m": 4})])
def test_the_step_checker_ranks_finished_paths(algo, knobs):
    engine = ScriptedEngine(lambda p: ARITH_TREE.get(p, []))
    res = search.solve(ARITH, algo, engine=engine, scorer="steps", seed=0, **knobs)
    finished = [c for c in res.candidates if c.finished]
    wrong = [c for c in finished if c.answer == "32"]
    right = [c for c in finished if c.answer == "23"]
    assert right, "the seed should sample the right ending at least once"
    # ranked: every right ending above every wrong one (astar's scores are -f, the others'
    # the path's min step score: 1 for the right ending, 0 for the wrong)
    assert min(c.score for c in right) > max((c.score for c in wrong), default=-math.inf)
    assert res.answer == "23" and "steps" in res.selected_by
    assert not all(c.score == 0.5 for c in finished)
    assert {path_of(n)[-1] for n in res.tree.walk() if n.finished} <= {"The answer is 32.",
                                                                       "The answer is 23."}
    assert math.isfinite(res.score)
