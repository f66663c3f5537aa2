"""The scripted engine honours stop and max_tokens as the real engines do (the Engine
protocol, search/engines/base.py): with stop strings a continuation is one step; with none it
runs on to the end of the solution; no row ever gets more than max_tokens tokens, and the
meter is charged exactly the tokens the rows got. Worked out by hand on a one-path tree."""

from __future__ import annotations

import pytest

from search.engines.fake import ScriptedEngine, ScriptedScorer, path_of
from search.types import Node, Problem, Step

# one path: a -> b -> c -> "The answer is 1."
CHAIN = {(): ["a "], ("a ",): ["b "], ("a ", "b "): ["c "],
         ("a ", "b ", "c "): ["The answer is 1."]}


def engine(tokens_per_step: int = 2) -> ScriptedEngine:
    return ScriptedEngine(lambda path: [(t, 1.0) for t in CHAIN.get(path, [])],
                          tokens_per_step=tokens_per_step)


def step(node: Node) -> Step:
    assert node.step is not None
    return node.step


def test_a_stop_string_ends_the_continuation_at_one_step():
    eng = engine()
    [[kid]] = eng.expand([eng.root(Problem(prompt="q"))], 1, stop=("\n\n",))
    assert (step(kid).text, len(step(kid).token_ids), step(kid).stop_reason) == ("a ", 2, "stop")
    assert eng.meter.usage().generated_tokens == 2


@pytest.mark.parametrize("stop", [(), None])
def test_no_stop_runs_on_to_the_end_of_the_solution(stop):
    eng = engine()
    [[kid]] = eng.expand([eng.root(Problem(prompt="q"))], 1, stop=stop)
    assert kid.finished and step(kid).stop_reason == "eos"
    assert step(kid).text == "a b c The answer is 1." and len(step(kid).token_ids) == 8
    assert path_of(kid) == ("a ", "b ", "c ", "The answer is 1.")  # the steps it joined
    assert ScriptedScorer(lambda path: len(path)).score(Problem(prompt="q"), [kid]) == [4.0]
    assert eng.meter.usage().generated_tokens == 8


def test_max_tokens_caps_every_row_and_the_meter():
    eng = engine()
    root = eng.root(Problem(prompt="q"))
    kids = eng.expand([root], 3, stop=(), max_tokens=3)[0]
    for kid in kids:  # "a " (2 tokens) and "b " cut to 1: the cap, not the end
        assert (step(kid).text, len(step(kid).token_ids), step(kid).stop_reason) == \
            ("a b ", 3, "max_tokens")
        assert not kid.finished
    assert eng.meter.usage().generated_tokens == 9
    # the cut row goes on from the scripted steps it holds, with stop strings one at a time
    [[next_kid]] = eng.expand([kids[0]], 1, stop=("\n\n",), max_tokens=1)
    assert (step(next_kid).text, len(step(next_kid).token_ids)) == ("c ", 1)
    assert path_of(next_kid) == ("a ", "b ", "c ")
    assert eng.meter.usage().generated_tokens == 10
