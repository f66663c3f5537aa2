"""Algorithms own their state: each algorithm's node values are a Mark
defined in its module; the step sampler is one object whose fields are knobs by their own
names; the depth limit has one name (max_depth; max_steps is accepted with a
DeprecationWarning); the Result is built once, by the call that knows every knob."""

from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass
from typing import Any

import pytest

import search
import search.types
from reports.eval.grid import make_grid, parse_knobs
from search import knobs, registry
from search.algos import compute_optimal
from search.algos._stepwise import GreedySampler, Sampler
from search.algos.astar import AStarMark
from search.algos.mcts import MctsMark
from search.engines.fake import ScriptedEngine, ScriptedScorer
from search.marks import FIELDS, Mark, Scores
from search.types import Budget, Problem, Result

PROBLEM = Problem(prompt="toy", id="toy", answer="1")
TREE = {(): [("a ", 0.5), ("b ", 0.5)], ("a ",): [("The answer is 1.", 1.0)],
        ("b ",): [("c ", 0.6), ("The answer is 2.", 0.4)],
        ("b ", "c "): [("The answer is 1.", 1.0)]}
VALUE = {"a ": 0.7, "b ": 0.4, "c ": 0.9, "The answer is 1.": 0.8, "The answer is 2.": 0.3}


def engine() -> ScriptedEngine:
    return ScriptedEngine(lambda path: TREE.get(path, []))


def scorer() -> ScriptedScorer:
    return ScriptedScorer(lambda path: VALUE[path[-1]])


def solve(algo: str, **kw: Any) -> Result:
    named = scorer() if registry.uses_scorer(algo, kw) else None
    return search.solve(PROBLEM, algo, engine=engine(), scorer=named, seed=2, progress=False,
                        **kw)


def tree_of(res: Result) -> list[tuple[int, str, dict[str, float]]]:
    """The tree as data: (depth, text, flat scores) of every node in walk order."""
    return [(n.depth, n.text, n.scores.flat()) for n in res.tree.walk()]


# -- marks ---------------------------------------------------------------------------------
@dataclass(slots=True)
class ToyMark(Mark):
    """A mark as a third party's algorithm would define it."""

    key = "toy"
    visits: int | None = None
    best: bool = False


def test_scores_keep_only_what_every_search_shares():
    assert FIELDS == ("copies", "invalid", "unscored", "reward", "merged_into")


def test_flat_prints_shared_then_marks_in_first_written_order_then_extras():
    s = Scores(copies=2, reward=0.5)
    s.extras["prm"] = 0.25
    s.of(ToyMark).best = True  # written first: printed first among the marks
    s.marks[AStarMark.key] = AStarMark(cost=1.0, g=1.0, f=1.5, pop=0)
    s.of(ToyMark).visits = 3  # a later write to a mark keeps its place
    assert list(s.flat().items()) == [
        ("copies", 2.0), ("reward", 0.5), ("visits", 3.0), ("best", 1.0), ("cost", 1.0),
        ("g", 1.0), ("f", 1.5), ("pop", 0.0), ("prm", 0.25)]
    assert s.get(MctsMark) is None and s.get(ToyMark) is s.of(ToyMark)


def test_a_name_printed_twice_is_refused_not_hidden():
    s = Scores(merged_into=4)
    s.marks[AStarMark.key] = AStarMark(merged_into=7)  # A*'s own merge, beside merge_equal's
    with pytest.raises(ValueError, match=r"AStarMark writes \['merged_into'\]"):
        s.flat()


def test_a_mark_of_another_kind_under_a_key_is_an_error():
    s = Scores()
    s.marks["toy"] = AStarMark()
    with pytest.raises(TypeError, match="under 'toy' is a AStarMark, not a ToyMark"):
        s.get(ToyMark)


