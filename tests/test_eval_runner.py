"""The eval runner (reports.eval): grid, rows, grading, bad input, error rows, and resume,
including a child process SIGKILLed mid-run and restarted."""

from __future__ import annotations

import inspect
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import search
from problems import arith, codegen
from reports.eval.correctness import Grader
from reports.eval.grid import Grid, make_grid, parse_knobs
from reports.eval.sweep import SCHEMA, load_problems, main, read_rows, run_grid
from search import registry
from search.engines.fake import ScriptedEngine, ScriptedScorer
from search.fit import Width
from search.knobs import defaults as knob_defaults
from search.registry import get, names, uses_scorer
from search.types import Budget, Candidate, Problem, Usage

REPO = Path(__file__).resolve().parents[1]
FIELDS = {"schema", "key", "dataset", "problem_id", "difficulty", "model", "scorer",
          "selected_by", "algo", "knobs", "budget", "seed", "answer", "gold", "correct", "unread",
          "status", "error", "usage", "load_seconds", "cut_by", "narrowed", "sandbox",
          "candidates", "time"}
PROBLEMS = arith.generate(3, seed=5, difficulty=2)
WRONG = "1"  # arith values are >= 2, so this answer is never right


class Engine(ScriptedEngine):
    """Two first steps, then "The answer is X." for X in every gold or a wrong number, so
    each problem gets right and wrong candidates. delay: seconds per expand (a slow model);
    fail: problem ids whose runs raise."""

    def __init__(self, delay: float = 0.0, fail: tuple[str, ...] = ()) -> None:
        golds = [str(p.answer) for p in PROBLEMS]
        def children(path: tuple[str, ...]) -> list[tuple[str, float]]:
            if not path:
                return [("think ", 0.6), ("guess ", 0.4)]
            if len(path) == 1:
                return [(f"The answer is {g}.", 1.0) for g in golds] + [
                    (f"The answer is {WRONG}.", 2.0)]
            return []

        super().__init__(children, tokens_per_step=2)
        self.delay, self.fail, self.name = delay, fail, "scripted"

    def root(self, problem):
        if problem.id in self.fail:
            raise RuntimeError("boom")
        return super().root(problem)

    def expand(self, nodes, n=1, **kw):
        time.sleep(self.delay)
        return super().expand(nodes, n, **kw)


def scorer() -> ScriptedScorer:
    return ScriptedScorer(lambda path: 0.9 if path[0] == "think " else 0.2)


def scorer_for(algo: str, knobs: dict[str, Any]) -> ScriptedScorer | None:
    """What the runner gives a run: the grid's scorer if the run consults one (greedy: none)."""
    return scorer() if uses_scorer(algo, knobs) else None


GRID: dict[str, Any] = dict(algos=["best_of_n", "beam", "greedy"], budgets=[2, 4], seeds=[0, 1],
                            dataset="arith")


def strip(row: dict[str, Any]) -> dict[str, Any]:
    """A row without what legitimately differs between two runs: the clock."""
    out = {k: v for k, v in row.items() if k not in ("time", "load_seconds")}
    out["usage"] = {k: v for k, v in row["usage"].items() if k != "seconds"}
    return out


