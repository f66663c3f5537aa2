"""Plots over eval rows: accuracy vs compute, coverage (pass@k) vs k with its scaling fit,
and tokens-to-solve distributions.

Every plot function writes DIR/<stem>.png, DIR/<stem>.svg and DIR/<stem>.json, the last
holding exactly the series drawn (labels, x, y, bands, fits), and returns that same dict, so
tests and other tools read the data instead of pixels. In the SVG each curve is a group with
id "curve-<i>" (bands "band-<i>", fits "fit-<i>") and text stays text, so labels can be found.
Rows of several difficulty levels are drawn one panel per level (each curve's "difficulty"
says which), never pooled into one line. Titles and the JSON ("models", "scorers") name the
model and scorer the rows came from; where rows mix several, curve labels carry them too.

    python -m reports.figures.plots runs.jsonl [more.jsonl ...] --out DIR \
        [--x generated_tokens|flops|scorer_calls] [--band problems|minmax|std] [--knobs m,groups]
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from reports.analysis.passk import SOURCES, coverage_by_curve
from reports.analysis.rows import (
    Row,
    budget_key,
    budget_label,
    curve_labeler,
    facets,
    group,
    independent,
    provenance,
    read_rows,
    usage,
)
from reports.analysis.scaling import fit_exp_power_law
from search.cli import parse

X_METRICS = ("generated_tokens", "flops", "scorer_calls")
X_NAMES = {"generated_tokens": "generated tokens per problem", "flops": "FLOPs per problem",
           "scorer_calls": "scorer calls per problem"}
BANDS = ("problems", "minmax", "std")
INDEPENDENT = frozenset({"best_of_n", "rpc"})  # searches whose candidates are independent samples


def _colors(labels: Sequence[str]) -> dict[str, Any]:
    cycle = matplotlib.colormaps["tab10"]
    return {label: cycle(i % 10) for i, label in enumerate(labels)}


def save(fig: Figure, data: dict[str, Any], out_dir: str | Path, stem: str) -> dict[str, Any]:
    """Write <stem>.png/.svg (deterministic SVG ids, text kept as text) and the <stem>.json
    sidecar; returns data with its "files" filled in."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {ext: str(out / f"{stem}.{ext}") for ext in ("png", "svg", "json")}
    data = {**data, "files": files}
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "reports"}):
        fig.savefig(files["png"], dpi=120, bbox_inches="tight")
        fig.savefig(files["svg"], bbox_inches="tight", metadata={"Date": None})
    Path(files["json"]).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return data


def _panels(data: dict[str, Any], title: str) -> tuple[Figure, list[Any]]:
    """A figure with one panel per difficulty level of data (one panel when there are none),
    titled by what is plotted and the model/scorer the rows came from."""
    levels = data["difficulties"] or [None]
    cols = min(3, len(levels))
    rows_ = math.ceil(len(levels) / cols)
    fig = Figure(figsize=(6.4 * cols, 4.4 * rows_))
    axes = [fig.add_subplot(rows_, cols, i + 1) for i in range(len(levels))]
    source = _source(data)
    if len(levels) == 1:
        axes[0].set_title(f"{title}\n{source}", fontsize=10)
    else:
        fig.suptitle(f"{title} · {source}")
        for ax, level in zip(axes, levels):
            ax.set_title(f"difficulty {level}" if level is not None else "no difficulty")
    return fig, axes


def _source(data: dict[str, Any]) -> str:
    """"arith · 48 problems · model tiny-arith, scorer steps" (or the counts, when the rows
    mix several datasets, models or scorers)."""
    parts = []
    for what in ("model", "scorer"):
        found = data[f"{what}s"]
        parts.append(f"no {what}" if not found else f"{what} {found[0]}" if len(found) == 1
                     else f"{len(found)} {what}s")
    sets = data.get("datasets") or []
    if not sets:
        return ", ".join(parts)
    named = ", ".join(sets) if len(sets) <= 2 else f"{len(sets)} datasets"
    return f"{named} · {data.get('problems', 0)} problems · " + ", ".join(parts)


