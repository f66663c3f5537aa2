"""`python -m search "What is 17 * 23 - 5?" --algo beam --tokens 4000`: solve one problem."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import math
import os
import sys

from search.cli import add_solve_arguments, solve_args, usage_line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m search", description=__doc__)
    ap.add_argument("problem", help="the question text")
    add_solve_arguments(ap)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    try:
        result = solve_args(args)
    except (ValueError, TypeError, FileNotFoundError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    usage = result.usage.as_dict()
    if args.json:
        print(json.dumps({"answer": result.answer, "status": result.status,
                          "score": _finite(result.score), "text": result.text, "usage": usage,
                          "seed": result.seed, "model": result.model, "scorer": result.scorer,
                          "selected_by": result.selected_by, "algo": result.algo,
                          "knobs": dict(result.knobs)}))
        return 0
    # a score only where a scorer's scores chose the answer (a vote or greedy has none)
    scored = bool(result.scorer) and math.isfinite(result.score)
    print(f"answer: {result.answer}   ({result.status}"
          + (f", score {result.score:.4g})" if scored else ")"))
    print(f"by: {result.algo} on model {result.model}, scorer "
          f"{result.scorer or '(none consulted)'}, seed {result.seed}; chosen by "
          f"{result.selected_by}")
    print(f"solution:\n{result.text.strip()}\n")
    print(usage_line(result.usage))
    return 0


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def exit_now(code: int) -> None:
    """Exit without the interpreter's teardown: freeing torch, its thread pools and every
    module's objects one by one takes ~1.2 s after a SmolLM2 solve, longer than loading the
    model. Output is flushed and atexit handlers (the sandbox pool's) run first."""
    atexit._run_exitfuncs()  # pyright: ignore[reportPrivateUsage]
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe or stream
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
