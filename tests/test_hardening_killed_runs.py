"""Killed runs (issue 9, item 3): `python -m reports.eval` SIGKILLed at seeded random moments,
over many trials, then resumed.

The child is the real command line (runpy runs reports.eval as __main__) with the scripted
engine of tests/test_eval_runner.py registered under the model name "scripted", and a slow
disk: each row reaches the file in three write(2) calls with pauses between, so a kill can
land in the middle of a row and leave a torn last line, as a crash mid-write would.

After every kill: every complete line is a JSON row, the complete rows are exactly the first
rows of an uninterrupted run (nothing lost, nothing duplicated, grid order) and the bytes
committed before the kill are still there. The resumed run reports the torn line it cut,
and the finished file equals the uninterrupted run's rows, one per key.
"""

from __future__ import annotations

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
from test_eval_runner import PROBLEMS, Engine, strip

from reports.eval import sweep as runner

REPO = Path(__file__).resolve().parents[1]
# 3 arith problems (the ones the scripted engine knows) x 2 algorithms x 2 budgets x 3 seeds
ARGV = ["--dataset", "arith", "--difficulty", "2", "--limit", "3", "--data-seed", "5",
        "--model", "scripted", "--algos", "best_of_n,beam", "--budgets", "2,4",
        "--seeds", "0,1,2"]