def file_rows(path: Path) -> list[dict[str, Any]]:
    text = path.read_text()
    assert text == "" or text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def test_rows_follow_the_schema_and_agree_with_solve(tmp_path):
    out = tmp_path / "runs.jsonl"
    run = run_grid(Grid(PROBLEMS[:2], **GRID), out=out, engine=Engine(), scorer=scorer(),
                   model="scripted", quiet=True)
    # best_of_n and beam: 2 budgets x 2 seeds; greedy ignores budgets: 2 seeds, of which
    # seed 1 reuses seed 0's run (greedy is deterministic)
    assert len(run.rows) == 2 * (4 + 4 + 2)
    assert (run.resumed, run.ran, run.reused, run.errors) == (0, 2 * 9, 2, 0)
    by_key = sorted(file_rows(out), key=lambda r: r["key"])  # copies follow their source
    assert [strip(r) for r in by_key] == [strip(r) for r in sorted(run.rows,
                                                                   key=lambda r: r["key"])]
    assert len({r["key"] for r in run.rows}) == len(run.rows)
    by_problem = {p.id: p for p in PROBLEMS}
    for row in run.rows:
        copy = {"reused_from_seed"} if row["algo"] == "greedy" and row["seed"] == 1 else set()
        assert set(row) == FIELDS | copy and row["schema"] == SCHEMA
        assert set(row["usage"]) == set(Usage().as_dict())
        problem = by_problem[row["problem_id"]]
        assert (row["gold"], row["difficulty"], row["status"]) == (problem.answer, 2, "ok")
        width = row["budget"]["width"]
        assert row["budget"]["tokens"] is None
        if row["algo"] == "greedy":
            assert width is None and row["knobs"] == {}
        else:
            assert row["knobs"]["n"] == width in (2, 4)
        if row["algo"] == "beam":
            assert row["knobs"]["m"] == width  # the largest divisor of n that is <= 4
        # independent references: the answer is a bare integer; solve() on a fresh engine
        assert row["correct"] == (row["answer"] == problem.answer)
        for c in row["candidates"]:
            assert c["correct"] == (c["finished"] and c["answer"] == problem.answer)
            assert c["verified"] == c["finished"]  # no equation for the step checker to reject
        direct = search.solve(problem, row["algo"], engine=Engine(),
                              scorer=scorer_for(row["algo"], row["knobs"]), seed=row["seed"],
                              **row["knobs"])
        assert row["answer"] == direct.answer and row["selected_by"] == direct.selected_by
        # the row names the scorer only where it chose: best_of_n and beam rank by it
        assert row["scorer"] == (None if row["algo"] == "greedy" else "ScriptedScorer")
        assert row["selected_by"] == {"greedy": "greedy (the one path)",
                                      "best_of_n": "score(ScriptedScorer, last)",
                                      "beam": "score(ScriptedScorer, last)"}[row["algo"]]
        assert [c["answer"] for c in row["candidates"]] == [c.answer for c in direct.candidates]
        assert row["usage"]["generated_tokens"] == direct.usage.generated_tokens > 0
    assert any(r["correct"] for r in run.rows) and not all(r["correct"] for r in run.rows)


def test_grading_right_wrong_and_code_false_positives():
    grader = Grader()
    p = PROBLEMS[0]
    assert grader.text(p, str(p.answer)).correct
    assert not grader.text(p, str(int(str(p.answer)) + 1)).correct
    assert not grader.text(p, None).correct
    unfinished = Candidate(text="x", answer=str(p.answer), score=0.0, finished=False, node_id=0)
    assert not grader.candidate(p, unfinished).correct  # an unfinished path is no answer
    bad = grader.text(Problem(prompt="q", id="nogold"), "3")  # math without a gold answer
    assert not bad.correct and bad.error is not None and bad.error.startswith("ValueError")
    task = codegen.generate(1, seed=3, difficulty=2)[0]
    right = grader.text(task, task.metadata["solution"])
    decoy = grader.text(task, task.metadata["decoy"])  # passes the public tests only
    assert (right.correct, right.verified) == (True, True)
    assert (decoy.correct, decoy.verified) == (False, True)
    broken = grader.text(task, "def f(:\n")
    assert (broken.correct, broken.verified) == (False, False)


def _largest(limit: int, ok: Any) -> int:
    """The largest of limit, limit - 1, ..., 1 that ok accepts."""
    return next(v for v in range(int(limit), 0, -1) if ok(v))