def _dress(axes: list[Any], xlabel: str, ylabel: str, *, base: int = 10, legend: int = 8
           ) -> None:
    """Log x axis, labels, grid and a legend (where a panel has curves) on every panel."""
    for ax in axes:
        ax.set_xscale("log", base=base)
        # labelled ticks at 1, 2, 5 x 10^k (powers of 2 in base 2), plain numbers, at most
        # ~8 of them; no minor labels: they overlapped
        subs = (1.0, 2.0, 5.0) if base == 10 else (1.0,)
        ax.xaxis.set_major_locator(LogLocator(base=base, subs=subs, numticks=8))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.tick_params(axis="x", labelsize=8)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_lines():
            ax.legend(fontsize=legend)


def _axis(axes: list[Any], data: dict[str, Any], curve: dict[str, Any]) -> Any:
    levels = data["difficulties"]
    return axes[levels.index(curve["difficulty"])] if levels else axes[0]


def _framed(rows: Sequence[Row], kind: str, **fields: Any) -> dict[str, Any]:
    """The JSON frame every plot shares: kind, models, scorers, difficulty levels (empty when
    the rows do not split by one)."""
    prov = provenance(rows)
    levels = [d for d, _ in facets(rows)]
    return {"kind": kind, "datasets": sorted({str(r.get("dataset") or "?") for r in rows}),
            "problems": len({(r.get("dataset"), r.get("problem_id")) for r in rows}),
            "models": prov["models"], "scorers": prov["scorers"],
            "difficulties": levels if len(levels) > 1 else [], **fields}


# -- (a) accuracy vs compute ------------------------------------------------------------------
BAND_TITLES = {"problems": "95% bootstrap interval over problems", "minmax": "min-max over seeds",
               "std": "±1 std over seeds"}


def _band(rows: Sequence[Row], accs: Sequence[float], band: str) -> tuple[float, float]:
    """A point's band: the 95% percentile bootstrap over problems (reports.analysis.bands,
    each resampled problem with all its seeds' rows), or the per-seed accuracies' min..max,
    or their mean +- std (ddof 0)."""
    if band == "problems":
        from reports.analysis.bands import band as bootstrap

        b = bootstrap(rows)
        return b.ci_low, b.ci_high
    if band == "minmax":
        return min(accs), max(accs)
    mean, spread = float(np.mean(accs)), float(np.std(accs))
    return mean - spread, mean + spread


def accuracy_series(rows: Sequence[Row], *, x: str = "generated_tokens",
                    band: str = "problems", knobs: Sequence[str] = ()) -> dict[str, Any]:
    """Per curve (algorithm, split by `knobs`) one point per budget: per seed, accuracy =
    mean(correct) over its rows (failed runs count as wrong) and cost = mean x over the rows
    that recorded it; the point is the mean over seeds, its band (`_band`) the 95% bootstrap
    interval over problems by default. Points without a positive cost are listed in
    "dropped" (a log axis cannot show them). Points are sorted by cost."""
    if x not in X_METRICS:
        raise ValueError(f"unknown x {x!r}; choose from {X_METRICS}")
    if band not in BANDS:
        raise ValueError(f"unknown band {band!r}; choose from {BANDS}")
    curves, dropped = [], []
    label_of = curve_labeler(rows, knobs)
    for level, frows in facets(rows):
        for label, crows in group(frows, label_of).items():
            points = []
            for brows in group(crows, budget_key).values():
                accs, costs = [], []
                for srows in group(brows, lambda r: r["seed"]).values():
                    accs.append(float(np.mean([bool(r["correct"]) for r in srows])))
                    vals = [v for r in srows if (v := usage(r, x)) is not None]
                    costs.append(float(np.mean(vals)) if vals else math.nan)
                known = [c for c in costs if not math.isnan(c)]
                cost = float(np.mean(known)) if known else math.nan
                acc = float(np.mean(accs))
                lo, hi = _band(brows, accs, band)
                # seeds: independent runs (a deterministic algorithm's copies are not)
                point = dict(x=cost, y=acc, lo=lo, hi=hi, budget=budget_label(brows[0]),
                             seeds=len({r["seed"] for r in independent(brows)}),
                             rows=len(brows))
                if math.isfinite(cost) and cost > 0:
                    points.append(point)
                else:
                    dropped.append({"label": label, "difficulty": level, **point,
                                    "x": None if math.isnan(cost) else cost})
            points.sort(key=lambda p: p["x"])
            if points:
                curves.append({"label": label, "difficulty": level,
                               **{k: [p[k] for p in points] for k in
                                  ("x", "y", "lo", "hi", "budget", "seeds", "rows")}})
    return _framed(rows, "accuracy_vs_compute", x_metric=x, band=band, curves=curves,
                   dropped=dropped)


