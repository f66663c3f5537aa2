"""Fit the compute-optimal table (search/algos/compute_optimal.py) from eval rows.

1. Difficulty per problem, from the rows of a probe algorithm (best_of_n by default,
   optionally one width), averaged over its rows (seeds):
     "score":     1 - mean final candidate score, unfinished candidates counting 0, scores
                  clipped to [0, 1] (model-predicted difficulty, what compute_optimal
                  measures at run time with the same signal);
     "agreement": 1 - share of candidates giving the commonest answer (also a run-time
                  signal);
     "oracle":    1 - pass rate, the share of correct candidates pooled over the seeds of the
                  widest budget (Snell et al.'s oracle difficulty; needs the gold answers, so
                  the table's run-time probe uses `runtime_signal` instead and its bins are
                  only as good as that signal's agreement with the oracle).
2. Bins: equal-count quantile edges (quantile_edges) or given edges; bin = bin_of(d, edges).
3. fit_table over every row (problem, algo, knobs, budget, seed) but compute_optimal's own:
   per bin the config maximising accuracy - token_cost * mean generated tokens.
   With --probe-stop (needs --probe-width): the probe's own rows are one more config, "probe"
   (keep its answer, spend nothing more), and every other config is charged the probe's
   tokens on that problem, since compute_optimal always pays for its probe first. The table's
   probe then selects as those rows did (their knobs' select).
4. Efficiency vs best-of-N, per bin, on best_of_n's (mean tokens, accuracy) points in that
   bin, with accuracy made monotone in tokens (running max):
     tokens_to_match: tokens best-of-N needs to reach the chosen config's accuracy A*,
       interpolated linearly in log tokens between the two points around A*; when the
       cheapest best-of-N point already reaches A* it is that point's tokens ("at_most", an
       upper bound); None when no best-of-N point reaches A* ("never").
     gain = tokens_to_match / chosen mean tokens (> 1: the chosen config is cheaper).
     bon_accuracy_at_equal_tokens: best-of-N accuracy at the chosen config's mean tokens,
       interpolated the same way; None outside best-of-N's token range.

5. With --match ALGO:WIDTH (fit_to_match): the token cost is chosen, over a grid (COSTS), as
   the one whose table reaches ALGO at WIDTH's accuracy on the same problems with the fewest
   mean tokens (probe included), all measured on these rows: a table fitted to match best-of-16
   at least cost, not to maximise accuracy.

A config is (algo, knobs, budget tokens). The table's knobs are the row's knobs, so the
runner must record the knobs the algorithm ran with, its budget width included; rows that
differ only in budget width would be one config, and are refused. Every config compared
selects its answer by one rule (reports.eval.rules.shared_rule: rows of several rules are
refused; --select keeps one rule's rows), printed first ("final selection: ...") and
recorded as the table's fit.select.

    python -m reports.studies.compute_table runs.jsonl [more.jsonl] --out table.json
        [--signal score|agreement|oracle] [--bins 5 | --edges 0.2,0.5] [--token-cost 0]
        [--probe-algo best_of_n] [--probe-width 4] [--runtime-signal score]
        [--probe-stop] [--match best_of_n:16]
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from reports.analysis.rows import Row, candidates, group, read_rows, usage, widest
from reports.eval.rules import final_selection, shared_rule, with_rule
from search import registry
from search.algos.compute_optimal import (
    PROBE,
    PROBE_DEFAULTS,
    bin_of,
    fit_table,
    load_table,
    quantile_edges,
)
from search.cli import parse, printout
from search.select import SELECTIONS

SIGNALS = ("score", "agreement", "oracle")
PROBE_KNOBS = ("select", "temperature", "agg", "step_tokens", "max_depth")  # from its rows


PROG = "python -m reports.studies.compute_table"
OPTIONS: dict[str, dict[str, Any]] = {  # the command line: flag -> add_argument's keywords
    "runs": dict(nargs="+", help="JSONL files written by reports.eval"),
    "--out": dict(required=True, help="table JSON to write"),
    "--signal": dict(default="score", choices=SIGNALS),
    "--bins": dict(type=int, default=5, help="equal-count bins (if no --edges)"),
    "--edges": dict(default="", help="comma-separated difficulty edges"),
    "--token-cost": dict(type=float, default=0.0),
    "--probe-algo": dict(default="best_of_n"),
    "--probe-width": dict(type=int, default=None),
    "--runtime-signal": dict(default="score", choices=SIGNALS[:2]),
    "--probe-stop": dict(action="store_true", help="the probe's answer may stand (a "
                         "'probe' bin); charge it to the rest"),
    "--select": dict(default=None, choices=sorted(SELECTIONS),
                     help="fit only the rows chosen by this rule (rows of several rules are "
                          "refused: every config compared selects by one rule)"),
    "--match": dict(default="", metavar="ALGO:WIDTH[:KNOB=VALUE,...]",
                    help="choose the token cost: the fewest tokens reaching the accuracy "
                         "of ALGO at WIDTH (rows with those knobs) on these rows, e.g. "
                         "best_of_n:16:select=weighted_vote; --token-cost is ignored"),
}


def _answer_key(row: Row, answer: str) -> str:
    if str(row.get("dataset", "")).lower().startswith("humaneval"):
        return answer.strip()
    from verifiers.math import normalize  # sympy-backed, loaded only for this signal

    return normalize(answer)


def row_difficulty(row: Row, signal: str) -> float:
    """One probe row's difficulty under the "score" or "agreement" signal (1 if no candidates)."""
    cands = candidates(row)
    if not cands:
        return 1.0
    if signal == "score":
        vals = [min(1.0, max(0.0, float(c["score"]))) if c.get("finished") and
                c.get("score") is not None and math.isfinite(float(c["score"])) else 0.0
                for c in cands]
        return 1.0 - sum(vals) / len(vals)
    if signal == "agreement":
        keys = [_answer_key(row, c["answer"]) for c in cands
                if c.get("finished") and c.get("answer") is not None]
        top = Counter(keys).most_common(1)[0][1] if keys else 0
        return 1.0 - top / len(cands)
    raise ValueError(f"row_difficulty: signal {signal!r} is not a per-row signal")


