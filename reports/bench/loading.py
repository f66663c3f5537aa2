"""Loading from many threads at once: fresh processes, each with THREADS threads that all
call `search.solve(..., engine=MODEL)` on a model nobody has loaded yet.

Every run is a new Python process (nothing loaded, nothing cached in memory), whose threads
start together behind a barrier. A run counts as a crash when any thread raises, or when
the load prints transformers' weight report ("MISSING", "newly initialized") on stderr.
Every thread's answer must be the same (one model, greedy decoding), and each Result's
load_seconds is the time that thread waited for the one load. Printed: one line per run
and the total. Usage:

    python -m reports.bench.loading [--runs 20] [--threads 8] [--model tiny-arith]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
REPORT_WORDS = ("MISSING", "newly initialized", "Traceback")

# what one fresh process runs: THREADS threads, one barrier, one solve each
CHILD = """
import json, sys, threading
import search
model, threads = sys.argv[1], int(sys.argv[2])
gate = threading.Barrier(threads)
out = [None] * threads

def one(i):
    gate.wait()
    try:
        r = search.solve("What is 17 * 23 - 5?", "greedy", engine=model, progress=False)
        out[i] = {"answer": r.answer, "status": r.status, "load_seconds": r.load_seconds,
                  "seconds": r.usage.seconds}
    except Exception as err:
        out[i] = {"error": f"{type(err).__name__}: {err}"}

workers = [threading.Thread(target=one, args=(i,)) for i in range(threads)]
[w.start() for w in workers]
[w.join() for w in workers]
print(json.dumps(out))
"""


def one_run(model: str, threads: int) -> dict[str, Any]:
    """One fresh process: its threads' outcomes, and whether it crashed (and why)."""
    done = subprocess.run([sys.executable, "-c", CHILD, model, str(threads)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    outs = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else []
    errors = [o["error"] for o in outs if "error" in o]
    answers = {o.get("answer") for o in outs if "error" not in o}
    printed = [w for w in REPORT_WORDS if w in done.stderr]
    why = (f"exit {done.returncode}: {done.stderr.strip()[-300:]}" if done.returncode else
           errors[0] if errors else f"stderr shows {printed}" if printed else
           f"answers differ: {sorted(map(str, answers))}" if len(answers) > 1 else "")
    return {"crashed": bool(why), "why": why, "answers": sorted(map(str, answers)),
            "load_seconds": [round(float(o["load_seconds"]), 2) for o in outs
                             if "load_seconds" in o]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m reports.bench.loading", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--model", default="tiny-arith")
    args = ap.parse_args(argv)
    crashes = 0
    for i in range(args.runs):
        run = one_run(args.model, args.threads)
        crashes += bool(run["crashed"])
        print(f"run {i + 1:2d}: {'CRASH ' + str(run['why']) if run['crashed'] else 'ok'}; "
              f"answers {run['answers']}; load_seconds {run['load_seconds']}", flush=True)
    print(f"{crashes} crashes in {args.runs} fresh processes of {args.threads} threads "
          f"loading {args.model} at once")
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
