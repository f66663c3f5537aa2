"""`python -m search "What is 17 * 23 - 5?" --algo beam --tokens 4000`: solve one problem."""

from __future__ import annotations

import argparse
import ast
import json
import sys
from typing import Any


def _knob(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"knob {text!r} must look like name=value")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value  # a bare string such as select=vote


def main(argv: list[str] | None = None) -> int:
    from search.api import default_model

    ap = argparse.ArgumentParser(prog="python -m search", description=__doc__)
    ap.add_argument("problem", help="the question text")
    ap.add_argument("--algo", default="best_of_n")
    ap.add_argument("--model", default=None, help=f"model name or path (default {default_model()})")
    ap.add_argument("--scorer", default=None, help="scorer name (default: logprob; unit_tests for pgtd)")
    ap.add_argument("--tokens", type=int, default=None, help="budget: generated tokens")
    ap.add_argument("--scorer-calls", type=int, default=None, help="budget: scorer calls")
    ap.add_argument("--seconds", type=float, default=None, help="budget: wall seconds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--knob", type=_knob, action="append", default=[],
                    help="algorithm knob, e.g. --knob n=8 --knob select=vote")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)

    import search

    try:
        budget = search.Budget(tokens=args.tokens, scorer_calls=args.scorer_calls,
                               seconds=args.seconds)
        result = search.solve(args.problem, algo=args.algo, budget=budget, engine=args.model,
                              scorer=args.scorer, seed=args.seed, **dict(args.knob))
    except (ValueError, TypeError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    usage = result.usage.as_dict()
    if args.json:
        print(json.dumps({"answer": result.answer, "status": result.status, "score": result.score,
                          "text": result.text, "usage": usage, "seed": result.seed}))
        return 0
    print(f"answer: {result.answer}   ({result.status}, score {result.score:.4g})")
    print(f"solution:\n{result.text.strip()}\n")
    print("usage: " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                for k, v in usage.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