@pytest.mark.parametrize("algo", names())
def test_a_budget_number_sets_what_the_algorithm_declares(algo):
    """What budget N (the eval grid's width) sets, read back against the algorithm's own
    declaration (@rules' scale) by brute force: the scale's knobs multiply to N, each after
    the first the largest divisor of what is left up to its default; each companion the
    largest value up to its default that the rules among the knobs set so far allow; and
    the algorithm's own knob checks accept the whole. No scale, or a token scale: nothing."""
    said, defaults = registry.declared(algo), knob_defaults(get(algo))
    scale = said.scale
    for n in range(1, 130):
        if not isinstance(scale, Width):
            assert registry.at_width(algo, n, {}) == {}
            continue
        if n < scale.floor ** len(scale.knobs):
            with pytest.raises(ValueError, match=f"{algo}: needs a budget .* at least "
                                                 f"{scale.floor ** len(scale.knobs)}"):
                registry.at_width(algo, n, {})
            continue
        got = registry.at_width(algo, n, {})
        assert set(got) == {*scale.knobs, *scale.companions} and scale.of(got) == n, (algo, n)
        left = n
        for knob in scale.knobs[1:]:
            assert got[knob] == _largest(defaults[knob], lambda v, left=left: left % v == 0)
            left //= got[knob]
        settled = {k: got[k] for k in scale.knobs}
        for knob in scale.companions:
            def allowed(v: int, values: dict[str, Any] = settled, knob: str = knob) -> bool:
                values = {**values, knob: v}
                return all(rule.fails(values) is None for rule in said.rules
                           if set(rule.names) <= set(values))
            assert got[knob] == _largest(defaults[knob], allowed), (algo, n, knob)
            settled = {**settled, knob: got[knob]}
        registry.check_knobs(algo, got)


def test_budget_numbers_worked_by_hand():
    """A few budgets worked out by hand from the algorithms' papers' settings."""
    assert registry.declared("greedy").scale is None
    assert registry.declared("compute_optimal").scale == "tokens"
    assert registry.at_width("best_of_n", 7, {}) == {"n": 7}
    assert registry.at_width("beam", 16, {}) == {"n": 16, "m": 4}
    assert registry.at_width("beam", 6, {}) == {"n": 6, "m": 3}
    assert registry.at_width("dvts", 5, {}) == {"n": 5, "m": 1}
    assert registry.at_width("diverse_beam", 24, {}) == {"n": 24, "m": 4, "groups": 3}
    assert registry.at_width("astar", 16, {}) == {"width": 4, "k": 4}
    assert registry.at_width("astar", 6, {}) == {"width": 2, "k": 3}
    assert registry.at_width("mcts", 9, {}) == {"iterations": 9}
    assert registry.at_width("pgtd", 9, {}) == {"rollouts": 9}
    with pytest.raises(ValueError, match="particle_gibbs: needs a budget .* at least 2"):
        registry.at_width("particle_gibbs", 1, {})
    # a companion the caller sets wins, and a budget that its rule refuses is refused
    assert registry.at_width("beam", 8, {"m": 2}) == {"n": 8}
    assert registry.at_width("astar", 8, {"k": 2}) == {"k": 2, "width": 4}
    with pytest.raises(ValueError, match=r"astar: k=3 must divide the budget 8 \(width \* k"):
        registry.at_width("astar", 8, {"k": 3})
    assert registry.at_width("diverse_beam", 16, {"m": 2}) == {"n": 16, "groups": 4}
    # a later companion the caller sets does not steer an earlier one: m = 4 as the table
    # has it, and the knob check then refuses groups = 2 for n / m = 1
    assert registry.at_width("diverse_beam", 4, {"groups": 2}) == {"n": 4, "m": 4}


def test_every_algorithms_width_knobs_run():
    engine = Engine()
    for algo in names():
        scale = registry.declared(algo).scale
        for n in (1, 2, 6, 16):
            if not isinstance(scale, Width) or n < scale.floor:
                continue
            knobs = registry.at_width(algo, n, {})
            assert all(inspect.signature(get(algo)).parameters[k].kind
                       is inspect.Parameter.KEYWORD_ONLY for k in knobs)
            # the algorithm's own checks accept the combination
            res = search.solve(PROBLEMS[0], algo, Budget(tokens=60), engine=engine,
                               scorer=scorer_for(algo, knobs), **knobs)
            assert res.usage.generated_tokens > 0


