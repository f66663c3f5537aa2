"""A long solve shows a progress line on a terminal, and every output names the model and
scorer that produced it (issue 19, item 6/7)."""

from __future__ import annotations

import io
import json
import re
import sys

import pytest

import search
from reports.figures.viewer import to_html
from search.__main__ import main
from search.engines.fake import ScriptedEngine, ScriptedScorer
from search.progress import Progress
from search.types import Budget, Problem

PROBLEM = Problem(prompt="toy", id="toy", answer="7")


def tree(path: tuple[str, ...]) -> list[tuple[str, float]]:
    """Paths starting "a " answer 7 after two steps, the others 3 after four: enough
    expansions for several progress ticks, with finished paths before the end."""
    if len(path) < (1 if path[:1] == ("a ",) else 3):
        return [("a ", 0.5), ("b ", 0.3), ("c ", 0.2)]
    return [(f"The answer is {7 if path[0] == 'a ' else 3}.", 1.0)]


def engine() -> ScriptedEngine:
    return ScriptedEngine(tree, tokens_per_step=3)


def scorer() -> ScriptedScorer:
    return ScriptedScorer(lambda path: 0.9 if path[0] == "a " else 0.2)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


LINE = re.compile(r"search  (\S+) on (\S+) · ([\d,]+) tokens · (\d+) candidates · "
                  r"best (partial )?(\S+) · [\d.]+ s")


def drawn(text: str) -> list[re.Match[str]]:
    return [m for part in text.split("\r") if (m := LINE.match(part))]


def solve(progress, algo="beam", **kw):
    return search.solve(PROBLEM, algo, Budget(tokens=200), engine=engine(), scorer=scorer(),
                        seed=3, progress=progress, **kw)


def test_progress_line_on_a_terminal_counts_tokens_candidates_and_the_best_score():
    term = Terminal()
    shown = Progress(term, after=0, every=0)
    result = solve(shown, n=6, m=2)
    lines = drawn(term.getvalue())
    assert len(lines) == shown.drawn > 3
    tokens = [int(m[3].replace(",", "")) for m in lines]
    cands = [int(m[4]) for m in lines]
    assert tokens == sorted(tokens) and cands == sorted(cands)  # updated in place, growing
    assert tokens[-1] <= result.usage.generated_tokens
    finished = [n for n in result.tree.walk() if n.finished]
    assert 0 < cands[-1] <= len(finished)
    # best: the highest reward of a finished node so far, as the scorer gave it (of a
    # partial path before any finished one is scored)
    kinds = [0 if m[6] == "-" else 1 if m[5] else 2 for m in lines]  # none, partial, finished
    assert kinds == sorted(kinds) and 1 in kinds and kinds[-1] == 2
    assert {m[6] for m in lines if m[5]} <= {"0.9", "0.2"}
    assert {m[6] for m, k in zip(lines, kinds) if k == 2} == {"0.9"}
    assert (lines[0][1], lines[0][2]) == ("beam", "ScriptedEngine")
    assert term.getvalue().endswith("\r\x1b[K")  # erased when the solve ends


def test_no_line_when_not_a_terminal_or_silenced_or_short(monkeypatch):
    pipe = io.StringIO()
    solve(Progress(pipe, after=0, every=0), n=6, m=2)
    assert pipe.getvalue() == ""
    term = Terminal()
    solve(Progress(term, after=3600), n=6, m=2)  # a solve shorter than `after`
    assert term.getvalue() == ""
    stderr = Terminal()
    monkeypatch.setattr(sys, "stderr", stderr)
    solve(False, n=6, m=2)
    assert stderr.getvalue() == ""


@pytest.mark.parametrize("algo, knobs", [("beam", {"n": 6, "m": 2}), ("best_of_n", {"n": 5}),
                                         ("mcts", {"iterations": 6})])
def test_progress_never_changes_the_result(algo, knobs):
    eng_a, eng_b = engine(), engine()
    a = search.solve(PROBLEM, algo, Budget(tokens=200), engine=eng_a, scorer=scorer(),
                     seed=3, progress=Progress(Terminal(), after=0, every=0), **knobs)
    b = search.solve(PROBLEM, algo, Budget(tokens=200), engine=eng_b, scorer=scorer(),
                     seed=3, progress=False, **knobs)
    assert (a.answer, a.text, a.score, a.status) == (b.answer, b.text, b.score, b.status)
    assert [(c.text, c.score) for c in a.candidates] == [(c.text, c.score) for c in b.candidates]
    assert [n.step.text for n in a.tree.walk() if n.step] == \
        [n.step.text for n in b.tree.walk() if n.step]
    ua, ub = a.usage.as_dict(), b.usage.as_dict()
    del ua["seconds"], ub["seconds"]
    assert ua == ub
    assert "root" not in vars(eng_a)  # the engine is left as it was


