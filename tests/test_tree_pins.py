"""Serialised search trees match the ones pinned in tests/data/tree_pins.json.

The pins were computed on main before node scores were typed (issue [architecture], item 3):
for every algorithm (and the variants that write different scores: lookahead, merged and kept
duplicates, rollout values, token-level diverse beam, live pruning, the budget's reserve), a
seeded solve on the scripted engine (pure Python, no model; only rpc's Weibull fit runs
scipy, whose last digits follow the CPU: floats compare to 12 significant digits, see `same`)
is serialised the ways the project serialises a tree: the viewer's HTML page (its knobs and seconds
rows aside), the networkx/GraphML attributes of reports.figures.tree_export (the same aside),
Result's own fields, and every node's scores as a flat mapping. Node ids count from 0 in every solve
(the counter is reset), so ids written into scores (merged_into) are pinned too.

Result.knobs is checked apart: today every knob's actual value is recorded (signature order),
where the pinned knobs were a hand-written list. The pinned items must be a prefix of the
recorded ones (same names, same values, same order), and nothing recorded may be missing
from the signature. A pinned knob since renamed (search.knobs.RENAMED) is compared under its
name now.

Regenerate (only on a checkout whose serialisations are the reference): PIN_TREES=write
python -m pytest tests/test_tree_pins.py
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
from pathlib import Path
from typing import Any

import pytest

import search
import search.types
from reports.figures import tree_export, viewer
from search import knobs as knob_rules
from search import registry
from search.algos import compute_optimal
from search.engines.fake import ScriptedEngine, ScriptedScorer
from search.types import Budget, Problem, Result

PINS = Path(__file__).parent / "data" / "tree_pins.json"
PINNED_TABLE = Path(__file__).parent / "data" / "compute_optimal_table_pinned.json"
PROBLEM = Problem(prompt="toy", id="toy", answer="1")
# "a" + "b " and "ab " are one text by two step splits (A* merges them); "x " scores NaN
TREE = {
    (): [("a", 0.3), ("ab ", 0.3), ("s1 ", 0.4)],
    ("a",): [("b ", 0.6), ("c ", 0.4)],
    ("ab ",): [("The answer is 1.", 0.5), ("x ", 0.5)],
    ("a", "b "): [("The answer is 1.", 0.5), ("x ", 0.5)],
    ("a", "c "): [("The answer is 2.", 1.0)],
    ("s1 ",): [("The answer is 3.", 0.5), ("s2 ", 0.5)],
    ("s1 ", "s2 "): [("The answer is 4.", 0.7), ("s3 ", 0.3)],
    ("s1 ", "s2 ", "s3 "): [("The answer is 1.", 1.0)],
    ("ab ", "x "): [("The answer is 5.", 1.0)],
    ("a", "b ", "x "): [("The answer is 5.", 1.0)],
}
HEAD, RET = "def f(x):\n", "    return"  # PG-TD's tree of tests/test_algos_other.py
CODE_TREE = {(): [(HEAD, 1.0)], (HEAD,): [(RET, 0.8), ("    y =", 0.2)],
             (HEAD, RET): [(" x", 0.6), (" 2", 0.4)],
             (HEAD, RET, " x"): [(" + 2\n", 0.7), (" * 2\n", 0.3)],
             (HEAD, RET, " 2"): [(" * x\n", 1.0)], (HEAD, "    y ="): [(" x + x\n", 1.0)]}
CODE = Problem(prompt="Write f(x) that doubles x.", id="double", domain="code", entry_point="f",
               tests=("assert f(3) == 6",))


FIXED = {("a",): 0.9, ("a", "b "): 0.9, ("ab ",): 0.5, ("s1 ",): 0.3}  # A* meets "ab " twice


def reward(path: tuple[str, ...]) -> float:
    if path in FIXED:
        return FIXED[path]
    if path[-1] == "x ":
        return math.nan  # recorded as invalid, ranked -inf
    return round(0.05 + (sum(map(ord, "".join(path))) * 37 % 90) / 100, 6)


def passes(path: tuple[str, ...]) -> float:
    return 1.0 if "".join(path).endswith(("x * 2\n", "2 * x\n")) else 0.0


RESERVE = Budget(tokens=10, reserve=0.5)  # stops after the first batch: the reserve finishes
# (case name, algo, knobs, budget, code problem?)
CASES = [
    ("greedy", "greedy", {}, None, False),
    ("best_of_n-vote", "best_of_n", {"n": 6}, None, False),
    ("best_of_n-min", "best_of_n", {"n": 6, "select": "score", "agg": "min"}, None, False),
    ("beam", "beam", {"n": 8, "m": 2, "agg": "min"}, None, False),
    ("beam-lookahead", "beam", {"n": 6, "m": 2, "lookahead": 1, "duplicates": "merge"}, None,
     False),
    ("beam-lookahead-keep", "beam", {"n": 6, "m": 2, "lookahead": 2, "duplicates": "keep"},
     None, False),
    ("beam-keep", "beam", {"n": 4, "m": 2, "duplicates": "keep"}, None, False),
    ("beam-reserve", "beam", {"n": 8, "m": 2}, RESERVE, False),
    ("dvts", "dvts", {"n": 8, "m": 2}, None, False),
    ("diverse_beam", "diverse_beam", {"n": 8, "m": 2, "groups": 2}, None, False),
    ("diverse_beam-token", "diverse_beam", {"n": 4, "m": 1, "groups": 2, "level": "token",
                                            "max_tokens": 6}, None, False),
    ("mcts", "mcts", {"iterations": 6, "batch": 2, "k": 3}, None, False),
    ("mcts-rollout", "mcts", {"iterations": 4, "batch": 2, "k": 2, "evaluate": "rollout"},
     None, False),
    ("astar", "astar", {"width": 2, "k": 3}, None, False),
    ("astar-merge", "astar", {"width": 3, "k": 4, "ties": "fifo", "duplicates": "merge"}, None,
     False),
    ("astar-keep", "astar", {"width": 2, "k": 3, "duplicates": "keep", "g": "mean"}, None,
     False),
    ("astar-reserve", "astar", {"width": 2, "k": 3}, RESERVE, False),
    ("best_of_n-reserve", "best_of_n", {"n": 6, "select": "score"}, RESERVE, False),
    ("greedy-reserve", "greedy", {}, Budget(tokens=2, reserve=0.5), False),
    ("dvts-reserve", "dvts", {"n": 8, "m": 2}, RESERVE, False),
    ("diverse_beam-reserve", "diverse_beam", {"n": 8, "m": 2, "groups": 2}, RESERVE, False),
    ("mcts-reserve", "mcts", {"iterations": 4, "batch": 2, "k": 3}, RESERVE, False),
    ("first_finish-reserve", "first_finish", {"n": 6, "chunk_tokens": 1}, RESERVE, False),
    ("particle_gibbs-reserve", "particle_gibbs", {"n": 6}, RESERVE, False),
    ("particle_filter", "particle_filter", {"n": 6}, None, False),
    ("particle_filter-finished", "particle_filter", {"n": 6, "resample_finished": True},
     None, False),
    ("particle_gibbs", "particle_gibbs", {"n": 4, "iterations": 3}, None, False),
    ("particle_gibbs-reward", "particle_gibbs", {"n": 4, "iterations": 3,
                                                 "reference": "reward", "pool": "last"},
     None, False),
    ("rpc", "rpc", {"n": 8}, None, False),
    ("rpc-live", "rpc", {"n": 8, "live": True, "live_after": 1}, None, False),
    ("rpc-reserve", "rpc", {"n": 8}, RESERVE, False),
    ("first_finish", "first_finish", {"n": 4, "k": 2, "chunk_tokens": 1}, None, False),
    ("compute_optimal", "compute_optimal", {}, Budget(tokens=400), False),
    ("pgtd", "pgtd", {"rollouts": 8, "early_stop": False}, None, True),
    ("pgtd-reserve", "pgtd", {}, Budget(tokens=5), True),
]


def solve(algo: str, knobs: dict[str, Any], budget: Budget | None, code: bool) -> Result:
    if code:
        engine = ScriptedEngine(lambda p: CODE_TREE.get(p, []), end="\x00")
        problem, scorer = CODE, ScriptedScorer(passes)
    else:
        engine = ScriptedEngine(lambda p: TREE.get(p, []))
        problem, scorer = PROBLEM, ScriptedScorer(reward)
    named = scorer if registry.uses_scorer(algo, knobs) else None
    return search.solve(problem, algo=algo, engine=engine, scorer=named, seed=3,
                        budget=budget, progress=False, **knobs)


def _plain(value: Any) -> Any:
    """JSON with every float exact (repr) and NaN/inf legal."""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


# Floats the scripted engine and scorer make are exact on every machine; the ones a fit makes
# (rpc's Weibull mixture: scipy's optimiser, whose last bits follow the CPU's SIMD paths) are
# not: they are pinned to 12 significant digits, and residues near 0 to 1e-12.
REL, ABS = 1e-12, 1e-12


def _float(text: Any) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def same(got: Any, want: Any) -> bool:
    """got == want, where two floats (as _plain writes them) may differ by REL/ABS; NaN
    equals NaN; every other value, key and length exactly."""
    if isinstance(got, (list, tuple)) and isinstance(want, (list, tuple)):
        return len(got) == len(want) and all(same(g, w) for g, w in zip(got, want))
    if isinstance(got, dict) and isinstance(want, dict):
        return got.keys() == want.keys() and all(same(got[k], want[k]) for k in got)
    if got == want:
        return True
    g, w = _float(got), _float(want)
    if g is None or w is None:
        return False
    if math.isnan(g) or math.isnan(w):
        return math.isnan(g) and math.isnan(w)
    return math.isclose(g, w, rel_tol=REL, abs_tol=ABS)


def serialise(result: Result) -> dict[str, Any]:
    """Every serialisation of the tree, knobs aside (checked by test_knobs_are_recorded)."""
    page = re.sub(r"<tr><th>knobs</th><td>.*?</td></tr>", "", viewer.to_html(result),
                  flags=re.S)
    page = re.sub(r'<tr data-usage="seconds".*?</tr>', "", page, flags=re.S)  # a timing
    graph = tree_export.to_networkx(result)
    graph.graph.pop("knobs")
    graph.graph.pop("usage_seconds")
    return {
        "html": page,
        "graph_nodes": [[n, _plain(dict(sorted(a.items())))] for n, a in graph.nodes(data=True)],
        "graph_edges": [list(e) for e in graph.edges()],
        "graph": _plain(dict(sorted(graph.graph.items()))),
        "result": _plain({"answer": result.answer, "text": result.text, "score": result.score,
                          "status": result.status, "selected_by": result.selected_by,
                          "stats": dict(result.stats),
                          "candidates": [[c.text, c.answer, c.score, c.finished, c.node_id]
                                         for c in result.candidates]}),
        "scores": [[n.id, _plain(list(n.scores.flat().items()))] for n in result.tree.walk()],
    }


def _run(case: tuple, monkeypatch: pytest.MonkeyPatch) -> Result:
    monkeypatch.setattr(search.types, "_node_ids", itertools.count())
    # compute_optimal's default table is data that refits replace: the pin reads the table
    # it was computed with (the shipped one of that day), through the default path
    monkeypatch.setattr(compute_optimal, "TABLE", PINNED_TABLE)
    _, algo, knobs, budget, code = case
    return solve(algo, knobs, budget, code)


@pytest.fixture(scope="module")
def pins() -> dict[str, Any]:
    if os.environ.get("PIN_TREES") == "write":
        return {}
    return json.loads(PINS.read_text(encoding="utf-8"))


def test_pin_comparison_allows_only_last_digit_drift():
    assert same(["4.832841651445048e-16", "0.25"], ["4.832841651446044e-16", "0.25"])
    assert same({"a": "nan"}, {"a": "nan"})
    assert not same(["0.5"], ["0.50000001"])  # a real change of a score
    assert not same(["1e-09"], ["0.0"])
    assert not same(["nan"], ["0.0"])
    assert not same(["The answer is 1."], ["The answer is 2."])
    assert not same({"a": "1"}, {"b": "1"})
    assert not same(["1", "2"], ["1"])


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_serialised_tree_is_pinned(case, pins, monkeypatch):
    got = serialise(_run(case, monkeypatch))
    if os.environ.get("PIN_TREES") == "write":
        return
    want = pins[case[0]]["tree"]
    for part in want:
        assert same(got[part], want[part]), (case[0], part, json.dumps(got[part])[:2000])


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_knobs_are_recorded_from_the_actual_arguments(case, pins, monkeypatch):
    """Every knob the signature has, in its order; the pinned (hand-listed) ones first and
    unchanged; knobs the search resolved (agg, select) as resolved, not as given."""
    result = _run(case, monkeypatch)
    if os.environ.get("PIN_TREES") == "write":
        return
    fn = registry.get(case[1])
    got = list(_plain(dict(result.knobs)).items())
    # a pin written before a knob was renamed names it by its old name (greedy's max_steps,
    # max_depth since issue 34): the same knob, the same value
    want = [(knob_rules.RENAMED.get(k, k), v) for k, v in pins[case[0]]["knobs"]]
    assert [k for k, _ in got] == knob_rules.names(fn)
    assert [kv for kv in got if kv[0] in dict(want)] == want
    given = case[2]
    for name, value in got:  # what was given stands, unless the search resolved it
        if name in given and name not in ("agg", "select"):
            assert value == _plain(given[name])


def write_pins() -> None:
    """The pin file, from this checkout (PIN_TREES=write python -m tests.test_tree_pins)."""
    out = {}
    compute_optimal.TABLE = PINNED_TABLE  # as _run reads it
    for case in CASES:
        search.types._node_ids = itertools.count()
        result = solve(*case[1:])
        out[case[0]] = {"tree": serialise(result), "knobs": list(_plain(dict(result.knobs)).items())}
    PINS.write_text(json.dumps(out, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")


if __name__ == "__main__":
    write_pins()
