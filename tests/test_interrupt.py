"""Ctrl-C and SIGTERM stop a concurrent eval cleanly (issue 33): a real `python -m
reports.eval --concurrency 16` on tiny-arith, signalled once rows are being written, exits
130 within seconds with one line saying how to resume, no C++ abort, its rows file intact
(every row it wrote is whole and no run in flight left a row); the same command then
completes the grid, with rows identical to an uninterrupted run's (timings aside)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

GRID = ["--dataset", "arith", "--limit", "12", "--model", "tiny-arith", "--algos",
        "best_of_n,beam", "--budgets", "4", "--seeds", "0,1", "--concurrency", "16", "--quiet"]
RUNS = 12 * 2 * 2


def command(out: Path) -> list[str]:
    return [sys.executable, "-m", "reports.eval", *GRID, "--out", str(out)]


def env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def rows(path: Path) -> dict[str, dict]:
    """Rows by key, without what differs from run to run (time, seconds)."""
    out = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)  # every line whole
        row.pop("time")
        row["usage"].pop("seconds")
        assert row["key"] not in out, "a run written twice"
        out[row["key"]] = row
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, dict]:
    out = tmp_path_factory.mktemp("ref") / "rows.jsonl"
    subprocess.run(command(out), env=env(), check=True, timeout=900, capture_output=True)
    got = rows(out)
    assert len(got) == RUNS
    return got


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_a_concurrent_eval_and_resume_completes_it(tmp_path, reference, sig):
    out = tmp_path / "rows.jsonl"
    proc = subprocess.Popen(command(out), env=env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        if out.exists() and out.read_text().count("\n") >= 4:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the grid ended before it could be interrupted"
    sent = time.monotonic()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    took = time.monotonic() - sent
    assert proc.returncode == 130, err
    assert took <= 5.0, took
    assert "terminate called" not in err and "Aborted" not in err and "Traceback" not in err
    assert "Run the same command again to resume" in err
    assert len([line for line in err.splitlines() if "resume" in line]) == 1
    kept = rows(out)
    assert 0 < len(kept) < RUNS
    assert all(row["status"] != "error" for row in kept.values())  # none from the interrupt
    assert all(kept[k] == reference[k] for k in kept)
    subprocess.run(command(out), env=env(), check=True, timeout=900, capture_output=True)
    assert rows(out) == reference