def test_bad_input_fails_before_any_model_loads(tmp_path, capsys):
    out = tmp_path / "never.jsonl"
    kw: dict[str, Any] = dict(out=out, engine="no-such-model", quiet=True)
    with pytest.raises(ValueError, match="did you mean 'beam'"):
        run_grid(Grid(PROBLEMS, ["beem"], [4]), **kw)
    with pytest.raises(TypeError, match="did you mean 'temperature'"):
        run_grid(Grid(PROBLEMS, ["best_of_n"], [4],
                      knobs={"best_of_n": {"temprature": 0.5}}), **kw)
    with pytest.raises(ValueError, match="set by the budgets"):
        run_grid(Grid(PROBLEMS, ["best_of_n"], [4], knobs={"best_of_n": {"n": 3}}), **kw)
    with pytest.raises(ValueError, match=r"m must divide n \(got m=3, n=4\)"):
        run_grid(Grid(PROBLEMS, ["beam"], [4], knobs={"beam": {"m": 3}}), **kw)
    with pytest.raises(ValueError, match="unknown scorer"):
        run_grid(Grid(PROBLEMS, ["beam"], [4]), scorer="nope", **kw)
    with pytest.raises(ValueError, match="budgets must be integers >= 1"):
        run_grid(Grid(PROBLEMS, ["beam"], [0]), **kw)
    assert not out.exists()
    assert main(["--dataset", "arith", "--algos", "best_of_n,beem", "--out", str(out)]) == 2
    assert "did you mean 'beam'" in capsys.readouterr().err and not out.exists()
    with pytest.raises(ValueError, match="did you mean"):
        load_problems("gsm8", path=tmp_path)


def test_knob_parsing_and_token_budgets():
    knobs = parse_knobs(["beam.m=2", "temperature=0.5", "best_of_n.select=score",
                         'stop=["\\n"]'], ["beam", "best_of_n", "greedy"])
    assert knobs == {"beam": {"m": 2, "temperature": 0.5, "stop": ["\n"]},
                     "best_of_n": {"temperature": 0.5, "select": "score", "stop": ["\n"]},
                     "greedy": {"stop": ["\n"]}}  # greedy has no temperature knob
    with pytest.raises(ValueError, match="not among"):
        parse_knobs(["astar.k=2"], ["beam"])
    cells = make_grid(PROBLEMS[:1], ["compute_optimal", "greedy"], [4, 16], tokens=3000,
                      sample_tokens=500)
    assert [(c.algo, c.width, c.tokens) for c in cells] == [
        ("compute_optimal", None, 2000), ("compute_optimal", None, 3000), ("greedy", None, 3000)]


def test_error_cells_are_recorded_and_the_grid_goes_on(tmp_path):
    out = tmp_path / "runs.jsonl"
    bad = PROBLEMS[1].id
    run = run_grid(Grid(PROBLEMS[:2], **GRID), out=out, engine=Engine(fail=(bad,)),
                   scorer=scorer(), model="scripted", quiet=True)
    errors = [r for r in run.rows if r["status"] == "error"]
    assert run.errors == len(errors) == 10 and {r["problem_id"] for r in errors} == {bad}
    for r in errors:
        assert r["error"] == "RuntimeError: boom" and r["correct"] is False
        assert r["candidates"] == [] and r["usage"]["generated_tokens"] == 0
    assert all(r["status"] == "ok" for r in run.rows if r["problem_id"] != bad)
    again = run_grid(Grid(PROBLEMS[:2], **GRID), out=out, engine=Engine(), scorer=scorer(),
                     model="scripted", quiet=True)
    assert (again.resumed, again.ran) == (20, 0)  # error rows count as done