def test_results_and_outputs_name_model_and_scorer(tmp_path, capsys):
    result = solve(False, n=4, m=2)
    assert (result.model, result.scorer) == ("ScriptedEngine", "ScriptedScorer")
    page = to_html(result)
    assert "<title>beam · ScriptedEngine · scorer ScriptedScorer search tree</title>" in page
    assert "<th>model</th><td>ScriptedEngine</td>" in page
    assert "<th>scorer</th><td>ScriptedScorer</td>" in page
    assert main(["3+4=", "--model", "tiny-arith", "--scorer", "steps", "--algo", "beam",
                 "--knob", "n=4", "--knob", "m=2", "--tokens", "400", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "by: beam on model tiny-arith, scorer steps, seed 0; chosen by score(steps" in out
    assert main(["3+4=", "--model", "tiny-arith", "--algo", "greedy", "--tokens", "30",
                 "--json"]) == 0
    got = json.loads(capsys.readouterr().out)  # greedy consults no scorer: none is named
    assert (got["model"], got["scorer"], got["algo"]) == ("tiny-arith", "", "greedy")
    assert got["selected_by"].startswith("greedy")


def test_viewer_takes_a_dataset_problem_and_names_what_made_the_tree(tmp_path, capsys):
    from problems import arith
    from reports.figures.viewer import main as viewer

    out = tmp_path / "tree.html"
    assert viewer(["--dataset", "arith", "--index", "1", "--algo", "beam", "--knob", "n=4",
                   "--knob", "m=2", "--model", "tiny-arith", "--scorer", "steps", "--tokens",
                   "120", "--quiet", "--out", str(out)]) == 0
    problem = arith.generate(2, seed=0)[1]
    printed = capsys.readouterr().out
    assert f"reference {problem.answer}" in printed and "by: beam · tiny-arith" in printed
    page = out.read_text()
    assert problem.prompt.split(".")[0] in page and "<th>model</th><td>tiny-arith</td>" in page
    assert "<th>scorer</th><td>steps</td>" in page
    assert viewer(["question", "--dataset", "arith", "--out", str(out)]) == 2
    assert "not both" in capsys.readouterr().err


def test_the_grid_bar_moves_while_runs_are_in_flight():
    """The tokens a run generates reach the eval bar as the run charges its meter, before its
    row is written; the row then adds nothing twice (issue 33)."""
    from reports.eval.grid_progress import GridProgress
    from search.budget import Meter
    from search.session import KVScope

    with GridProgress(pending=2, total=2, desc="t", quiet=True, every=0.0) as bar:
        bar.started()
        meter = Meter()
        with bar.watch().watching(meter, KVScope(), "run"):
            meter.charge_model(generated=7)
            meter.charge_model(generated=5, prefill=100)
            assert (bar.tokens, bar.seen, bar.in_flight) == (12, 0, 1)
            assert "1 in flight" in bar.status() and "tok/s" in bar.status()
        meter.charge_model(generated=3)  # after the run: not watched any more
        bar.stopped()
        bar.finished({"correct": True, "usage": {"generated_tokens": 12}})
        assert (bar.tokens, bar.seen, bar.in_flight) == (12, 1, 0)


def test_the_cli_shows_a_score_only_when_a_scorer_chose(capsys):
    from search.__main__ import main

    assert main(["What is 2 + 3?", "--model", "tiny-arith", "--quiet", "--knob", "n=3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert not any(x.startswith("score:") for x in lines)  # a vote chose
    assert lines[1].startswith("status: finished")  # how it ended, not a verdict ("ok")
    assert main(["What is 2 + 3?", "--model", "tiny-arith", "--quiet", "--algo", "beam",
                 "--scorer", "steps", "--knob", "n=2", "--knob", "m=1"]) == 0
    assert any(x.startswith("score: ") and x.endswith("(by steps)")
               for x in capsys.readouterr().out.splitlines())