def difficulties(rows: Iterable[Row], *, signal: str = "score", probe_algo: str = "best_of_n",
                 probe_width: int | None = None) -> dict[str, float]:
    """problem_id -> difficulty in [0, 1] from the probe rows (module doc); problems without
    probe rows are absent."""
    if signal not in SIGNALS:
        raise ValueError(f"unknown difficulty signal {signal!r}; choose from {SIGNALS}")
    probe = [r for r in rows if r["algo"] == probe_algo and
             (probe_width is None or (r.get("budget") or {}).get("width") == probe_width)]
    out = {}
    for pid, prows in group(probe, lambda r: str(r["problem_id"])).items():
        if signal == "oracle":
            flags = [bool(c.get("correct")) for r in widest(prows) for c in candidates(r)]
            flags = flags or [bool(r["correct"]) for r in prows]
            out[str(pid)] = 1.0 - sum(flags) / len(flags)
        else:
            out[str(pid)] = float(np.mean([row_difficulty(r, signal) for r in prows]))
    return out


def _config(row: Row) -> str:
    return json.dumps([row["algo"], row.get("knobs", {}), (row.get("budget") or {}).get("tokens")],
                      sort_keys=True)


def fit_rows(rows: Iterable[Row], diff: dict[str, float], edges: Sequence[float], *,
             probe: Sequence[Row] = ()) -> list[Row]:
    """The rows fit_table reads, for problems with a difficulty, compute_optimal's left out.
    probe: the probe's rows when it may stop the search (--probe-stop): they become the
    "probe" config, and the others are charged their problem's mean probe tokens ("tokens";
    "own_tokens" keeps what the row itself spent)."""
    charge = {str(pid): float(np.mean([usage(r, "generated_tokens") or 0.0 for r in g]))
              for pid, g in group(probe, lambda r: str(r["problem_id"])).items()}
    out, widths = [], {}
    for r in probe:
        pid = str(r["problem_id"])
        if pid in diff:
            out.append({"problem_id": pid, "bin": bin_of(round(diff[pid], 9), edges),
                        "algo": PROBE, "knobs": {}, "correct": r["correct"],
                        "tokens": charge[pid], "own_tokens": charge[pid], "budget": None})
    for r in rows:
        pid = str(r["problem_id"])
        if r["algo"] == "compute_optimal" or pid not in diff:
            continue
        tokens = usage(r, "generated_tokens")
        if tokens is None:
            raise ValueError(f"row {r.get('key', pid)} has no usage.generated_tokens")
        width = (r.get("budget") or {}).get("width")
        if widths.setdefault(_config(r), width) != width:
            raise ValueError(f"rows of config {_config(r)} differ only in budget width "
                             f"({widths[_config(r)]} vs {width}): record the width in knobs")
        out.append({"problem_id": pid, "bin": bin_of(round(diff[pid], 9), edges),
                    "algo": r["algo"], "knobs": r.get("knobs", {}), "correct": r["correct"],
                    "tokens": tokens + charge.get(pid, 0.0), "own_tokens": tokens,
                    "budget": (r.get("budget") or {}).get("tokens")})
    return out