def test_each_algorithm_writes_its_state_in_its_own_mark():
    star = solve("astar", width=1, k=2)
    marks = {n.id: n.scores.get(AStarMark) for n in star.tree.walk()}
    root = marks[star.tree.id]
    assert root is not None and (root.cost, root.g, root.f, root.pop) == (0.0, 0.0, 0.0, 0)
    mc = solve("mcts", iterations=3, batch=1, k=2)
    top = mc.tree.scores.get(MctsMark)
    kids = [m for n in mc.tree.children if (m := n.scores.get(MctsMark)) is not None]
    # every backup runs through the root and one of its children
    assert top is not None and kids and top.visits == sum(m.visits or 0 for m in kids) >= 3
    assert all(n.scores.get(AStarMark) is None for n in mc.tree.walk())


# -- the sampler: one object, four knobs ------------------------------------------------------
def test_the_sampler_is_one_parameter_and_four_knobs():
    beam = registry.get("beam")
    assert "sampler" not in knobs.names(beam)
    assert knobs.names(beam)[-4:] == ["temperature", "top_p", "step_tokens", "stop"]
    assert knobs.defaults(registry.get("rpc"))["temperature"] == 1.0
    assert knobs.names(registry.get("greedy")) == ["step_tokens", "stop", "max_depth"]
    assert knobs.fold(beam, {"n": 4, "temperature": 0.0, "step_tokens": 9}) == {
        "n": 4, "sampler": Sampler(temperature=0.0, step_tokens=9)}
    with pytest.raises(TypeError, match="greedy.* has no knob 'temperature'"):
        search.solve(PROBLEM, "greedy", engine=engine(), temperature=0.5)
    assert GreedySampler(step_tokens=7).temperature == 0.0


def test_flat_knobs_and_a_sampler_object_are_the_same_call(monkeypatch):
    monkeypatch.setattr(search.types, "_node_ids", itertools.count())  # ids in scores agree
    flat = solve("beam", n=4, m=2, temperature=0.0, step_tokens=5, stop=["\n"])
    monkeypatch.setattr(search.types, "_node_ids", itertools.count())
    eng = engine()
    direct = registry.get("beam")(PROBLEM, eng, scorer(), eng.session, seed=2, n=4, m=2,
                                  sampler=Sampler(temperature=0.0, step_tokens=5, stop=("\n",)))
    assert tree_of(flat) == tree_of(direct) and flat.answer == direct.answer
    assert flat.knobs == direct.knobs
    assert [flat.knobs[k] for k in ("temperature", "top_p", "step_tokens", "stop")] == \
        [0.0, 1.0, 5, ["\n"]]  # recorded flat, a sequence as a list


def test_a_sampler_value_is_checked_like_a_flat_knob():
    eng = engine()
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        registry.get("beam")(PROBLEM, eng, scorer(), eng.session, sampler=Sampler(temperature=-1))


# -- the depth limit's one name ---------------------------------------------------------------
@pytest.mark.parametrize("algo", registry.names())
def test_the_depth_limit_is_max_depth_wherever_there_is_one(algo):
    """Every algorithm has it unless it declares another bound (@rules(depth_limit=False):
    first_finish's token race, pgtd's horizon, compute_optimal's table of searches); where it
    has it, it bounds the depth of every path it grows."""
    names = knobs.names(registry.get(algo))
    assert "max_steps" not in names
    assert ("max_depth" in names) == registry.declared(algo).depth_limit
    if "max_depth" in names:
        res = solve(algo, max_depth=1)
        assert all(node.depth <= 1 for node in res.tree.walk())


