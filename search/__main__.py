"""`python -m search "What is 17 * 23 - 5?" --algo beam --tokens 4000`: solve one problem."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any


def _knob(text: str) -> tuple[str, str]:
    """"n=8" -> ("n", "8"); the value is parsed by the knob's type (search.knobs.parse)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"knob {text!r} must look like name=value")
    return key.strip(), value


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
    print(f"answer: {result.answer}   ({result.status}, score {result.score:.4g})")
    print(f"by: {result.algo} on model {result.model}, scorer "
          f"{result.scorer or '(none consulted)'}, seed {result.seed}; chosen by "
          f"{result.selected_by}")
    print(f"solution:\n{result.text.strip()}\n")
    print("usage: " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                for k, v in usage.items()))
    return 0


def add_solve_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of one solve (algo, model, scorer, budget, seed, knobs, quiet), shared by
    this command and reports.viewer."""
    from search.api import default_model

    ap.add_argument("--algo", default="best_of_n")
    ap.add_argument("--model", default=None, help=f"model name or path (default {default_model()})")
    ap.add_argument("--scorer", default=None, help="scorer name (default: none named: best_of_n votes, pgtd uses the "
                    "public tests, other searches the free log-probability scorer)")
    ap.add_argument("--tokens", type=int, default=None, help="budget: generated tokens")
    ap.add_argument("--scorer-calls", type=int, default=None, help="budget: scorer calls")
    ap.add_argument("--seconds", type=float, default=None, help="budget: wall seconds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--knob", type=_knob, action="append", default=[],
                    help="algorithm knob, e.g. --knob n=8 --knob select=vote")
    ap.add_argument("--quiet", action="store_true", help="no progress line on the terminal")


def solve_args(args: argparse.Namespace) -> Any:
    """search.solve from parsed arguments (problem, algo, model, scorer, budget, seed, knob,
    quiet): every name, knob and text is checked before a model loads."""
    import search
    from search import registry

    knobs = registry.parse_knobs(args.algo, dict(args.knob))  # typed by each signature
    budget = search.Budget(tokens=args.tokens, scorer_calls=args.scorer_calls,
                           seconds=args.seconds)
    return search.solve(args.problem, algo=args.algo, budget=budget, engine=args.model,
                        scorer=args.scorer, seed=args.seed, progress=not args.quiet, **knobs)


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


if __name__ == "__main__":
    raise SystemExit(main())