def _interp(xs: Sequence[float], ys: Sequence[float], y: float) -> float:
    """Log-x linear interpolation: the x where the segment from (xs[0], ys[0]) to
    (xs[1], ys[1]) reaches y (ys[0] < y <= ys[1])."""
    t = (y - ys[0]) / (ys[1] - ys[0])
    return math.exp(math.log(xs[0]) + t * (math.log(xs[1]) - math.log(xs[0])))


@dataclass(frozen=True)
class BinGain:
    """One bin: the chosen config and its efficiency against best-of-N (module doc)."""

    bin: int
    problems: int
    algo: str
    knobs: dict[str, Any]
    tokens_cap: int | None
    accuracy: float
    mean_tokens: float
    tokens_to_match: float | None
    match: str  # "interpolated", "at_most", "never", or "no best_of_n rows"
    gain: float | None
    bon_accuracy_at_equal_tokens: float | None


def bin_gains(frows: Sequence[Row], table: dict[str, Any], *, baseline: str = "best_of_n"
              ) -> list[BinGain]:
    out = []
    for b, entry in enumerate(table["bins"]):
        brows = [r for r in frows if r["bin"] == b]
        pts = []
        for crows in group([r for r in brows if r["algo"] == baseline], _config_of_fit).values():
            pts.append((float(np.mean([r.get("own_tokens", r["tokens"]) for r in crows])),
                        float(np.mean([bool(r["correct"]) for r in crows]))))
        pts = sorted(p for p in pts if p[0] > 0)
        xs = [t for t, _ in pts]
        env = list(np.maximum.accumulate([a for _, a in pts])) if pts else []
        acc, tok = entry["accuracy"], entry["mean_tokens"]
        match, need, at_equal = "no best_of_n rows", None, None
        if pts and entry.get("copied_from") is None:
            i = next((j for j, a in enumerate(env) if a >= acc - 1e-12), None)
            if i is None:
                match = "never"
            elif i == 0:
                match, need = "at_most", xs[0]
            else:
                match, need = "interpolated", _interp(xs[i - 1:i + 1], env[i - 1:i + 1], acc)
            if xs[0] <= tok <= xs[-1]:
                j = next(j for j, x in enumerate(xs) if x >= tok)
                at_equal = env[j] if j == 0 or xs[j] == tok else float(
                    env[j - 1] + (env[j] - env[j - 1]) * (math.log(tok) - math.log(xs[j - 1]))
                    / (math.log(xs[j]) - math.log(xs[j - 1])))
        out.append(BinGain(b, len({r["problem_id"] for r in brows}), entry["algo"],
                           dict(entry.get("knobs", {})), entry.get("tokens"), acc, tok, need,
                           match, None if need is None or tok <= 0 else need / tok,
                           None if at_equal is None else float(at_equal)))
    return out


