"""The eval grid: problems x algorithms x budgets x seeds, and the stable key of each run.

A budget value N is an algorithm's *width*, set as the algorithm declares on its own function
(search.traits.Traits.scale, read by search.registry.at_width): a width's knobs multiply to N
and their companions take the largest value up to their defaults that the algorithm's rules
allow (unless --knob sets them). With the built-ins:

    best_of_n, rpc, first_finish, particle_filter, particle_gibbs   n = N   (particle_gibbs:
                                                                            N >= 2)
    beam, dvts          n = N, m = div4(N)       (n/m beams, each expanded m ways: N samples
                                                  per depth; m must divide n)
    diverse_beam        n = N, m = div4(N), groups = div4(N / m)
    astar               k = div4(N), width = N / k   (each batch samples width * k = N steps)
    mcts                iterations = N
    pgtd                rollouts = N
    compute_optimal     no width: a token budget of N * sample_tokens (N samples' worth)
    greedy              no width: the budget is ignored; deterministic, so it runs once and
                        its row is reused for every other seed (marked reused_from_seed)

div4(N) is the largest divisor of N that is at most 4 (4 for 4, 16, 64; 3 for 6; 1 for 1):
the companions' default of 4 (search-and-learn's beam width) where N allows it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from search import registry
from search.fit import Width
from search.knobs import RENAMED
from search.knobs import parse as knobs_parse
from search.traits import TOKENS
from search.types import Budget, Problem

SAMPLE_TOKENS = 512  # default tokens per sample of an algorithm scaled by tokens


@dataclass(frozen=True)
class Cell:
    """One run of the grid. knobs: exactly what goes to search.solve (overrides + width).
    reuse_from: the seed whose run this cell copies (an algorithm declared deterministic:
    the seed cannot change its result, so it runs once per grid point). keep_text: the row
    keeps the candidates' texts (neither is part of the run's key)."""

    problem: Problem
    algo: str
    knobs: Mapping[str, Any] = field(default_factory=dict)
    width: int | None = None
    tokens: int | None = None
    seed: int = 0
    reuse_from: int | None = None
    keep_text: bool = False

    @property
    def source(self) -> Cell:
        """The cell whose row this one copies (itself when it runs)."""
        if self.reuse_from is None:
            return self
        return replace(self, seed=self.reuse_from, reuse_from=None)

    @property
    def budget(self) -> Budget | None:
        return Budget(tokens=self.tokens) if self.tokens is not None else None

    def key(self, *, dataset: str, model: str, scorer: str) -> str:
        return run_key(dataset, self.problem.id, model, scorer, self.algo, self.knobs,
                       {"width": self.width, "tokens": self.tokens}, self.seed)


def run_key(dataset: str, problem_id: str, model: str, scorer: str, algo: str,
            knobs: Mapping[str, Any], budget: Mapping[str, Any], seed: int) -> str:
    """A stable hex digest of everything that defines a run (not of its outcome)."""
    text = json.dumps([dataset, problem_id, model, scorer, algo, dict(knobs), dict(budget), seed],
                      sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def parse_knobs(specs: Iterable[str], algos: Sequence[str]) -> dict[str, dict[str, Any]]:
    """--knob specs -> {algo: {knob: value}}. "beam.m=2" sets one algorithm's knob; a bare
    "temperature=0.6" sets it for every algorithm in `algos` that has it. Each value is read
    as its knob's type (search.knobs.parse: "8" -> 8, "select=score" a string)."""
    out: dict[str, dict[str, Any]] = {a: {} for a in algos}
    for spec in specs:
        name, eq, text = spec.partition("=")
        if not eq or not name.strip():
            raise ValueError(f"--knob {spec!r}: expected algo.knob=value or knob=value")
        algo, dot, knob = name.strip().rpartition(".")
        if dot and algo not in out:
            raise ValueError(f"--knob {spec!r}: {algo!r} is not among --algos "
                             f"({', '.join(algos)})")
        if knob in RENAMED:  # an old name, accepted for one release
            warnings.warn(f"--knob {spec!r}: {knob} is now {RENAMED[knob]}; {knob} is accepted "
                          "until the next release", DeprecationWarning, stacklevel=2)
            knob = RENAMED[knob]
        takers = [algo] if dot else [a for a in algos if knob in registry.knob_names(a)]
        if not takers:
            raise ValueError(f"--knob {spec!r}: none of {', '.join(algos)} has a knob {knob!r}")
        for a in takers:
            out[a][knob] = knobs_parse(registry.get(a), knob, text.strip())
    return out