def accuracy_vs_compute(rows: Sequence[Row], out_dir: str | Path, *,
                        x: str = "generated_tokens", band: str = "problems",
                        knobs: Sequence[str] = (), stem: str = "accuracy_vs_compute"
                        ) -> dict[str, Any]:
    """One curve per algorithm (split by `knobs`) through its widths, each point labelled
    with its budget (the width) and drawn with its band as an error bar."""
    data = accuracy_series(rows, x=x, band=band, knobs=knobs)
    fig, axes = _panels(data, f"Accuracy vs compute (bars: {BAND_TITLES[band]})")
    colors = _colors([c["label"] for c in data["curves"]])
    for i, c in enumerate(data["curves"]):
        ax = _axis(axes, data, c)
        color = colors[c["label"]]
        (line,) = ax.plot(c["x"], c["y"], marker="o", label=c["label"], color=color)
        line.set_gid(f"curve-{i}")
        bars = ax.errorbar(c["x"], c["y"], yerr=[[y - lo for y, lo in zip(c["y"], c["lo"])],
                                                 [hi - y for y, hi in zip(c["y"], c["hi"])]],
                           fmt="none", ecolor=color, alpha=0.5, capsize=3)
        bars.set_label("_nolegend_")
        for bar in bars.lines[2]:
            bar.set_gid(f"band-{i}")
        for px, py, budget in zip(c["x"], c["y"], c["budget"]):
            if budget == "none":  # no width to name (greedy)
                continue
            ax.annotate(str(budget), (px, py), textcoords="offset points", xytext=(4, 4),
                        fontsize=7, color=color)
    _dress(axes, X_NAMES[x] + " (mean over problems)", "accuracy")
    return save(fig, data, out_dir, stem)


