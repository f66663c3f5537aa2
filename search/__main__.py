"""Solve one problem and print the answer, how the search ended, and what it cost:

    python -m search "Ana has 16 books. Tom has 2 more books than Ana. How many books does
    Tom have now?" --model tiny-arith --algo beam --tokens 4000 --answer 18

Ctrl-C ends the search as a spent budget would: the answer so far is printed with status
"interrupted" and the exit status is 130 (a second Ctrl-C, or one while the model loads,
quits at once)."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import math
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType

from search.cli import add_solve_arguments, solve_args, usage_line
from search.progress import Progress
from search.types import Problem, Result

INTERRUPTED = 130  # the shell's status for a command ended by Ctrl-C
# Result.status in words that cannot be read as a verdict on the answer
STATUS_WORDS = {
    "ok": "finished (a finished path was chosen)",
    "budget_exhausted": "budget exhausted",
    "interrupted": "interrupted (Ctrl-C): the answer so far",
    "no_answer": "no answer (paths finished, none gave an answer that can be read)",
    "unfinished": "unfinished (no path finished; the depth or step limit ended it)",
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m search", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("problem", help="the question text")
    add_solve_arguments(ap)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    watch = Progress(enabled=not args.quiet, announce=True)
    stop = threading.Event()
    previous = signal.signal(signal.SIGINT, _on_ctrl_c(stop, watch))
    try:
        result = solve_args(args, progress=watch, interrupt=stop)
    except KeyboardInterrupt:
        print("\ninterrupted before the search began", file=sys.stderr)
        return INTERRUPTED
    except (ValueError, TypeError, FileNotFoundError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    finally:
        signal.signal(signal.SIGINT, previous)
    print(json.dumps(as_json(result)) if args.json else report(result, args.answer))
    return INTERRUPTED if result.status == "interrupted" else 0


def _on_ctrl_c(stop: threading.Event, watch: Progress
               ) -> Callable[[int, FrameType | None], None]:
    """The SIGINT handler: the first Ctrl-C of a running search sets `stop` (it ends at its
    next forward or scorer call with what it has); one before the search began, or a
    second, quits."""

    def handler(signum: int, frame: FrameType | None) -> None:
        del signum, frame
        if stop.is_set() or not watch.searching:
            raise KeyboardInterrupt
        stop.set()
        print("\nstopping: the answer so far follows (Ctrl-C again quits at once)",
              file=sys.stderr, flush=True)

    return handler


def as_json(result: Result) -> dict[str, object]:
    """The --json object."""
    return {"answer": result.answer, "status": result.status, "score": _finite(result.score),
            "text": result.text, "usage": result.usage.as_dict(),
            "load_seconds": result.load_seconds, "seed": result.seed, "model": result.model,
            "scorer": result.scorer, "selected_by": result.selected_by, "algo": result.algo,
            "knobs": dict(result.knobs), "stats": _plain(dict(result.stats))}


def report(result: Result, gold: str | None) -> str:
    """The printout: the answer; how the search ended (in words that say nothing of
    correctness) and, only when a gold answer was given, whether the answer matches it;
    what chose it; the solution; what it cost, the load apart; the code sandbox used."""
    stats = result.stats
    status = STATUS_WORDS.get(result.status, result.status)
    if stats.get("cut_by") is not None:
        status += f" (cut by {stats['cut_by']})"
    lines = [f"answer: {result.answer}", f"status: {status}"]
    if gold is not None:
        lines.append(f"matches the given answer {gold!r}: {_matches(result, gold)}")
    if result.scorer and math.isfinite(result.score):  # a score only where scores chose
        lines.append(f"score: {result.score:.4g} (by {result.scorer})")
    if stats.get("narrowed"):
        lines.append("narrowed to fit the budget: " + ", ".join(
            f"{k} {a} -> {b}" for k, (a, b) in stats["narrowed"].items()))
    lines += [f"by: {result.algo} on model {result.model}, scorer "
              f"{result.scorer or '(none consulted)'}, seed {result.seed}; chosen by "
              f"{result.selected_by}",
              f"solution:\n{result.text.strip() or partial_text(result)}\n",
              usage_line(result.usage),
              f"load: {result.load_seconds:.2f} s loading the model (not in usage.seconds)"]
    if stats.get("sandbox"):
        lines.append(f"sandbox: {sandbox_line(stats['sandbox'])}")
    return "\n".join(lines)


def partial_text(result: Result) -> str:
    """The best partial path of a search cut before any answer, said to be so ("" if none)."""
    node = result.stats.get("best_partial")
    text = next((c.text for c in result.candidates if c.node_id == node), "")
    return f"(none finished; the best partial path so far:)\n{text.strip()}" if text else ""


def sandbox_line(sandbox: object) -> str:
    """Result.stats["sandbox"] ({"isolation": ..., "gaps": [...]}) on one line."""
    if not isinstance(sandbox, dict):
        return str(sandbox)
    gaps = sandbox.get("gaps") or []
    return str(sandbox.get("isolation")) + (f"; not isolated: {', '.join(gaps)}" if gaps
                                            else "")


def _matches(result: Result, gold: str) -> str:
    """"yes"/"no": whether the answer reads the same as `gold` under the problem domain's
    answer reader (search.answers.vote_key: equal answers vote together)."""
    from search.answers import vote_key

    if result.answer is None:
        return "no (no answer)"
    problem = result.tree.problem if result.tree is not None else Problem(prompt="?")
    same = vote_key(problem, result.answer) == vote_key(problem, gold)
    return "yes" if same else "no"


def _plain(x: object) -> object:
    """stats as JSON can hold them (tuples as lists, other objects as text)."""
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x if isinstance(x, (str, int, float, bool)) or x is None else str(x)


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def exit_now(code: int) -> None:
    """Exit without the interpreter's teardown: freeing torch, its thread pools and every
    module's objects one by one can take longer than loading the model. Output is flushed and atexit handlers (the sandbox pool's) run first."""
    atexit._run_exitfuncs()  # pyright: ignore[reportPrivateUsage]
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe or stream
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
