"""The caller's reading of how a run ended: the run-level error of a TestReport."""

from __future__ import annotations

import signal

from verifiers._sandbox import host


def run_error(run: host.Run) -> tuple[str | None, str]:
    """Classify a run the judge saw to its end (or that ended without it)."""
    kinds = {r.get("kind"): r for r in run.records}
    program = kinds.get("program")
    if program is not None and program["status"] != "ok":
        status = program["status"]
        error = {"syntax": "syntax_error", "memory": "memory"}.get(status, "program_error")
        return error, program["reason"]
    end = kinds.get("end")
    if end is not None and end.get("error") == "exited":
        if "ready" not in kinds:
            return "sandbox_error", f"sandbox failed to start (exit status {run.returncode})"
        if not run.exited:  # it closed its end of the pipe, but lived on
            return "exited", end["detail"]
        return exit_error(run.returncode, end["detail"])
    if end is not None and end.get("error"):
        return end["error"], end["detail"]
    memory = [r for r in run.records if r.get("kind") == "test" and r["status"] == "memory"]
    if memory:
        return "memory", memory[0]["reason"]
    if end is not None:
        return None, ""
    tail = run.output.decode(errors="replace").strip().splitlines()[-1:]
    return "sandbox_error", f"the judge stopped without a verdict {tail}".rstrip(" []")


def exit_error(returncode: int, detail: str) -> tuple[str, str]:
    """The program's process ended by itself: how, from its exit status."""
    if returncode == -signal.SIGXCPU:
        return "timeout", "CPU time limit exceeded"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:  # a real-time signal
            name = f"signal {-returncode}"
        return "crashed", f"killed by {name}"
    return "exited", f"{detail} (exit status {returncode})"