def parse_ints(text: str) -> list[int]:
    """A command line's comma-separated integers ("4,16,64"), for argparse `type=`."""
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}"
                                         ) from None


def _positive_ints(values: Iterable[Any], what: str, *, minimum: int) -> list[int]:
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise ValueError(f"{what} must be integers >= {minimum}, got {v!r}")
        if v not in out:
            out.append(v)
    return out


@dataclass(frozen=True)
class Grid:
    """What a grid runs: every problem x algorithm x budget (its width) x seed, each
    algorithm's knobs ({algo: {knob: value}}), a per-run token Budget (`tokens`) and tokens
    per sample, whether rows keep the candidates' texts, and the dataset name rows record.
    `cells()` makes its runs (make_grid, where every check is done, before any model loads);
    reports.eval.sweep.run_grid runs them."""

    problems: Sequence[Problem]
    algos: Sequence[str]
    budgets: Sequence[int]
    seeds: Sequence[int] = (0,)
    knobs: Mapping[str, Mapping[str, Any]] | None = None
    tokens: int | None = None
    sample_tokens: int = SAMPLE_TOKENS
    keep_text: bool = False
    dataset: str = "custom"

    def cells(self) -> list[Cell]:
        return make_grid(self.problems, self.algos, self.budgets, self.seeds, knobs=self.knobs,
                         tokens=self.tokens, sample_tokens=self.sample_tokens,
                         keep_text=self.keep_text)


def make_grid(problems: Sequence[Problem], algos: Sequence[str], budgets: Sequence[int],
              seeds: Sequence[int] = (0,), *,
              knobs: Mapping[str, Mapping[str, Any]] | None = None, tokens: int | None = None,
              sample_tokens: int = SAMPLE_TOKENS, keep_text: bool = False) -> list[Cell]:
    """Every run, problem-major (problem, algo, budget, seed), with all checks done here:
    unknown algorithms or knobs, bad budgets and clashing knobs raise before any model loads.

    knobs: {algo: {knob: value}}, e.g. from parse_knobs. tokens: a per-run token Budget.
    An algorithm declared deterministic (search.registry.deterministic) runs with the first
    seed only; its cells of the other seeds reuse that row (Cell.reuse_from).
    """
    algos = list(dict.fromkeys(algos))
    if not algos:
        raise ValueError("no algorithms given")
    budgets = _positive_ints(budgets, "budgets", minimum=1)
    seeds = _positive_ints(seeds, "seeds", minimum=0)
    if not budgets or not seeds:
        raise ValueError("give at least one budget and one seed")
    if tokens is not None:
        _positive_ints([tokens], "tokens", minimum=1)
    knobs = dict(knobs or {})
    for algo in knobs:
        if algo not in algos:
            raise ValueError(f"knobs given for {algo!r}, which is not among the algorithms")
    ids = [p.id for p in problems]
    if len(set(ids)) != len(ids):
        raise ValueError("problem ids must be unique: a run is named by its problem id")
    plans: list[tuple[str, dict[str, Any], int | None, int | None]] = []
    for algo in algos:
        scale = registry.declared(algo).scale  # unknown name: ValueError, "did you mean"
        user = registry.upgrade_knobs(algo, knobs.get(algo, {}))  # old names: a warning
        registry.check_knobs(algo, user, values_too=False)  # typo: "did you mean"; types
        if isinstance(scale, Width) and scale.knobs[0] in user:
            raise ValueError(f"{algo}: knob {scale.knobs[0]!r} is set by the budgets; give its "
                             "values with --budgets instead")
        for n in budgets if scale is not None else [None]:
            run = {**user, **(registry.at_width(algo, n, user) if n is not None else {})}
            registry.check_knobs(algo, run)  # types and value rules, width knobs included
            try:
                json.dumps(run, allow_nan=False)
            except (TypeError, ValueError) as err:
                raise ValueError(f"{algo}: knobs must be JSON values ({err})") from None
            cap = tokens
            if scale == TOKENS and n is not None:
                cap = n * sample_tokens if tokens is None else min(tokens, n * sample_tokens)
            plan = (algo, run, n if isinstance(scale, Width) else None, cap)
            if plan not in plans:  # e.g. compute_optimal budgets all capped by --tokens
                plans.append(plan)
    once = {algo: registry.deterministic(algo) for algo in algos}
    return [Cell(problem, algo, run, width, cap, seed,
                 reuse_from=seeds[0] if once[algo] and seed != seeds[0] else None,
                 keep_text=keep_text)
            for problem in problems for algo, run, width, cap in plans for seed in seeds]
