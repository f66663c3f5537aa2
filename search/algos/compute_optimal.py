"""Compute-optimal test-time scaling: choose the search per problem by its estimated difficulty.

Snell et al. 2024, "Scaling LLM Test-Time Compute Optimally can be More Effective than Scaling
Model Parameters": the best test-time strategy depends on how hard the problem is for the
model. Difficulty is predicted from a small probe (model-predicted difficulty: the verifier's
average final score over samples, binned), and a table fitted on evaluation runs says which
algorithm, knobs and per-problem budget do best in each bin.

    probe <- best_of_n(n = probe.n) within probe.budget_fraction of the budget
    d <- 1 - mean final score of the probe samples     (signal "score"; unfinished count 0;
                                                         a sample's score: its path score
                                                         under probe.agg, default the
                                                         scorer's own, Scorer.path_agg)
      or 1 - share of samples giving the commonest answer (signal "agreement")
    bin <- number of table edges <= d
    algo, knobs, tokens <- table.bins[bin]
    return the probe's own answer if algo is "probe" (an easy bin: nothing more is spent),
      else algo(problem, knobs) run via the registry on the remaining budget (capped at tokens)

The table is data: search/algos/compute_optimal_table.json (format below), or a path / dict
given as the `table` knob. The shipped table was fitted by reports.studies.compute_table on
3,600 runs of tiny-arith with the step checker (150 problems of levels 4-6, generator seed 99, disjoint
from the demo's; 2 seeds; a greedy probe, best_of_n at 4, 8 and 16, the particle filter at 4
and 8, A* at 4 and 8 with duplicates merged and kept), with `--probe-stop --match
best_of_n:16:select=weighted_vote`: the cheapest table that reaches best-of-16's accuracy on
those problems (70.3% at 308 tokens against 65.7% at 1,252 there). Its probe is greedy
(best-of-1 at temperature 0, ~78 tokens) scored by the step checker: a greedy path whose
every step checks out stands (81% right there; no search beat it on those problems, as
sampling at temperature 0.8 costs accuracy per sample), any other goes to A* popping one
node and sampling 4 children a pop, duplicates kept (54% right on those problems at ~650
tokens). Fit your own for another model or scorer. If the chosen search returns no answer
but the probe did, the probe's answer is returned (stats["fallback"] = True).

    {"probe": {"n", "signal", "budget_fraction", "step_tokens", "max_depth", "temperature",
               "agg", "select"},
     "edges": [e1 < e2 < ...],                       # len(bins) - 1 difficulty thresholds
     "bins": [{"algo", "knobs", "tokens": int | null}, ...]}   # tokens: per-problem cap
    (algo "probe": the probe's answer, chosen by probe.select, stands; knobs are ignored)
"""

from __future__ import annotations

import bisect
import json
import math
import random
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from search import knobs as _knobs
from search import registry
from search.answers import vote_key
from search.budget import Meter
from search.engines.base import Engine
from search.knobs import Rule, rules
from search.scoring import Scorer
from search.session import Session
from search.traits import TOKENS
from search.types import Budget, Outcome, Problem, Result

TABLE = Path(__file__).with_name("compute_optimal_table.json")
SIGNALS = ("score", "agreement")
PROBE_DEFAULTS = {"n": 4, "signal": "score", "budget_fraction": 0.25, "step_tokens": 256,
                  "max_depth": 40, "temperature": 0.8, "agg": None,  # agg None: the scorer's
                  "select": "score"}
PROBE = "probe"  # a bin's algo that keeps the probe's answer