def _config_of_fit(r: Row) -> str:
    return json.dumps([r["algo"], r["knobs"], r["budget"]], sort_keys=True)


def fit(rows: Sequence[Row], *, signal: str = "score", n_bins: int = 5,
        edges: Sequence[float] | None = None, token_cost: float = 0.0,
        probe_algo: str = "best_of_n", probe_width: int | None = None,
        runtime_signal: str = "score", probe_stop: bool = False
        ) -> tuple[dict[str, Any], list[BinGain]]:
    """The table (load_table-checked, with a "fit" section of provenance and gains) and the
    per-bin gains."""
    rule = shared_rule(rows)  # one selection rule for every config compared (else refused)
    diff = difficulties(rows, signal=signal, probe_algo=probe_algo, probe_width=probe_width)
    if not diff:
        raise ValueError(f"no {probe_algo} probe rows"
                         f"{'' if probe_width is None else f' of width {probe_width}'}")
    edges = list(edges) if edges is not None else quantile_edges(diff.values(), n_bins)
    if probe_stop and (probe_width is None or probe_algo != "best_of_n"):
        raise ValueError("probe_stop needs the probe's own rows: best_of_n at --probe-width")
    of_width = [r for r in rows if r["algo"] == probe_algo and probe_width is not None
                and (r.get("budget") or {}).get("width") == probe_width]
    probe_rows = of_width if probe_stop else []
    frows = fit_rows(rows, diff, edges, probe=probe_rows)
    probe = {"signal": signal if signal != "oracle" else runtime_signal,
             "n": probe_width if probe_width is not None else PROBE_DEFAULTS["n"]}
    if of_width and probe_algo == "best_of_n":  # the run-time probe samples and selects as
        # the rows that stand for it did (greedy: t=0); rows from before max_steps was
        # max_depth name it by its old name
        knobs = registry.upgrade_knobs("best_of_n", of_width[0].get("knobs", {}))
        probe.update({k: knobs[k] for k in PROBE_KNOBS if k in knobs})
        if probe_stop:
            probe.setdefault("select", "score")
    table = fit_table(frows, edges=edges, probe=probe, token_cost=token_cost)
    load_table(table)  # the run-time checks: edges, signal, knobs against the registry
    gains = bin_gains(frows, table)
    table = {"_comment": f"fitted by reports.studies.compute_table ({signal} difficulty)", **table,
             "fit": {"signal": signal, "select": rule, "probe_algo": probe_algo, "probe_width": probe_width,
                     "probe_stop": probe_stop, "token_cost": token_cost, "rows": len(frows),
                     "problems": len(diff),
                     "gains": [asdict(g) for g in gains]}}
    return table, gains


COSTS = (0.0, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 3e-4, 5e-4, 1e-3, 2e-3)  # fit_to_match's grid


def overall(gains: Sequence[BinGain]) -> tuple[float, float]:
    """(accuracy, mean tokens) of a table's choices over the fit problems: each bin's chosen
    config weighted by the bin's problems."""
    total = sum(g.problems for g in gains)
    return (sum(g.problems * g.accuracy for g in gains) / total,
            sum(g.problems * g.mean_tokens for g in gains) / total)