# -- which scorer helps which algorithm ---------------------------------------------------------
def scorer_effect(rows: Sequence[Row], out_dir: str | Path, *, stem: str = "scorer_effect"
                  ) -> dict[str, Any]:
    """One bar per (algorithm, width) and scorer: the accuracy (mean over seeds, whisker the
    seeds' min..max), beside a line at greedy's. Only runs that consulted a scorer have one."""
    scored = [r for r in rows if r.get("scorer") is not None]
    scorers = list(dict.fromkeys(r["scorer"] for r in scored))
    configs = list(dict.fromkeys((r["algo"], r["budget"]["width"]) for r in scored))
    bars = []
    for scorer in scorers:
        ys, lo, hi = [], [], []
        for algo, width in configs:
            mine = [r for r in scored if r["scorer"] == scorer and r["algo"] == algo
                    and r["budget"]["width"] == width]
            accs = [float(np.mean([bool(r["correct"]) for r in g]))
                    for g in group(mine, lambda r: r["seed"]).values()]
            ys.append(float(np.mean(accs)) if accs else math.nan)
            lo.append(min(accs) if accs else math.nan)
            hi.append(max(accs) if accs else math.nan)
        bars.append({"scorer": scorer, "y": ys, "lo": lo, "hi": hi})
    greedy = [bool(r["correct"]) for r in rows if r["algo"] == "greedy"]
    data = {"configs": [f"{a} {'' if w is None else w}".strip() for a, w in configs],
            "bars": bars, "greedy": float(np.mean(greedy)) if greedy else None}
    fig = Figure(figsize=(max(6.4, 0.7 * len(configs) + 2), 4.4))
    ax = fig.add_subplot()
    xs = np.arange(len(configs))
    w = 0.8 / max(1, len(bars))
    colors = _colors(scorers)
    for i, b in enumerate(bars):
        y = np.array(b["y"])
        # whiskers down to the seeds' min and up to their max; a mean of equal accuracies
        # can land an ulp outside them (np.mean([.05] * 3) > .05), and matplotlib refuses
        # a negative whisker: such a whisker is 0
        err = np.clip(np.array([y - np.array(b["lo"]), np.array(b["hi"]) - y]), 0, None)
        cont = ax.bar(xs + (i - (len(bars) - 1) / 2) * w, y, w, yerr=err, capsize=2,
                      label=f"scorer {b['scorer']}", color=colors[b["scorer"]])
        for j, patch in enumerate(cont.patches):
            patch.set_gid(f"curve-{i}-{j}")
    if data["greedy"] is not None:
        ax.axhline(data["greedy"], color="black", linestyle="--", linewidth=1,
                   label="greedy").set_gid("greedy")
    ax.set_xticks(xs, data["configs"], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1)
    ax.set_title("Which scorer helps which algorithm (whiskers: min-max over seeds)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return save(fig, data, out_dir, stem)


# -- (b) coverage vs k with the Large Language Monkeys fit ------------------------------------
def coverage_plot(rows: Sequence[Row], out_dir: str | Path, *, source: str = "candidates",
                  knobs: Sequence[str] = (), stem: str = "coverage") -> dict[str, Any]:
    """Coverage (mean unbiased pass@k, see reports.analysis.passk) per curve as points, with the
    fitted c(k) = exp(a k^b) as a line; a curve whose fit fails keeps its points and the
    reason."""
    data = _framed(rows, "coverage", source=source)
    labeler = curve_labeler(rows, knobs)
    algos: dict[str, set[str]] = {}
    for r in rows:
        algos.setdefault(labeler(r), set()).add(str(r["algo"]))
    covs = [(level, cov) for level, frows in facets(rows)
            for cov in coverage_by_curve(frows, source=source, knobs=knobs, label=labeler)]
    fig, axes = _panels(data, "Coverage vs samples, fit c(k) = exp(a·k^b)")
    colors = _colors([c.label for _, c in covs])
    curves = []
    for i, (level, cov) in enumerate(covs):
        # a search's candidates are independent draws only where it samples them apart
        # (best_of_n, rpc); beam's or a particle filter's share prefixes and resampling
        independent = source != "candidates" or algos.get(cov.label, set()) <= INDEPENDENT
        name = cov.label if independent else f"{cov.label} [not independent draws]"
        entry: dict[str, Any] = {"label": cov.label, "difficulty": level, "x": list(cov.ks),
                                 "y": list(cov.coverage), "problems": cov.problems,
                                 "independent": independent,
                                 "fit": None, "fit_error": None, "fit_x": [], "fit_y": [],
                                 "legend": name}
        ax = _axis(axes, data, entry)
        try:
            fit = fit_exp_power_law(cov.ks, cov.coverage)
        except ValueError as err:
            entry["fit_error"] = str(err)
        else:
            fx = np.geomspace(1, max(cov.ks), 64)
            entry.update(fit={"a": fit.a, "b": fit.b, "rmse_log": fit.rmse_log},
                         fit_x=fx.tolist(), fit_y=fit.predict(fx).tolist(),
                         legend=f"{name}: {fit.describe()} (a={fit.a:.3g}, b={fit.b:.3g})")
            (fl,) = ax.plot(entry["fit_x"], entry["fit_y"], color=colors[cov.label], ls="--")
            fl.set_gid(f"fit-{i}")
        (line,) = ax.plot(entry["x"], entry["y"], marker="o", ls="none", label=entry["legend"],
                          color=colors[cov.label])
        line.set_gid(f"curve-{i}")
        curves.append(entry)
    _dress(axes, "k (samples)", "coverage (pass@k)", base=2, legend=7)
    return save(fig, {**data, "curves": curves}, out_dir, stem)


# -- (c) tokens to solve ----------------------------------------------------------------------
def tokens_to_solve(rows: Sequence[Row], out_dir: str | Path, *, knobs: Sequence[str] = (),
                    stem: str = "tokens_to_solve") -> dict[str, Any]:
    """Per curve the distribution of generated tokens over solved runs, drawn as a step
    curve: y(t) = (solved runs that used <= t tokens) / (all runs of the curve), which ends at
    the curve's accuracy. Solved runs without a positive token count are counted in
    "missing" and left off x."""
    data = _framed(rows, "tokens_to_solve")
    fig, axes = _panels(data, "Tokens to solve")
    label_of = curve_labeler(rows, knobs)
    groups = [(level, label, crows) for level, frows in facets(rows)
              for label, crows in group(frows, label_of).items()]
    colors = _colors([str(label) for _, label, _ in groups])
    curves = []
    for i, (level, label, crows) in enumerate(groups):
        solved = [usage(r, "generated_tokens") for r in crows if r["correct"]]
        xs = sorted(t for t in solved if t is not None and t > 0)
        ys = [(j + 1) / len(crows) for j in range(len(xs))]
        curves.append({"label": label, "difficulty": level, "x": xs, "y": ys,
                       "rows": len(crows), "solved": len(solved),
                       "missing": len(solved) - len(xs),
                       "median": float(np.median(xs)) if xs else None})
        if xs:
            (line,) = _axis(axes, data, curves[-1]).step(xs, ys, where="post", label=str(label),
                                                         color=colors[str(label)])
            line.set_gid(f"curve-{i}")
    _dress(axes, "generated tokens of a solved run", "share of runs solved within x tokens")
    return save(fig, {**data, "curves": curves}, out_dir, stem)


def make_all(rows: Sequence[Row], out_dir: str | Path, *, x: str = "generated_tokens",
             band: str = "problems", knobs: Sequence[str] = (), source: str = "candidates"
             ) -> dict[str, dict[str, Any]]:
    return {"accuracy_vs_compute": accuracy_vs_compute(rows, out_dir, x=x, band=band,
                                                       knobs=knobs),
            "coverage": coverage_plot(rows, out_dir, source=source, knobs=knobs),
            "tokens_to_solve": tokens_to_solve(rows, out_dir, knobs=knobs)}


def main(argv: Sequence[str] | None = None) -> None:
    args = parse("python -m reports.figures.plots", __doc__, {
        "runs": dict(nargs="+", help="JSONL files written by reports.eval"),
        "--out": dict(required=True, help="directory for the PNG/SVG/JSON files"),
        "--x": dict(default="generated_tokens", choices=X_METRICS),
        "--band": dict(default="problems", choices=BANDS),
        "--source": dict(default="candidates", choices=SOURCES,
                         help="coverage samples: each row's candidates, or each row"),
        "--knobs": dict(default="", help="comma-separated knobs that split curves"),
    }, argv)
    rows = read_rows(args.runs)
    if not rows:
        raise SystemExit(f"no rows in {', '.join(args.runs)}")
    knobs = [k for k in args.knobs.split(",") if k]
    made = make_all(rows, args.out, x=args.x, band=args.band, knobs=knobs, source=args.source)
    for name, data in made.items():
        print(f"{name}: {len(data['curves'])} curves ({_source(data)}"
              + (f", difficulties {data['difficulties']}" if data['difficulties'] else "")
              + f") -> {data['files']['png']}")
        for c in data["curves"]:
            if name == "coverage":
                level = f"difficulty {c['difficulty']}: " if data["difficulties"] else ""
                print(f"  {level}{c['legend']}" + (f"  [no fit: {c['fit_error']}]"
                                                   if c["fit_error"] else ""))


if __name__ == "__main__":
    main()
