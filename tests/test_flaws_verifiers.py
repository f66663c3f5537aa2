"""Verifiers with false positives for reports.studies.flaws: the step checker's `verified` flag on
math candidates (verifiers.grade, reports.eval.correctness, the eval runner's rows), a score threshold
over the candidate scores rows hold, and the per-problem rates. Expected values are worked by hand
in the comments; the solutions are hand-written, the engine is scripted (no model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from problems import arith
from reports.eval.correctness import Grader
from reports.eval.grid import Grid
from reports.eval.sweep import run_grid
from reports.studies import flaws
from search.engines.fake import ScriptedEngine, ScriptedScorer
from search.types import Candidate
from verifiers.grade import grade, steps_verified
from verifiers.steps import check_step

# "Lily has 59 balloons. Rosa has 6 times as many balloons as Lily. ... Rosa ends up with 2
# times as many balloons as before. How many balloons does Rosa have now?" -> 708
PROBLEM = arith.generate(1, seed=5, difficulty=2)[0]
STEP1 = "Rosa has 59 * 6 = 354 balloons.\n\n"
RIGHT = STEP1 + "Rosa now has 354 * 2 = 708 balloons.\n\nThe answer is 708."
SLIP = STEP1 + "Rosa now has 354 * 2 = 718 balloons.\n\nThe answer is 718."  # wrong equation
SKIP = STEP1 + "The answer is 354."  # right arithmetic, a step skipped: a false positive


def test_step_checker_verifies_a_whole_solution_line_by_line():
    assert PROBLEM.answer == "708"
    assert steps_verified(RIGHT) and steps_verified(SKIP) and not steps_verified(SLIP)
    # in one piece the checker reads "7 7 * 2" as one side and finds no equation at all
    assert check_step("3 + 4 = 7\n\n7 * 2 = 15").status == "none"
    assert not steps_verified("3 + 4 = 7\n\n7 * 2 = 15")
    assert steps_verified("No arithmetic here.\n\nThe answer is 5.")  # nothing to reject


def test_math_grade_verifies_the_solution_and_flags_false_positives():
    right = grade(PROBLEM, "708", solution=RIGHT)
    slip = grade(PROBLEM, "718", solution=SLIP)
    skip = grade(PROBLEM, "354", solution=SKIP)
    assert (right.correct, right.verified, right.false_positive) == (True, True, False)
    assert (slip.correct, slip.verified, slip.false_positive) == (False, False, False)
    assert (skip.correct, skip.verified, skip.false_positive) == (False, True, True)
    assert grade(PROBLEM, "708").verified is None  # no solution text: nothing verified
    assert grade(PROBLEM, " ", solution=RIGHT).verified is False  # no answer reached


def test_grader_records_the_step_verdict_per_candidate():
    grader = Grader()
    def cand(text: str, answer: str | None, finished: bool = True) -> Candidate:
        return Candidate(text=text, answer=answer, score=0.5, finished=finished, node_id=0)

    got = [(g.correct, g.verified) for g in (
        grader.candidate(PROBLEM, cand(RIGHT, "708")),
        grader.candidate(PROBLEM, cand(SLIP, "718")),
        grader.candidate(PROBLEM, cand(SKIP, "354")),
        grader.candidate(PROBLEM, cand(STEP1, "708", finished=False)),  # never finished
        grader.candidate(PROBLEM, cand("The answer is", None)))]        # no answer
    assert got == [(True, True), (False, False), (False, True), (False, False), (False, False)]


class SolutionEngine(ScriptedEngine):
    """Step one, then the right step (p .5), a slip (.25) or the answer at once (.25)."""

    def __init__(self) -> None:
        def children(path: tuple[str, ...]) -> list[tuple[str, float]]:
            if not path:
                return [(STEP1, 1.0)]
            if len(path) == 1:
                return [(RIGHT[len(STEP1):], 0.5), (SLIP[len(STEP1):], 0.25),
                        (SKIP[len(STEP1):], 0.25)]
            return []

        super().__init__(children)
        self.name = "scripted"


def test_eval_rows_carry_the_step_verdict_and_flaws_reads_it(tmp_path, capsys):
    run = run_grid(Grid([PROBLEM], ["best_of_n"], [16], [0, 1], dataset="arith"),
                   out=tmp_path / "runs.jsonl", engine=SolutionEngine(),
                   scorer=ScriptedScorer(lambda path: 0.5), quiet=True)
    cands = [c for r in run.rows for c in r["candidates"]]
    assert len(cands) == 32
    # each answer stands for one text: 708 right and verified, 718 a caught slip, 354 a
    # verified wrong answer
    want = {"708": (True, True), "718": (False, False), "354": (False, True)}
    assert {c["answer"] for c in cands} == set(want)
    assert all((c["correct"], c["verified"]) == want[c["answer"]] for c in cands)
    flags = flaws.problem_flags(run.rows)
    r = flaws.Rates.of(PROBLEM.id, flags[PROBLEM.id])
    count = {a: sum(c["answer"] == a for c in cands) for a in want}
    assert (r.n, r.tp, r.fp) == (32, count["708"] / 32, count["354"] / 32)
    assert flaws.ceiling(r) == pytest.approx(count["708"] / (count["708"] + count["354"]))
    flaws.main([str(run.out), "--out", str(tmp_path / "fig"), "--k-max", "4", "--cost-fp", "1"])
    out = capsys.readouterr().out
    assert "verifier: recorded flags" in out and "1/1 with a false positive" in out


# -- threshold verifier and per-problem rates --------------------------------------------------
def row(pid: str, cands, *, scorer: str = "prm") -> dict:
    """A schema-1 row; cands: (answer, score, finished, correct, verified) tuples."""
    return {"schema": 1, "key": f"{pid}|{scorer}", "dataset": "synthetic", "problem_id": pid,
            "difficulty": None, "model": "m", "scorer": scorer, "algo": "best_of_n",
            "knobs": {"n": len(cands)}, "budget": {"width": len(cands), "tokens": None},
            "seed": 0, "answer": "1", "gold": "1", "correct": True, "status": "ok",
            "error": None, "usage": {"generated_tokens": 10, "prefill_tokens": 1,
                                     "forward_passes": 1, "scorer_calls": 1,
                                     "scorer_tokens": 0, "flops": 1.0, "seconds": 0.1},
            "candidates": [{"answer": a, "score": s, "finished": f, "correct": c,
                            "verified": v} for a, s, f, c, v in cands],
            "time": "2026-01-01T00:00:00+00:00"}


# problem a, threshold .6: verified = finished and score >= .6, whatever was recorded:
#   .9 right (recorded False) -> TP; .7 wrong -> FP; .4 right -> FN; no score, wrong -> rejected;
#   .95 but unfinished -> rejected. n 5, p 2/5, tp 1/5, fp 1/5, ceiling .2/.4 = .5
# problem b: three wrong at .8 -> FP, one right at .3 -> FN. n 4, p 1/4, tp 0, fp 3/4, ceiling 0
ROWS = [row("a", [("1", 0.9, True, True, False), ("2", 0.7, True, False, None),
                  ("1", 0.4, True, True, True), ("3", None, True, False, True),
                  ("1", 0.95, False, False, None)]),
        row("b", [("2", 0.8, True, False, None)] * 3 + [("1", 0.3, True, True, None)])]


def test_threshold_verifier_by_hand():
    flags = flaws.problem_flags(ROWS, threshold=0.6)
    assert flags == {"a": [(True, True), (False, True), (True, False), (False, False),
                           (False, False)],
                     "b": [(False, True)] * 3 + [(True, False)]}
    a, b = (flaws.Rates.of(pid, f) for pid, f in flags.items())
    assert (a.n, a.p, a.tp, a.fp) == (5, pytest.approx(0.4), pytest.approx(0.2),
                                      pytest.approx(0.2))
    assert (b.n, b.p, b.tp, b.fp) == (4, 0.25, 0.0, 0.75)
    assert (flaws.ceiling(a), flaws.ceiling(b)) == (pytest.approx(0.5), 0.0)
    # recorded flags instead: a keeps the 3 known (T,F), (T,T), (F,T); b has none
    assert flaws.problem_flags(ROWS) == {"a": [(True, False), (True, True), (False, True)]}
    # .95: only the unfinished candidate scores that high, so nothing verifies
    high = flaws.problem_flags(ROWS, threshold=0.95)
    assert all(not v for f in high.values() for _, v in f)
    unscored = [row("c", [("1", None, True, True, True)])]
    with pytest.raises(ValueError, match="no candidate scores"):
        flaws.problem_flags(unscored, threshold=0.5)


def test_per_problem_table_by_hand():
    rates = [flaws.Rates.of(pid, f) for pid, f in
             flaws.problem_flags(ROWS, threshold=0.6).items()]
    table = flaws.problem_table(rates)
    assert [t["problem_id"] for t in table] == ["a", "b"]
    a, b = table
    assert (a["n"], a["p"], a["tp"], a["fp"], a["fp_share"], a["ceiling"]) == (
        5, pytest.approx(0.4), pytest.approx(0.2), pytest.approx(0.2), pytest.approx(0.5),
        pytest.approx(0.5))
    assert (b["n"], b["p"], b["tp"], b["fp"], b["fp_share"], b["ceiling"]) == (
        4, 0.25, 0.0, 0.75, 1.0, 0.0)
    nothing = flaws.problem_table([flaws.Rates("z", 3, 0.0, 0.0, 0.0)])[0]
    assert (nothing["fp_share"], nothing["ceiling"]) == (None, 0.0)


def write(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_cli_threshold_writes_the_per_problem_table(tmp_path, capsys):
    path = write(tmp_path / "runs.jsonl", ROWS)
    flaws.main([str(path), "--out", str(tmp_path / "fig"), "--threshold", "0.6",
                "--k-max", "4", "--cost-fp", "1"])
    out = capsys.readouterr().out
    assert "verifier: score >= 0.6 (prm)" in out
    # mean fp (.2 + .75) / 2 = .475, mean ceiling (.5 + 0) / 2 = .25
    assert "mean fp 0.475, ceiling 0.250" in out
    assert "max 0.750; 2/2 with a false positive, 0 with nothing verified" in out
    listed = [line.split()[0] for line in out.splitlines() if line.startswith("  ")
              and line.split()[0] in ("a", "b")]
    assert listed == ["b", "a"]  # the worst first
    data = json.loads((tmp_path / "fig" / "flaws_c1.json").read_text())
    assert data["verifier"] == "score >= 0.6 (prm)"
    assert [(t["problem_id"], t["n"], t["fp"], t["ceiling"]) for t in data["per_problem"]] == [
        ("a", 5, pytest.approx(0.2), pytest.approx(0.5)), ("b", 4, 0.75, 0.0)]


def test_cli_errors_name_the_missing_verifier(tmp_path):
    path = write(tmp_path / "runs.jsonl", [row("c", [("1", None, True, True, None)])])
    with pytest.raises(SystemExit, match="no candidate scores"):
        flaws.main([str(path), "--out", str(tmp_path), "--threshold", "0.5"])
    with pytest.raises(SystemExit, match="no candidates with a `verified` flag"):
        flaws.main([str(path), "--out", str(tmp_path)])