def fit_to_match(rows: Sequence[Row], *, algo: str, width: int,
                 knobs: dict[str, Any] | None = None, costs: Sequence[float] = COSTS, **kw: Any
                 ) -> tuple[dict[str, Any], list[BinGain], dict[str, float]]:
    """The table that reaches the reference config's accuracy (algo at width, over the same
    problems; `knobs`: only its rows with these knobs) with the fewest mean tokens, over the
    token costs in `costs` (the most accurate table if none reaches it), and the comparison: {"token_cost", "accuracy", "tokens",
    "reference_accuracy", "reference_tokens"}. Everything is measured on the fit rows alone."""
    diff = difficulties(rows, signal=kw.get("signal", "score"),
                        probe_algo=kw.get("probe_algo", "best_of_n"),
                        probe_width=kw.get("probe_width"))
    ref = [r for r in rows if r["algo"] == algo and (r.get("budget") or {}).get("width") == width
           and str(r["problem_id"]) in diff
           and all(str(r.get("knobs", {}).get(k)) == str(v) for k, v in (knobs or {}).items())]
    if not ref:
        raise ValueError(f"no {algo} rows of width {width}{f' with {knobs}' if knobs else ''} "
                         "to match")
    ref_acc = float(np.mean([bool(r["correct"]) for r in ref]))
    ref_tok = float(np.mean([usage(r, "generated_tokens") or 0.0 for r in ref]))
    fits = []
    for cost in costs:
        table, gains = fit(rows, token_cost=cost, **kw)
        acc, tok = overall(gains)
        fits.append((acc >= ref_acc - 1e-12, -tok if acc >= ref_acc - 1e-12 else acc, cost,
                     table, gains, acc, tok))
    _, _, cost, table, gains, acc, tok = max(fits, key=lambda f: (f[0], f[1], -f[2]))
    match = {"token_cost": cost, "accuracy": acc, "tokens": tok, "reference_accuracy": ref_acc,
             "reference_tokens": ref_tok}
    table["fit"]["match"] = {"algo": algo, "width": width, "knobs": knobs or {}, **match}
    return table, gains, match


@printout
def format_gains(gains: Sequence[BinGain], edges: Sequence[float]) -> Iterator[str]:
    lo = [0.0, *edges]
    hi = [*edges, 1.0]
    yield (f"{'bin':>3} {'difficulty':>11} {'probs':>5}  {'chosen config':<34} {'acc':>5} "
           f"{'tokens':>8} {'BoN tok':>8} {'gain':>6} {'BoN acc@=':>9}")
    for g in gains:
        knobs = ",".join(f"{k}={v}" for k, v in g.knobs.items())
        cfg = f"{g.algo}({knobs})" + (f" cap={g.tokens_cap}" if g.tokens_cap else "")
        need = "-" if g.tokens_to_match is None else f"{g.tokens_to_match:.0f}"
        need = f"<={need}" if g.match == "at_most" else need
        gain = "-" if g.gain is None else f"{g.gain:.2f}x"
        eq = "-" if g.bon_accuracy_at_equal_tokens is None else \
            f"{g.bon_accuracy_at_equal_tokens:.3f}"
        yield (f"{g.bin:>3} {lo[g.bin]:>5.2f}-{hi[g.bin]:<5.2f} {g.problems:>5}  "
               f"{cfg:<34.34} {g.accuracy:>5.3f} {g.mean_tokens:>8.0f} {need:>8} "
               f"{gain:>6} {eq:>9}")


def main(argv: Sequence[str] | None = None) -> None:
    args = parse(PROG, __doc__, OPTIONS, argv)
    edges = [float(e) for e in args.edges.split(",") if e] or None
    kw: dict[str, Any] = dict(signal=args.signal, n_bins=args.bins, edges=edges,
                              probe_algo=args.probe_algo, probe_width=args.probe_width,
                              runtime_signal=args.runtime_signal, probe_stop=args.probe_stop)
    rows = read_rows(args.runs)
    if args.select is not None:
        rows = with_rule(rows, args.select)
    print(final_selection(rows))
    if args.match:
        algo, width, *rest = args.match.split(":", 2)
        knobs = dict(kv.split("=", 1) for kv in rest[0].split(",")) if rest else None
        table, gains, m = fit_to_match(rows, algo=algo, width=int(width), knobs=knobs, **kw)
        print(f"token cost {m['token_cost']:g}: accuracy {m['accuracy']:.3f} at "
              f"{m['tokens']:.0f} tokens; {args.match}: {m['reference_accuracy']:.3f} at "
              f"{m['reference_tokens']:.0f} ({m['tokens'] / m['reference_tokens']:.0%} of its "
              f"tokens)")
    else:
        table, gains = fit(rows, token_cost=args.token_cost, **kw)
    Path(args.out).write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    print(format_gains(gains, table["edges"]))
    print(f"wrote {args.out} ({table['fit']['rows']} rows, {table['fit']['problems']} problems)")


if __name__ == "__main__":
    main()