def test_truncated_last_line_is_cut_and_only_missing_runs_rerun(tmp_path):
    out = tmp_path / "runs.jsonl"
    first = run_grid(Grid(PROBLEMS[:2], **GRID), out=out, engine=Engine(), scorer=scorer(),
                     model="scripted", quiet=True)
    lines = out.read_bytes().splitlines(keepends=True)
    out.write_bytes(b"".join(lines[:-1]) + lines[-1][:40])  # killed in the middle of a write
    assert len(read_rows(out)) == len(lines) - 1
    engine = Engine()
    second = run_grid(Grid(PROBLEMS[:2], **GRID), out=out, engine=engine, scorer=scorer(),
                      model="scripted", quiet=True)
    # the cut row was a copy of greedy's run (copies are written after the runs): made again
    # from its source, nothing run
    assert (second.resumed, second.ran, second.reused) == (len(lines) - 1, 0, 1)
    now = file_rows(out)
    assert [strip(r) for r in now] == [strip(json.loads(line)) for line in lines]
    assert {r["key"] for r in now} == {r["key"] for r in first.rows}
    third = run_grid(Grid(PROBLEMS[:2], **GRID), out=out,
                     engine=Engine(fail=(PROBLEMS[0].id,)), scorer=scorer(), model="scripted",
                     quiet=True)
    assert third.ran == 0 and len(file_rows(out)) == len(lines)  # nothing ran, no duplicate
    out.write_bytes(b"".join(lines[:3]) + b"{oops\n" + b"".join(lines[3:]))
    with pytest.raises(ValueError, match=":4: not a JSON row"):
        run_grid(Grid(PROBLEMS[:2], **GRID), out=out, engine=Engine(), scorer=scorer(),
                 model="scripted", quiet=True)


# -- kill and resume ---------------------------------------------------------------------------
KILL_GRID: dict[str, Any] = dict(GRID, algos=["best_of_n", "beam"], seeds=[0, 1, 2])


def child_main(out: str, delay: float) -> None:
    """What the child process runs (imported from this file)."""
    run_grid(Grid(PROBLEMS, **KILL_GRID), out=out, engine=Engine(delay=delay),
             scorer=scorer(), model="scripted", quiet=True)


def start_child(out: Path, delay: float) -> subprocess.Popen:
    code = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[1] + '/tests']; "
            "import test_eval_runner as t; t.child_main(sys.argv[2], float(sys.argv[3]))")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-c", code, str(REPO), str(out), str(delay)],
                            cwd=REPO, env=env)


def wait_for_lines(path: Path, n: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists() and path.read_bytes().count(b"\n") >= n:
            return
        time.sleep(0.005)
    raise AssertionError(f"the child wrote fewer than {n} rows (exit {proc.poll()})")


@pytest.mark.slow
def test_child_killed_mid_run_resumes_to_the_uninterrupted_rows(tmp_path):
    reference = run_grid(Grid(PROBLEMS, **KILL_GRID), out=tmp_path / "ref.jsonl",
                         engine=Engine(), scorer=scorer(), model="scripted", quiet=True).rows
    cells = len(reference)  # 3 problems x 2 algorithms x 2 budgets x 3 seeds = 36
    out, rng = tmp_path / "runs.jsonl", random.Random(0)
    for target in (2, 12):  # kill twice, each time a random moment after `target` rows
        proc = start_child(out, delay=0.02)
        wait_for_lines(out, target, proc)
        time.sleep(rng.uniform(0.0, 0.05))
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=10) == -signal.SIGKILL
        assert len(read_rows(out)) < cells  # it really died mid-run
    proc = start_child(out, delay=0.0)
    assert proc.wait(timeout=60) == 0
    rows = file_rows(out)
    assert len(rows) == len({r["key"] for r in rows}) == cells
    assert [strip(r) for r in rows] == [strip(r) for r in reference]