# -- the table ------------------------------------------------------------------------------
def load_table(table: str | Path | Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The calibration table (default: the shipped JSON), checked against the registry. Old
    knob names (search.knobs.RENAMED: a table fitted before max_steps was max_depth) are read
    as their new ones, with a DeprecationWarning."""
    if table is None or isinstance(table, (str, Path)):
        data = json.loads(Path(table or TABLE).read_text(encoding="utf-8"))
    else:
        data = json.loads(json.dumps(table))  # a private, JSON-clean copy
    probe = {**PROBE_DEFAULTS,
             **_knobs.upgrade(registry.get("best_of_n"), data.get("probe", {}), stacklevel=2)}
    edges, bins = [float(e) for e in data["edges"]], list(data["bins"])
    if edges != sorted(edges) or len(bins) != len(edges) + 1:
        raise ValueError("compute_optimal table: edges must be sorted and there must be one "
                         f"more bin than edges (got {len(edges)} edges, {len(bins)} bins)")
    if probe["signal"] not in SIGNALS or not 0 < probe["budget_fraction"] <= 1:
        raise ValueError(f"compute_optimal table: probe signal must be one of {SIGNALS} and "
                         f"budget_fraction in (0, 1], got {probe}")
    for entry in bins:
        if entry["algo"] == "compute_optimal":
            raise ValueError("compute_optimal table: a bin cannot choose compute_optimal itself")
        if entry["algo"] != PROBE:
            entry["knobs"] = _knobs.upgrade(registry.get(entry["algo"]), entry.get("knobs", {}),
                                            stacklevel=2)
            registry.check_knobs(entry["algo"], entry["knobs"])
    return {"probe": probe, "edges": edges, "bins": bins}


def bin_of(difficulty: float, edges: Sequence[float]) -> int:
    """The bin index of a difficulty: how many edges are <= it."""
    return bisect.bisect_right(list(edges), difficulty)


def quantile_edges(difficulties: Iterable[float], n_bins: int = 5) -> list[float]:
    """Edges that split difficulties into n_bins equal-count bins (Snell et al. use quintiles)."""
    values = np.asarray(list(difficulties), dtype=float)
    if values.size == 0 or n_bins < 1:
        raise ValueError("quantile_edges needs difficulties and n_bins >= 1")
    return [float(q) for q in np.quantile(values, [i / n_bins for i in range(1, n_bins)])]


def fit_table(rows: Iterable[Mapping[str, Any]], *, edges: Sequence[float],
              probe: Mapping[str, Any] | None = None, token_cost: float = 0.0) -> dict[str, Any]:
    """A table from eval-run rows, one per (problem, config, seed):
    {"problem_id", "bin", "algo", "knobs", "correct", "tokens", optional "budget"}.

    Per bin, each config (algo, knobs, budget) gets accuracy = mean(correct) and mean tokens;
    the bin takes the config maximising accuracy - token_cost * mean tokens (ties: fewer mean
    tokens, then the config seen first). Its "tokens" is the config's budget (None if the rows
    have none). A bin without rows copies the nearest fitted bin (the lower one on ties).
    """
    n_bins = len(edges) + 1
    stats: list[dict[str, list[Any]]] = [{} for _ in range(n_bins)]
    for row in rows:
        b = int(row["bin"])
        if not 0 <= b < n_bins:
            raise ValueError(f"row bin {b} outside 0..{n_bins - 1}: {row}")
        key = json.dumps([row["algo"], row.get("knobs", {}), row.get("budget")], sort_keys=True)
        acc = stats[b].setdefault(key, [0, 0.0, 0.0])  # rows, correct, tokens
        acc[0] += 1
        acc[1] += float(bool(row["correct"]))
        acc[2] += float(row["tokens"])

    def best(b: int) -> dict[str, Any] | None:
        if not stats[b]:
            return None

        def rank(item: tuple[str, list[Any]]) -> tuple[float, float]:
            count, correct, tokens = item[1]
            return (correct / count - token_cost * tokens / count, -tokens / count)

        key, (count, correct, tokens) = max(stats[b].items(), key=rank)
        algo, knobs, budget = json.loads(key)
        return {"algo": algo, "knobs": knobs, "tokens": budget, "accuracy": correct / count,
                "mean_tokens": tokens / count, "rows": count}

    fitted = {b: e for b in range(n_bins) if (e := best(b)) is not None}
    if not fitted:
        raise ValueError("fit_table: no rows")
    bins = []
    for b in range(n_bins):
        near = min(fitted, key=lambda h: (abs(h - b), h))
        bins.append(fitted[b] if b in fitted else {**fitted[near], "copied_from": near})
    return {"probe": {**PROBE_DEFAULTS, **(probe or {})}, "edges": [float(e) for e in edges],
            "bins": bins}


# -- difficulty -----------------------------------------------------------------------------
def difficulty(problem: Problem, probe: Result, signal: str = "score") -> float:
    """Predicted difficulty in [0, 1] from a probe's candidates (1 when it has none)."""
    cands = probe.candidates
    if not cands:
        return 1.0
    if signal == "score":
        vals = [min(1.0, max(0.0, c.score)) if c.finished and math.isfinite(c.score) else 0.0
                for c in cands]
        return 1.0 - sum(vals) / len(vals)
    if signal == "agreement":
        keys = [vote_key(problem, c.answer) for c in cands if c.finished and c.answer is not None]
        top = Counter(keys).most_common(1)[0][1] if keys else 0
        return 1.0 - top / len(cands)
    raise ValueError(f"unknown difficulty signal {signal!r}; choose from {SIGNALS}")