CELLS = 36
CHILD = """
import os, runpy, sys, time
repo, out, delay, pause = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
sys.path[:0] = [repo, repo + "/tests"]
import search.api
from test_eval_runner import Engine

search.api._ENGINES["scripted"] = Engine(delay=delay)
write = os.write

def slow_write(fd, data):  # a slow disk under the runs file: a row arrives in three pieces
    if os.path.realpath(f"/proc/self/fd/{fd}") != os.path.realpath(out):
        return write(fd, data)
    cuts = [0, len(data) // 3, 2 * len(data) // 3, len(data)]
    for a, b in zip(cuts, cuts[1:]):
        write(fd, data[a:b])
        time.sleep(pause)
    return len(data)

os.write = slow_write
sys.argv = ["reports.eval", *sys.argv[5:]]
runpy.run_module("reports.eval", run_name="__main__")
"""


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> list[dict[str, Any]]:
    """The rows of an uninterrupted run of the same command, in process."""
    out = tmp_path_factory.mktemp("reference") / "runs.jsonl"
    import search.api

    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(search.api._ENGINES, "scripted", Engine())
        assert runner.main([*ARGV, "--out", str(out), "--quiet"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == len({r["key"] for r in rows}) == CELLS
    assert {r["problem_id"] for r in rows} == {p.id for p in PROBLEMS}
    return rows


def start(out: Path, *, delay: float, pause: float, extra: tuple[str, ...] | list[str] = ()
          ) -> subprocess.Popen:
    """The child; its stderr (progress bar, messages) goes to a file, as a full pipe nobody
    reads would stall it: read it with `stderr_of(out)` once it has exited."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with open(out.with_suffix(".err"), "wb") as err:
        return subprocess.Popen([sys.executable, "-c", CHILD, str(REPO), str(out), str(delay),
                                 str(pause), *ARGV, *extra, "--out", str(out)], cwd=REPO,
                                env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=err)


def stderr_of(out: Path) -> str:
    return out.with_suffix(".err").read_text(errors="replace")


def complete_rows(data: bytes) -> tuple[list[dict[str, Any]], bytes]:
    """(rows of the complete lines, the torn tail after the last newline)."""
    *lines, tail = data.split(b"\n")
    rows = [json.loads(line) for line in lines]  # raises on a corrupt complete line
    assert all(isinstance(r, dict) for r in rows)
    return rows, tail


def kill(proc: subprocess.Popen, out: Path, rng: random.Random, *, tear: bool) -> None:
    """SIGKILL the child at a seeded random moment: after 0-3 more rows and a random pause,
    or (tear) as soon as the file ends in a partly written row."""
    def lines() -> int:
        return out.read_bytes().count(b"\n") if out.exists() else 0

    def torn() -> bool:
        return out.exists() and not out.read_bytes().endswith(b"\n") and out.stat().st_size > 0

    start, more = lines(), rng.randint(0, 3)
    deadline = time.monotonic() + 30
    while proc.poll() is None and time.monotonic() < deadline:
        if (torn() if tear else lines() >= start + more):
            break
        time.sleep(0.001)
    if not tear:
        time.sleep(rng.uniform(0.0, 0.1))
    proc.send_signal(signal.SIGKILL)


def kill_and_resume(tmp_path: Path, reference: list[dict[str, Any]], trials: int, seed: int
                    ) -> int:
    """`trials` seeded random kills (the last one tearing a row), then a resume to the end;
    returns how many kills left a torn row."""
    rng = random.Random(seed)
    out = tmp_path / "runs.jsonl"
    committed, tail, torn_kills = b"", b"", 0
    for trial in range(trials):
        proc = start(out, delay=0.005, pause=0.02)
        kill(proc, out, rng, tear=trial == trials - 1 or rng.random() < 0.3)
        assert proc.wait(timeout=30) == -signal.SIGKILL, stderr_of(out)
        data = out.read_bytes() if out.exists() else b""
        assert data.startswith(committed)  # nothing written earlier was lost or rewritten
        rows, tail = complete_rows(data)
        assert [strip(r) for r in rows] == [strip(r) for r in reference[:len(rows)]]
        assert len(rows) < CELLS, "the child finished before the kill"
        torn_kills += bool(tail)
        committed = data[:len(data) - len(tail)]
    proc = start(out, delay=0.0, pause=0.0)
    assert proc.wait(timeout=120) == 0, stderr_of(out)
    if tail:  # the last kill tore a row: the resumed run says it cut it
        assert f"cut an incomplete last line ({len(tail)} bytes)" in stderr_of(out)
    final = out.read_bytes()
    assert final.startswith(committed) and final.endswith(b"\n")
    rows, tail = complete_rows(final)
    assert tail == b"" and len(rows) == len({r["key"] for r in rows}) == CELLS
    assert [strip(r) for r in rows] == [strip(r) for r in reference]
    return torn_kills


def test_a_few_random_kills_lose_and_duplicate_nothing(tmp_path, reference):
    assert kill_and_resume(tmp_path, reference, trials=3, seed=0) >= 1  # a row was torn


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(5))
def test_many_random_kills_lose_and_duplicate_nothing(tmp_path, reference, seed):
    assert kill_and_resume(tmp_path, reference, trials=6, seed=100 + seed) >= 1


@pytest.mark.parametrize("cut", [1, 2, 17, 100, -2, -1], ids=lambda c: f"cut{c}")  # bytes kept (<0: dropped)
def test_a_torn_last_line_is_cut_and_its_run_redone(tmp_path, reference, cut, monkeypatch,
                                                   capsys):
    """Every way a crash can tear the last row (a few bytes, most of it, all but its newline)
    is detected by both readers and repaired by the runner, which redoes just that run."""
    import search.api

    monkeypatch.setitem(search.api._ENGINES, "scripted", Engine())
    out = tmp_path / "runs.jsonl"
    lines = [(json.dumps(r, allow_nan=False) + "\n").encode() for r in reference[:5]]
    last = lines[-1]
    torn = last[:cut if cut > 0 else len(last) + cut]
    out.write_bytes(b"".join(lines[:-1]) + torn)
    assert len(runner.read_rows(out)) == 4  # the runner redoes a row without its newline
    from reports.analysis.rows import read_rows

    # the analyses skip a torn row, but may keep one whose bytes are whole (only "\n" lost)
    assert len(read_rows(out)) == (5 if cut == -1 else 4)
    assert runner.main([*ARGV, "--out", str(out)]) == 0
    assert f"cut an incomplete last line ({len(torn)} bytes)" in capsys.readouterr().err
    rows, tail = complete_rows(out.read_bytes())
    assert tail == b"" and [strip(r) for r in rows] == [strip(r) for r in reference]
    assert out.read_bytes().startswith(b"".join(lines[:-1]))


def test_killed_concurrent_runs_lose_and_duplicate_nothing(tmp_path, reference):
    """--concurrency 4: rows land in the order runs finish, so after each kill the complete
    rows are some of the grid's (each equal to the uninterrupted run's row of its key, none
    twice), and the resumed run ends with exactly one row per key."""
    by_key = {r["key"]: strip(r) for r in reference}
    rng = random.Random(7)
    out = tmp_path / "runs.jsonl"
    argv = ["--concurrency", "4"]
    committed = b""
    for trial in range(2):
        proc = start(out, delay=0.005, pause=0.02, extra=argv)
        kill(proc, out, rng, tear=trial == 1)
        assert proc.wait(timeout=30) == -signal.SIGKILL, stderr_of(out)
        data = out.read_bytes() if out.exists() else b""
        assert data.startswith(committed)
        rows, tail = complete_rows(data)
        assert len(rows) == len({r["key"] for r in rows}) < CELLS
        assert all(strip(r) == by_key[r["key"]] for r in rows)
        committed = data[:len(data) - len(tail)]
    proc = start(out, delay=0.0, pause=0.0, extra=argv)
    assert proc.wait(timeout=120) == 0, stderr_of(out)
    rows, tail = complete_rows(out.read_bytes())
    assert tail == b"" and len(rows) == len({r["key"] for r in rows}) == CELLS
    assert {r["key"]: strip(r) for r in rows} == by_key