def test_command_line_on_a_tiny_llama_matches_the_api(tmp_path, tiny_model):
    from search.engines.hf import HFEngine

    model, tok = tiny_model
    folder = tmp_path / "tiny"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    out = tmp_path / "cli.jsonl"
    argv = ["--dataset", "arith", "--difficulty", "2", "--limit", "2", "--model", str(folder),
            "--device", "cpu", "--algos", "greedy,best_of_n", "--budgets", "2", "--seeds", "3",
            "--knob", "step_tokens=4", "--knob", "max_depth=2", "--out", str(out), "--quiet"]
    assert main(argv) == 0
    rows = file_rows(out)
    assert [(r["problem_id"], r["algo"]) for r in rows] == [
        (p.id, a) for p in arith.generate(2, seed=0, difficulty=2) for a in ("greedy", "best_of_n")]
    for r in rows:
        # no scorer named: greedy has none to use and best_of_n votes, so neither names one
        assert set(r) == FIELDS and r["model"] == str(folder) and r["scorer"] is None
        assert r["selected_by"] == {"greedy": "greedy (the one path)", "best_of_n": "vote"}[
            r["algo"]]
        assert r["dataset"] == "arith" and r["seed"] == 3 and r["error"] is None
        assert 0 < r["usage"]["generated_tokens"] <= 2 * 4 * (2 if r["algo"] == "best_of_n" else 1)
    assert main(argv) == 0 and len(file_rows(out)) == len(rows)  # all done: nothing added
    api = run_grid(Grid(arith.generate(2, seed=0, difficulty=2), ["greedy", "best_of_n"], [2],
                        [3], knobs={"greedy": {"step_tokens": 4, "max_depth": 2},
                                    # the command line's one rule: vote, no scorer named
                                    "best_of_n": {"step_tokens": 4, "max_depth": 2,
                                                  "select": "vote"}}, dataset="arith"),
                   out=tmp_path / "api.jsonl", engine=HFEngine.load(str(folder), device="cpu"),
                   model=str(folder), quiet=True)
    assert [strip(r) for r in api.rows] == [strip(r) for r in rows]


def test_grid_default_scorer_follows_pgtd(tmp_path):
    """A grid has one scorer: logprob by default, unit_tests for a pgtd-only grid (as solve
    picks for pgtd), and a clear error, before any model loads, where the two would mix or a
    problem has no public tests."""
    from reports.eval.sweep import _default_scorer
    from search.types import Problem

    code = Problem("def f(x):\n", domain="code", tests=("assert f(1) == 1",),
                   hidden_tests=("assert f(2) == 2",), id="c")
    math = Problem("1+1?", answer="2", id="m")
    assert _default_scorer(["best_of_n", "beam"], [code, math]) == "logprob"
    assert _default_scorer(["pgtd"], [code]) == "unit_tests"
    with pytest.raises(ValueError, match="one scorer"):
        _default_scorer(["pgtd", "best_of_n"], [code])
    with pytest.raises(ValueError, match="not a code problem"):
        _default_scorer(["pgtd"], [code, math])


def test_unread_conclusions_are_counted_apart_from_wrong():
    """A chosen answer whose conclusion the grader cannot read (a cut-off text, a language it
    has no table for) is never correct, and the row and the summary say so apart."""
    from reports.eval.correctness import Grader
    from reports.eval.sweep import summarize

    problem = Problem(prompt="x", answer="12", domain="math")
    grader = Grader()
    cut = grader.text(problem, "12", solution="So 3 * 4 = 12, and then the number of")
    foreign = grader.text(problem, "12", solution="ამიტომ პასუხი არის 12")
    read = grader.text(problem, "12", solution="3 * 4 = 12. The answer is 12.")
    assert (cut.correct, foreign.correct, read.correct) == (False, False, True)
    assert cut.unread and foreign.unread and read.unread is None
    assert Grader(guess=True).text(problem, "12", solution="So 3 * 4 = 12, and then the").correct
    usage = {"generated_tokens": 10, "scorer_calls": 0, "seconds": 0.0}
    rows = [{"algo": "greedy", "budget": {"width": None, "tokens": None}, "status": "ok",
             "usage": usage, "correct": g.correct, "unread": g.unread}
            for g in (cut, foreign, read)]
    (summary,) = summarize(rows)
    assert (summary["runs"], summary["accuracy"], summary["unread"]) == (3, 1 / 3, 2)