# -- running a sub-search on a share of the budget -------------------------------------------
def _share(meter: Meter, tokens_cap: float | None) -> Budget | None:
    """What is left of meter's budget, tokens capped at tokens_cap; None if nothing is left."""
    b = meter.budget
    left: dict[str, float | None] = {
        "tokens": None if b.tokens is None else b.tokens - meter.generated_tokens,
        "scorer_calls": None if b.scorer_calls is None else b.scorer_calls - meter.scorer_calls,
        "flops": None if b.flops is None else b.flops - meter.flops,
        "seconds": None if b.seconds is None else b.seconds - meter.seconds}
    if tokens_cap is not None:
        left["tokens"] = tokens_cap if left["tokens"] is None else min(tokens_cap, left["tokens"])
    if any(v is not None and v <= 0 for v in left.values()):
        return None
    counts = {k: max(1, math.floor(v)) for k, v in left.items()  # whole tokens and calls
              if k in ("tokens", "scorer_calls") and v is not None}
    return Budget(**{**left, **counts}, reserve=b.reserve)  # each sub-search keeps a reserve


def _run(fn: Callable[..., Result], problem: Problem, engine: Engine, scorer: Scorer,
         session: Session, budget: Budget | None, seed: int, knobs: Mapping[str, Any]
         ) -> Result:
    """fn within `budget` (Session.within: its own meter, whose spending is then charged to
    the session's). budget None (nothing left): fn runs on the exhausted session and stops
    before any batch."""
    if budget is None:
        return fn(problem, engine, scorer, session, seed=seed, **knobs)
    with session.within(budget) as sub:  # fn's Run binds the engine and scorer to it
        return fn(problem, engine, scorer, sub, seed=seed, **knobs)


@rules(Rule(("table",), lambda t: bool(load_table(t)),
            "table must be one load_table reads: a JSON file or a mapping (None: the shipped one)"),
       depth_limit=False,
       scale=TOKENS)
def compute_optimal(problem: Problem, engine: Engine, scorer: Scorer, session: Session, *,
                    seed: int = 0, table: str | Mapping[str, Any] | None = None) -> Outcome:
    tab = load_table(table)
    meter = session.meter
    rng = random.Random(seed)
    cfg = tab["probe"]
    left = meter.tokens_left()
    probe_budget = _share(meter, None if left is None else cfg["budget_fraction"] * left)
    probe = _run(registry.get("best_of_n"), problem, engine, scorer, session, probe_budget,
                 rng.getrandbits(32), dict(n=cfg["n"], select=cfg["select"], agg=cfg["agg"],
                                           temperature=cfg["temperature"],
                                           step_tokens=cfg["step_tokens"],
                                           max_depth=cfg["max_depth"]))
    d = round(difficulty(problem, probe, cfg["signal"]), 9)  # 1 - 0.6 lands on the 0.4 edge
    b = bin_of(d, tab["edges"])
    entry = tab["bins"][b]
    knobs = dict(entry.get("knobs", {}))
    budget = _share(meter, entry.get("tokens"))
    result, fallback = probe, entry["algo"] != PROBE
    if budget is not None and entry["algo"] != PROBE:
        result = _run(registry.get(entry["algo"]), problem, engine, scorer, session, budget,
                      rng.getrandbits(32), knobs)
        fallback = result.answer is None and probe.answer is not None
        result = probe if fallback else result
    chosen_by = (f"probe best_of_n: {probe.selected_by}" if result is probe
                 else f"{entry['algo']}: {result.selected_by}")
    return Outcome.of(
        result, selected_by=chosen_by,
        resolved=dict(table=table if isinstance(table, str) else
                      ("default" if table is None else "custom")),
        stats=dict(difficulty=d, bin=b, chosen_algo=entry["algo"], chosen_knobs=knobs,
                   tokens_cap=entry.get("tokens"), probe_answer=probe.answer,
                   fallback=fallback, chosen_stats=dict(result.stats)))
