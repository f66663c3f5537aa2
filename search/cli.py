"""The command line: a module's parser (`command`; `parse` reads the arguments with it, the
way every reports/ and problems/ command built from a {flag: keywords} table starts), its
printed tables (`printout`: a formatter written as a generator of lines), and the options of
one solve, shared by `python -m search` and `python -m reports.figures.viewer`: parsed, checked, and
handed to search.solve."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ParamSpec

from search.types import Result, Usage

P = ParamSpec("P")


def command(prog: str, doc: str | None, options: Mapping[str, Mapping[str, Any]] | None = None
            ) -> argparse.ArgumentParser:
    """The parser of `prog` ("python -m reports.demo"): its module doc as the description,
    line breaks kept, and `options`, {name or flag: add_argument's keywords}, in order."""
    ap = argparse.ArgumentParser(prog=prog, description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag, kwargs in (options or {}).items():
        ap.add_argument(flag, **kwargs)
    return ap


def parse(prog: str, doc: str | None, options: Mapping[str, Mapping[str, Any]] | None,
          argv: Sequence[str] | None, check: Callable[[argparse.Namespace], str | None]
          | None = None) -> argparse.Namespace:
    """A module's command line parsed: `command(prog, doc, options)` reads `argv` (None: the
    process's). `check(args)` names what is wrong with arguments that parse but do not go
    together (a message, or None); argparse reports it as its own errors (usage, the message,
    exit status 2)."""
    ap = command(prog, doc, options)
    args = ap.parse_args(argv)
    wrong = check(args) if check is not None else None
    if wrong:
        ap.error(wrong)
    return args


def printout(lines: Callable[P, Iterable[str]]) -> Callable[P, str]:
    """A printed table from its formatter written as a generator of its lines (title, header,
    rows, footer: each `yield`ed as it is made), returned as one string joined by newlines."""

    @functools.wraps(lines)
    def joined(*args: P.args, **kwargs: P.kwargs) -> str:
        return "\n".join(lines(*args, **kwargs))

    return joined


def _knob(text: str) -> tuple[str, str]:
    """"n=8" -> ("n", "8"); the value is parsed by the knob's type (search.knobs.parse)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"knob {text!r} must look like name=value")
    return key.strip(), value


def add_solve_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of one solve (algo, model, scorer, gold answer, budget, seed, knobs,
    quiet)."""
    from search.api import default_model

    ap.add_argument("--algo", default="best_of_n")
    ap.add_argument("--model", default=None, help=f"model name or path (default {default_model()})")
    ap.add_argument("--scorer", default=None, help="scorer name (default: none named: best_of_n votes, pgtd uses the "
                    "public tests, other searches the free log-probability scorer)")
    ap.add_argument("--answer", default=None, help="the gold answer (what --scorer oracle "
                    "compares with)")
    ap.add_argument("--tokens", type=int, default=None, help="budget: generated tokens")
    ap.add_argument("--scorer-calls", type=int, default=None, help="budget: scorer calls")
    ap.add_argument("--flops", type=float, default=None, help="budget: model FLOPs")
    ap.add_argument("--seconds", type=float, default=None, help="budget: wall seconds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--knob", type=_knob, action="append", default=[],
                    help="algorithm knob, e.g. --knob n=8 --knob select=vote")
    ap.add_argument("--quiet", action="store_true", help="no progress line on the terminal")
    add_threads_argument(ap)


def add_threads_argument(ap: argparse.ArgumentParser) -> None:
    """--threads: torch's CPU threads (search.runtime.omp.use_threads)."""
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: "
                    "torch's, one per core; idle threads sleep, so a busy machine costs little; "
                    "off the lean forward, a different count changes results in the last bits)")


def solve_args(args: argparse.Namespace, *, progress: Any = None,
               interrupt: threading.Event | None = None) -> Result:
    """search.solve from parsed arguments (problem, algo, model, scorer, answer, budget,
    seed, knob, quiet): every name, knob and text is checked before a model loads.
    progress: a search.progress.Progress (default: one on stderr unless --quiet);
    interrupt: search.solve's."""
    import search
    from search import registry

    knobs = registry.parse_knobs(args.algo, dict(args.knob))  # typed by each signature
    if args.threads is not None:
        from search.runtime.omp import use_threads

        use_threads(args.threads)
    budget = search.Budget(tokens=args.tokens, scorer_calls=args.scorer_calls,
                           flops=args.flops, seconds=args.seconds)
    problem = search.Problem.of(args.problem)  # a question's text, or a dataset's Problem
    if args.answer is not None:
        problem = dataclasses.replace(problem, answer=args.answer)
    return search.solve(problem, algo=args.algo, budget=budget, engine=args.model,
                        scorer=args.scorer, seed=args.seed,
                        progress=not args.quiet if progress is None else progress,
                        interrupt=interrupt, **knobs)


def usage_line(usage: Usage) -> str:
    """What a solve cost, on one line: "usage: generated_tokens=120, ..."."""
    return "usage: " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                 for k, v in usage.as_dict().items())
