"""The command line on a user's first day: a line on the terminal as soon as the model starts
loading; Ctrl-C on a running search prints the answer so far with status "interrupted" and
exits 130 without a traceback (and one while the model loads quits at once, also 130); the
status reads as how the search ended, never as a verdict; the code sandbox is named."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import search
from search.types import Problem

ROOT = Path(__file__).resolve().parent.parent
# best-of-512 rambling at temperature 3: ~1 min on a 2-core machine (at temperature 1 it
# ended within a second on a fast one, before the test's Ctrl-C)
LONG = ["What is 2 + 3?", "--model", "tiny-arith", "--algo", "best_of_n", "--knob", "n=512",
        "--knob", "temperature=3.0"]


def start(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "search", *args], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


def read_until(stream, end: str) -> str:
    """stderr read char by char up to and including `end` (or its end)."""
    seen = ""
    while not seen.endswith(end):
        ch = stream.read(1)
        if not ch:
            break
        seen += ch
    return seen


def test_ctrl_c_on_a_running_search_prints_the_answer_so_far_and_exits_130():
    proc = start(LONG)
    first = read_until(proc.stderr, "...")
    assert first == "loading tiny-arith ..."  # the first thing said, before the load
    said = [read_until(proc.stderr, "\n")]
    while said[-1] == "\n" and len(said) < 3:  # a blank line is not the load's line
        said.append(read_until(proc.stderr, "\n"))
    assert "not part of the search" in said[-1], said
    time.sleep(1.0)  # the search is under way (LONG takes far longer)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "stopping: the answer so far follows" in err
    lines = out.splitlines()
    assert lines[1].startswith("status: interrupted") and "cut by interrupted" in lines[1]
    assert any(x.startswith("usage: generated_tokens=") for x in lines)


def test_ctrl_c_while_the_model_loads_quits_at_once_with_130():
    proc = start(LONG)
    assert read_until(proc.stderr, "...") == "loading tiny-arith ..."
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130
    assert "Traceback" not in err and "interrupted before the search began" in err
    assert out == ""


def test_the_status_is_said_in_words_and_correctness_only_against_a_given_answer(capsys):
    from search.__main__ import main

    args = ["What is 2 + 3?", "--model", "tiny-arith", "--algo", "greedy", "--quiet"]
    assert main(args) == 0
    plain = capsys.readouterr().out.splitlines()
    answer = plain[0].removeprefix("answer: ")
    assert plain[1] == "status: finished (a finished path was chosen)"
    assert not any("matches" in x or "correct" in x for x in plain)  # no gold, no verdict
    assert any(x.startswith("load: ") and "not in usage.seconds" in x for x in plain)
    assert main([*args, "--answer", answer]) == 0
    assert f"matches the given answer {answer!r}: yes" in capsys.readouterr().out
    assert main([*args, "--answer", answer + "1"]) == 0
    assert f"matches the given answer {answer + '1'!r}: no" in capsys.readouterr().out


@pytest.fixture(scope="module")
def code_problem() -> Problem:
    from problems import codegen

    return codegen.generate(1, seed=5)[0]


def test_a_code_result_names_its_sandbox(code_problem):
    from verifiers.code import run_tests

    reference = run_tests("x = 1", ["assert x == 1"]).isolation  # the layers in force here
    result = search.solve(code_problem, "best_of_n", engine="tiny-code", scorer="unit_tests",
                          progress=False, n=2)
    assert result.stats["sandbox"] == {"isolation": reference, "gaps": []}
    math_result = search.solve("What is 2 + 3?", "greedy", engine="tiny-arith",
                               progress=False)
    assert "sandbox" not in math_result.stats  # no program ran


def test_the_rlimits_mode_lists_its_gaps():
    """The layers a real run of each mode reports: namespaces leave no gaps to name; the
    rlimits mode's are rlimits_gaps()."""
    from rewards.unit_tests import sandbox
    from verifiers.code import rlimits_gaps, run_tests

    gaps = sorted(rlimits_gaps())
    bare = run_tests("x = 1", ["assert x == 1"], isolation="rlimits", unisolated=gaps)
    assert sandbox(bare.isolation) == {"isolation": bare.isolation, "gaps": gaps}
    assert sandbox("bwrap,pidns,seccomp,rlimits")["gaps"] == []
    assert sandbox("unshare,seccomp,rlimits")["gaps"] == []
