"""Stdin/stdout judging (run_io, stdin_case), an APPS-format set of our own (tests/data/
apps_mini.jsonl) judged exactly in every mode, accepted and wrong programs, and the unit-test
scorer reading such problems."""

from __future__ import annotations

from pathlib import Path

import pytest
import test_sandbox

from problems import apps
from verifiers.code import rlimits_gaps, run_io, run_tests, stdin_case

canary = test_sandbox.canary
host_untouched = test_sandbox.host_untouched
mode = test_sandbox.mode

DATA = Path(__file__).parent / "data" / "apps_mini.jsonl"
SUM = "n = int(input())\nprint(sum(map(int, input().split())))\n"
# (problem id, program, the verdict of each hidden case, in order)
JUDGED = [
    ("sum", SUM, [True, True, True, True]),
    ("sum", "import sys\nn, *xs = map(int, open(0).read().split())\nprint(sum(xs))\nsys.exit(0)\n",
     [True, True, True, True]),
    ("sum", "import sys\nd = sys.stdin.buffer.read().split()\n"
     "sys.stdout.buffer.write(b'%d\\n' % sum(map(int, d[1:])))\n", [True, True, True, True]),
    ("sum", "n = int(input())\nxs = list(map(int, input().split()))\nprint(sum(xs[:3]))\n",
     [True, True, False, True]),  # wrong past 3 numbers
    ("sum", "n = int(input())\nprint('sum', sum(map(int, input().split())))\n",
     [False, False, False, False]),  # an extra token
    ("sum", "n = int(input())\nxs = input().split()\nprint(int(xs[0]) + int(xs[1]))\n",
     [False, False, False, True]),  # raises IndexError on a one-number case
    ("sum", "import sys\nn = int(input())\nsys.exit(1)\n", [False, False, False, False]),
    ("sum", "print(6)\n", [True, False, False, False]),  # the public case's answer, hard-coded
    ("lines", "t = int(input())\nfor _ in range(t):\n    print(' '.join(input().split()[::-1]))\n",
     [True, True, True]),
    ("lines", "t = int(input())\nrows = [input() for _ in range(t)]\n"
     "for r in reversed(rows):\n    print(' '.join(r.split()[::-1]))\n", [False, True, False]),
    ("maxpair", "input()\nxs = sorted(map(int, input().split()))\n"
     "print(max(xs[0] * xs[1], xs[-1] * xs[-2]))\n", [True, True, True]),
    ("maxpair", "input()\nxs = sorted(map(int, input().split()))\nprint(xs[-1] * xs[-2])\n",
     [True, False, True]),  # misses two negatives
    ("call", "def add_one(x):\n    return x + 1\n", [True, True, True]),
    ("call", "def add_one(x):\n    return abs(x) + 1\n", [True, True, False]),
]


@pytest.fixture(scope="module")
def problems():
    return {p.id: p for p in apps.load(DATA)}


def test_loader_reads_apps_rows(problems):
    assert sorted(problems) == ["apps/call", "apps/lines", "apps/maxpair", "apps/sum"]
    total = problems["apps/sum"]
    assert total.metadata["judge"] == "stdin" and len(total.hidden_tests) == 4
    assert total.tests == total.hidden_tests[:1] and total.metadata["solutions"] == [SUM]
    assert problems["apps/call"].entry_point == "add_one"
    with pytest.raises(ValueError, match="class Solution"):
        apps.from_row({"question": "q", "starter_code": "class Solution:\n    def f(self):",
                       "input_output": {"fn_name": "f", "inputs": [[1]], "outputs": [1]}})


@pytest.mark.parametrize("pid,program,verdicts", JUDGED,
                         ids=[f"{j[0]}-{i}" for i, j in enumerate(JUDGED)])
def test_apps_set_is_judged_exactly(mode, problems, pid, program, verdicts):
    problem = problems[f"apps/{pid}"]
    report = run_tests(program, problem.hidden_tests, entry_point=problem.entry_point,
                       isolation=mode, unisolated=rlimits_gaps())
    assert [r.passed for r in report.results] == verdicts, [r.reason for r in report.results]
    assert report.passed_all == all(verdicts)


def test_per_case_time_limit_and_main_block(mode):
    """A case past its time limit ends the run; a program that reads stdin runs as
    __main__ (its `if __name__ == "__main__":` block runs)."""
    program = ("def main():\n    n = int(input())\n    while n == 0:\n        pass\n"
               "    print(n * 2)\n\nif __name__ == '__main__':\n    main()\n")
    report = run_io(program, [("2\n", "4"), ("0\n", "0"), ("3\n", "6")], time_limit=0.5,
                    isolation=mode, unisolated=rlimits_gaps())
    assert [r.passed for r in report.results] == [True, False, False]
    assert report.error == "timeout" and "case 1" in report.detail


def test_cases_do_not_see_verdicts(mode):
    """Every case is sent whatever the verdicts: a program that answers wrong once and then
    looks for a sign of it gets the same inputs either way, so it cannot pass more."""
    program = ("import sys\nseen = sys.modules.setdefault('seen', [])\nseen.append(input())\n"
               "print(len(seen))\n")
    report = run_io(program, [("a", "1"), ("b", "9"), ("c", "3")], isolation=mode,
                    unisolated=rlimits_gaps())
    assert [r.passed for r in report.results] == [True, False, True]


def test_mixing_stdin_cases_and_snippets_is_refused():
    with pytest.raises(ValueError, match="mix"):
        run_tests("x = 1", [stdin_case("", ""), "assert x == 1"])


def test_unit_test_scorer_rates_stdin_problems(problems):
    from rewards.unit_tests import UnitTestScorer
    from search.types import Node, Step

    problem = problems["apps/sum"]  # public case: "3\n1 2 3\n" -> 6
    root = Node(problem=problem, prompt_ids=(0,))
    nodes = [Node(parent=root, step=Step(f"```python\n{text}```", (1,), (0.0,), "eos"))
             for text in (SUM, "print(6)\n", "print(7)\n")]
    assert UnitTestScorer().score(problem, nodes) == [1.0, 1.0, 0.0]


def test_loader_reads_the_original_folders(tmp_path):
    folder = tmp_path / "0007"
    folder.mkdir()
    (folder / "question.txt").write_text("Print the input doubled.")
    (folder / "input_output.json").write_text('{"inputs": ["2\\n", "5\\n"], "outputs": ["4\\n", "10\\n"]}')
    (folder / "solutions.json").write_text('["print(2 * int(input()))"]')
    (folder / "metadata.json").write_text('{"difficulty": "introductory", "url": "u"}')
    (problem,) = apps.load(tmp_path)
    assert problem.id == "apps/0007" and problem.metadata["difficulty"] == "introductory"
    assert len(problem.tests) == 1 and len(problem.hidden_tests) == 2
    assert run_tests(problem.metadata["solutions"][0], problem.hidden_tests).passed_all
    with pytest.raises(ValueError, match="equally long"):
        apps.from_row({"question": "q", "input_output": {"inputs": ["1"], "outputs": []}})