@pytest.mark.parametrize("algo", ["best_of_n", "greedy", "rpc"])
def test_max_steps_still_works_for_one_release_with_a_warning(algo, monkeypatch):
    """The old name gives the same search as the new one, recorded under the new name."""
    monkeypatch.setattr(search.types, "_node_ids", itertools.count())
    new = solve(algo, max_depth=1)
    monkeypatch.setattr(search.types, "_node_ids", itertools.count())
    with pytest.deprecated_call(match=f"{algo}: knob 'max_steps' is now 'max_depth'"):
        old = solve(algo, max_steps=1)
    assert tree_of(old) == tree_of(new) and old.knobs == new.knobs
    assert old.knobs["max_depth"] == 1 and "max_steps" not in old.knobs
    assert all(n.depth <= 1 for n in old.tree.walk())  # the limit held: not the default 40


def test_max_steps_on_every_other_door():
    fn = registry.get("best_of_n")
    eng = engine()
    with pytest.deprecated_call():
        direct = fn(PROBLEM, eng, scorer(), eng.session, n=2, max_steps=1)
    assert direct.knobs["max_depth"] == 1
    with pytest.deprecated_call():
        assert registry.parse_knobs("greedy", {"max_steps": "3"}) == {"max_depth": 3}
    with pytest.deprecated_call():
        assert parse_knobs(["max_steps=2"], ["greedy", "beam"]) == {
            "greedy": {"max_depth": 2}, "beam": {"max_depth": 2}}
    with pytest.deprecated_call():
        [cell] = make_grid([PROBLEM], ["greedy"], [1], seeds=[0],
                           knobs={"greedy": {"max_steps": 2}})
    assert dict(cell.knobs) == {"max_depth": 2}
    with pytest.deprecated_call():
        table = compute_optimal.load_table({"probe": {"max_steps": 3}, "edges": [],
                                            "bins": [{"algo": "greedy",
                                                      "knobs": {"max_steps": 2}}]})
    assert table["probe"]["max_depth"] == 3 and table["bins"][0]["knobs"] == {"max_depth": 2}
    with pytest.raises(TypeError, match="give max_depth only"):
        solve("greedy", max_steps=1, max_depth=2)


def test_the_new_name_warns_nothing():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        solve("best_of_n", n=2, max_depth=2)


# -- the Result, built once -------------------------------------------------------------------
@pytest.fixture
def built(monkeypatch) -> list[Result]:
    """Every Result constructed (dataclasses.replace constructs one too)."""
    made: list[Result] = []
    init = Result.__init__

    def counting(self: Result, *args: Any, **kw: Any) -> None:
        init(self, *args, **kw)
        made.append(self)

    monkeypatch.setattr(Result, "__init__", counting)
    return made


@pytest.mark.parametrize("algo", ["beam", "best_of_n", "greedy", "first_finish"])
def test_solve_builds_one_result(built, algo):
    res = solve(algo)
    assert built == [res]
    assert res.model == "ScriptedEngine" and res.algo == algo and res.seed == 2
    assert list(res.knobs) == knobs.names(registry.get(algo))
    consulted = registry.uses_scorer(algo, res.knobs)
    assert res.scorer == ("ScriptedScorer" if consulted else "")


def test_a_delegating_search_builds_its_own_result_once(built, monkeypatch):
    """compute_optimal: one Result per search it ran (the probe, the one its table chose) and
    one of its own, never one rewritten."""
    table = {"probe": {"n": 2, "step_tokens": 8}, "edges": [0.0],
             "bins": [{"algo": "probe", "knobs": {}}, {"algo": "beam",
                                                       "knobs": {"n": 2, "m": 1}}]}
    res = solve("compute_optimal", table=table, budget=Budget(tokens=200))
    algos = [r.algo for r in built]
    assert algos[-1] == "compute_optimal" and built[-1] is res
    assert algos[:-1] in (["best_of_n"], ["best_of_n", "beam"])
    assert res.knobs == {"table": "custom"} and res.seed == 2
    assert res.stats["chosen_algo"] in ("probe", "beam")
    sub = built[-2]
    assert res.tree is sub.tree and res.candidates == sub.candidates
    assert res.usage.generated_tokens >= sum(r.usage.generated_tokens for r in built[:-1])
    assert algos.count("compute_optimal") == 1
