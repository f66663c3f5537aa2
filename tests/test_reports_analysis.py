"""reports analyses over eval rows: pass@k, scaling fits, plots, fLaws, compute-optimal table.

Every expected value comes from brute force, a plain loop written here, or a hand computation
shown in the comments; rows are synthetic (no model)."""

from __future__ import annotations

import itertools
import json
import math
import random
import xml.etree.ElementTree as ET
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from reports.analysis import passk, rows, scaling
from reports.figures import plots
from reports.studies import flaws
from reports.studies.flaws import Rates


def row(pid, algo, seed, correct, *, width=None, tokens=100, knobs=None, cands=(), key=None,
        flops=None, scorer_calls=0, dataset="synthetic"):
    """A schema-1 row; cands: (answer, score, finished, correct, verified) tuples."""
    knobs = dict(knobs if knobs is not None else ({"n": width} if width else {}))
    return {"schema": 1, "key": key or f"{pid}|{algo}|{json.dumps(knobs)}|{width}|{seed}",
            "dataset": dataset, "problem_id": pid, "difficulty": None, "model": "m",
            "scorer": "s", "algo": algo, "knobs": knobs,
            "budget": {"width": width, "tokens": None}, "seed": seed, "answer": "1",
            "gold": "1", "correct": correct, "status": "ok", "error": None,
            "usage": {"generated_tokens": tokens, "prefill_tokens": 10, "forward_passes": 1,
                      "scorer_calls": scorer_calls, "scorer_tokens": 0,
                      "flops": flops if flops is not None else tokens * 1e6, "seconds": 0.1},
            "candidates": [{"answer": a, "score": s, "finished": f, "correct": c,
                            "verified": v} for a, s, f, c, v in cands],
            "time": 0.0}


def write(path: Path, rs) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rs), encoding="utf-8")
    return path


# -- rows ------------------------------------------------------------------------------------
def test_read_rows_skips_a_cut_last_line_and_keeps_the_last_rerun(tmp_path):
    a, b, b2 = row("p1", "greedy", 0, True), row("p2", "greedy", 0, False), \
        row("p2", "greedy", 0, True)
    p = tmp_path / "runs.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in (a, b, b2)) + "\n" + json.dumps(a)[:40])
    got = rows.read_rows(p)
    assert [(r["problem_id"], r["correct"]) for r in got] == [("p1", True), ("p2", True)]
    assert len(rows.read_rows(p, latest=False)) == 3
    p.write_text(json.dumps(a) + "\n{broken\n" + json.dumps(b) + "\n")
    with pytest.raises(ValueError, match="runs.jsonl:2"):
        rows.read_rows(p)
    p.write_text(json.dumps({**a, "schema": 2}) + "\n")
    with pytest.raises(ValueError, match="schema"):
        rows.read_rows(p)


# -- pass@k ----------------------------------------------------------------------------------
def brute_pass(n: int, c: int, k: int) -> float:
    """Share of all k-subsets of n samples (the first c correct) holding a correct one."""
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(i < c for i in s) for s in subsets) / len(subsets)


def test_pass_at_k_matches_enumeration_of_all_subsets():
    for n in range(1, 8):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert passk.pass_at_k(n, c, k) == pytest.approx(brute_pass(n, c, k), abs=1e-12)


def test_pass_at_k_is_stable_for_large_n():
    n, c, k = 2000, 3, 100  # exact rational reference via binomials
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    assert passk.pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-12)
    with pytest.raises(ValueError):
        passk.pass_at_k(4, 5, 1)


def test_coverage_pools_seeds_of_the_widest_budget():
    rng = random.Random(3)
    rs, want = [], {}
    for pid in ("a", "b", "c"):
        flags = []
        for seed in (0, 1):
            wide = [rng.random() < 0.3 for _ in range(4)]
            flags += wide
            rs.append(row(pid, "best_of_n", seed, any(wide), width=4,
                          cands=[("x", 0.5, True, f, None) for f in wide]))
            rs.append(row(pid, "best_of_n", seed, True, width=2,  # ignored: smaller budget
                          cands=[("x", 0.5, True, True, None)] * 2))
        want[pid] = flags
    counts = passk.problem_counts(rs)
    assert counts == {p: (8, sum(f)) for p, f in want.items()}
    cov = passk.coverage_curve(counts)
    assert cov.ks == (1, 2, 4, 8)
    for k, got in zip(cov.ks, cov.coverage):
        assert got == pytest.approx(np.mean([brute_pass(8, sum(f), k) for f in want.values()]))
    by_rows = passk.problem_counts(rs, source="rows")  # one sample per row: 4 rows a problem
    assert by_rows == {p: (4, sum(r["correct"] for r in rs if r["problem_id"] == p))
                       for p in want}


# -- scaling fits ----------------------------------------------------------------------------
def test_exp_power_law_recovers_known_parameters():
    ks = 2.0 ** np.arange(0, 11)
    a, b = -2.0, -0.4
    clean = np.exp(a * ks ** b)
    fit = scaling.fit_exp_power_law(ks, clean)
    assert (fit.a, fit.b) == (pytest.approx(a, rel=1e-6), pytest.approx(b, rel=1e-6))
    assert fit.predict([1.0])[0] == pytest.approx(math.exp(a))
    noise = np.random.default_rng(0).normal(0, 0.02, ks.size)  # 2% multiplicative noise
    fit = scaling.fit_exp_power_law(ks, np.minimum(clean * np.exp(noise), 1.0))
    assert fit.a == pytest.approx(a, rel=0.05)
    assert fit.b == pytest.approx(b, rel=0.05)
    with pytest.raises(ValueError, match="two points"):
        scaling.fit_exp_power_law([1, 2, 4], [0.5, 1.0, 1.0])


def test_power_law_recovers_known_parameters():
    x = np.geomspace(100, 1e6, 9)
    fit = scaling.fit_power_law(x, 3.0 * x ** -0.3)
    assert (fit.scale, fit.exponent) == (pytest.approx(3.0), pytest.approx(-0.3))
    noisy = 3.0 * x ** -0.3 * np.exp(np.random.default_rng(1).normal(0, 0.01, x.size))
    assert scaling.fit_power_law(x, noisy).exponent == pytest.approx(-0.3, abs=0.02)


# -- plots -----------------------------------------------------------------------------------
def sweep(seed: int = 0) -> list[dict]:
    """2 algorithms x 3 widths x 3 seeds x 5 problems, random correctness and costs."""
    rng = random.Random(seed)
    out = []
    for algo, skill in (("best_of_n", 0.4), ("beam", 0.6)):
        for width in (2, 4, 8):
            for s in range(3):
                for p in range(5):
                    flags = [rng.random() < skill * width / 8 for _ in range(width)]
                    out.append(row(f"p{p}", algo, s, rng.random() < skill * width / 8,
                                   width=width, tokens=rng.randint(50, 150) * width,
                                   scorer_calls=width * rng.randint(1, 3),
                                   cands=[("x", 0.5, True, f, None) for f in flags]))
    return out


def check_files(data: dict) -> ET.Element:
    png, svg = Path(data["files"]["png"]), Path(data["files"]["svg"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    tree = ET.parse(svg).getroot()
    texts = " ".join("".join(e.itertext()) for e in tree.iter() if e.tag.endswith("text"))
    ids = {e.get("id") for e in tree.iter()}
    for i, c in enumerate(data["curves"]):
        if c["x"]:
            assert f"curve-{i}" in ids
            assert c["label"] in texts
    assert json.loads(Path(data["files"]["json"]).read_text()) == data
    return tree


@pytest.mark.parametrize("x", ["generated_tokens", "scorer_calls"])
def test_accuracy_vs_compute_plots_the_seed_means(tmp_path, x):
    rs = sweep()
    data = plots.accuracy_vs_compute(rs, tmp_path, x=x, band="minmax")
    check_files(data)
    assert [c["label"] for c in data["curves"]] == ["best_of_n", "beam"]
    for c in data["curves"]:
        assert c["x"] == sorted(c["x"])
        for w in (2, 4, 8):
            i = c["budget"].index(f"w={w}")
            accs = [np.mean([r["correct"] for r in rs if r["algo"] == c["label"]
                             and r["budget"]["width"] == w and r["seed"] == s])
                    for s in range(3)]
            costs = [np.mean([r["usage"][x] for r in rs if r["algo"] == c["label"]
                              and r["budget"]["width"] == w and r["seed"] == s])
                     for s in range(3)]
            assert c["y"][i] == pytest.approx(np.mean(accs))
            assert (c["lo"][i], c["hi"][i]) == (pytest.approx(min(accs)),
                                                pytest.approx(max(accs)))
            assert c["x"][i] == pytest.approx(np.mean(costs))


def test_accuracy_vs_compute_bands_are_problem_bootstrap_intervals_labelled_by_width(tmp_path):
    """The default band: a 95% bootstrap interval over problems, which holds the point and
    stays within the problems' own accuracies; every point carries its width as text."""
    rs = sweep()
    data = plots.accuracy_vs_compute(rs, tmp_path)
    tree = check_files(data)
    texts = " ".join("".join(e.itertext()) for e in tree.iter() if e.tag.endswith("text"))
    assert data["band"] == "problems" and "bootstrap interval over problems" in texts
    for c in data["curves"]:
        for i, budget in enumerate(c["budget"]):
            assert budget in texts
            w = int(budget.removeprefix("w="))
            per_problem = [np.mean([r["correct"] for r in rs if r["algo"] == c["label"]
                                    and r["budget"]["width"] == w and r["problem_id"] == p])
                           for p in {r["problem_id"] for r in rs}]
            assert min(per_problem) <= c["lo"][i] <= c["y"][i] <= c["hi"][i] <= \
                max(per_problem)
            if min(per_problem) < max(per_problem):
                assert c["lo"][i] < c["hi"][i]


def test_coverage_plot_has_points_and_fit(tmp_path):
    rs = sweep()
    data = plots.coverage_plot(rs, tmp_path)
    check_files(data)
    for c in data["curves"]:
        flags = {p: [cd["correct"] for r in rs if r["algo"] == c["label"] and
                     r["problem_id"] == p and r["budget"]["width"] == 8
                     for cd in r["candidates"]] for p in (f"p{i}" for i in range(5))}
        # 3 seeds x 8 candidates = 24 samples; exact 1 - C(24 - c, k) / C(24, k)
        want = [np.mean([1 - math.comb(24 - sum(f), k) / math.comb(24, k)
                         for f in flags.values()]) for k in c["x"]]
        assert c["x"] == [1, 2, 4, 8, 16, 24]
        assert c["y"] == pytest.approx(want)
        fit = c["fit"]
        assert fit is not None and fit["a"] < 0 and fit["b"] < 0
        assert f"a={fit['a']:.3g}" in c["legend"]
        assert c["fit_y"][0] == pytest.approx(math.exp(fit["a"]))


def test_scorer_effect_draws_seeds_of_equal_accuracy(tmp_path):
    """Three seeds each right on 1 of 20 problems: the mean, 0.05000000000000001 in floats,
    lies an ulp above every seed's 0.05 (its whisker's top); the figure is drawn (whiskers
    clipped at 0, matplotlib refuses negative ones: `make demo` on 20 problems failed so),
    its bars and whiskers as the rows say."""
    rs = [dict(row(f"p{p}", "beam", seed, p == seed, width=4), scorer=scorer)
          for scorer in ("steps", "prm") for seed in range(3) for p in range(20)]
    data = plots.scorer_effect(rs + [dict(row("p0", "greedy", 0, True), scorer=None)], tmp_path)
    assert Path(data["files"]["png"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ids = {e.get("id") for e in ET.parse(data["files"]["svg"]).getroot().iter()}
    assert {"curve-0-0", "curve-1-0", "greedy"} <= ids
    assert data["configs"] == ["beam 4"] and data["greedy"] == 1.0
    for bar in data["bars"]:
        assert (bar["lo"], bar["hi"]) == ([0.05], [0.05])
        assert bar["y"] == [pytest.approx(0.05)]


def test_tokens_to_solve_and_cli(tmp_path):
    rs = sweep()
    data = plots.tokens_to_solve(rs, tmp_path)
    check_files(data)
    for c in data["curves"]:
        mine = [r for r in rs if r["algo"] == c["label"]]
        solved = sorted(r["usage"]["generated_tokens"] for r in mine if r["correct"])
        assert c["x"] == solved
        assert c["y"][-1] == pytest.approx(len(solved) / len(mine))
    path = write(tmp_path / "runs.jsonl", rs)
    plots.main([str(path), "--out", str(tmp_path / "cli"), "--x", "flops"])
    for stem in ("accuracy_vs_compute", "coverage", "tokens_to_solve"):
        for ext in ("png", "svg", "json"):
            assert (tmp_path / "cli" / f"{stem}.{ext}").stat().st_size > 0
    sidecar = json.loads((tmp_path / "cli" / "accuracy_vs_compute.json").read_text())
    assert sidecar["x_metric"] == "flops"


# -- fLaws -----------------------------------------------------------------------------------
def test_flaws_ceiling_and_accuracy_by_hand():
    r = Rates("x", 10, p=0.3, tp=0.3, fp=0.1)
    # ceiling = tp / (tp + fp) = 0.3 / 0.4 = 0.75; q = 0.6
    assert flaws.ceiling(r) == pytest.approx(0.75)
    # k = 2: 0.75 * (1 - 0.6^2) = 0.75 * 0.64 = 0.48
    assert flaws.accuracy(r, 2) == pytest.approx(0.48)
    # a false negative rate p - tp = 0.2; "last" adds P(first k-1 unverified) * 0.2:
    # q = 1 - 0.3 - 0.1 = 0.6 still (tp and fp unchanged), 0.48 + 0.6 * 0.2 = 0.60
    fn = Rates("y", 10, p=0.5, tp=0.3, fp=0.1)
    assert flaws.accuracy(fn, 2, fallback="last") == pytest.approx(0.60)
    assert flaws.accuracy(fn, 2) == pytest.approx(0.48)
    assert flaws.ceiling(Rates("z", 4, p=0.0, tp=0.0, fp=0.0)) == 0.0


def test_optimal_k_by_hand():
    # A: tp 0.5, fp 0 (q 0.5); B: tp 0, fp 0.1 (q 0.9); c = 1, no sample cost.
    # U_A(k) = 1 - 0.5^k, U_B(k) = -(1 - 0.9^k). Sample i adds 0.5^i - 0.1 * 0.9^(i-1):
    # i=1: 0.4, i=2: 0.16, i=3: 0.044, i=4: 0.0625 - 0.0729 < 0, and it stays negative.
    # So k* = 3, mean utility (0.875 - 0.271) / 2 = 0.302.
    rates = [Rates("a", 10, 0.5, 0.5, 0.0), Rates("b", 10, 0.0, 0.0, 0.1)]
    k, curve = flaws.optimal_k(rates, c=1.0, k_max=20)
    assert k == 3
    assert curve[3] == pytest.approx(0.302)
    assert curve[0] == 0.0
    # cheap false positives (c = 0): more samples never hurt -> the largest k
    assert flaws.optimal_k(rates, c=0.0, k_max=20)[0] == 20
    # one problem, sample cost above the gain per sample (0.5 - 0.6 < 0): sample nothing
    assert flaws.optimal_k(rates[:1], c=1.0, cost=0.6, k_max=20)[0] == 0


def test_monte_carlo_agrees_with_analytic():
    rates = [Rates("a", 10, 0.3, 0.3, 0.1), Rates("b", 10, 0.5, 0.3, 0.2),
             Rates("c", 10, 0.05, 0.05, 0.02), Rates("d", 10, 0.2, 0.0, 0.0)]
    for k in (1, 3, 8):
        for fallback in ("abstain", "last"):
            acc, util = flaws.simulate(rates, k=k, trials=20000, seed=k, c=2.0, cost=0.01,
                                       fallback=fallback)
            want = np.mean([flaws.accuracy(r, k, fallback=fallback) for r in rates])
            want_u = np.mean([flaws.utility(r, k, c=2.0, cost=0.01) for r in rates])
            assert acc == pytest.approx(want, abs=0.01)
            assert util == pytest.approx(want_u, abs=0.02)
    assert flaws.simulate(rates, k=3, seed=5) == flaws.simulate(rates, k=3, seed=5)


def test_rates_from_rows_ignore_unknown_verification():
    cands = [("1", 0.9, True, True, True), ("2", 0.8, True, False, True),
             ("3", 0.1, True, False, False), ("1", 0.5, True, True, None)]
    flags = flaws.problem_flags([row("p", "best_of_n", 0, True, width=4, cands=cands)])
    assert flags == {"p": [(True, True), (False, True), (False, False)]}
    r = Rates.of("p", flags["p"])
    assert (r.n, r.p, r.tp, r.fp) == (3, pytest.approx(1 / 3), pytest.approx(1 / 3),
                                      pytest.approx(1 / 3))


def test_fp_aware_selection_by_hand():
    # A: 10 true positives (tp 1, q 0): U_A = 1 in every half. B: 1 false positive and 9
    # rejected wrong samples. Posterior for B's verified answers (Beta(.5,.5)):
    # (0 + .5) / (1 + 1) = .25 with the FP in the deciding half, .5 without; answering needs
    # pi > c / (1 + c) = .5, so B always abstains. Cross-fit halves of 5: B scored on the
    # half with the FP (fp .2, q .8): plain U = -(1 - .8^3) = -.488; on the other half 0.
    # plain = (1 + 1 - .488 + 0) / 4 = .378; FP-aware = (1 + 1 + 0 + 0) / 4 = .5.
    flags = {"A": [(True, True)] * 10, "B": [(False, True)] + [(False, False)] * 9}
    s = flaws.compare_selection(flags, k=3, c=1.0, seed=7)
    assert (s.plain, s.fp_aware, s.answered) == (pytest.approx(0.378), pytest.approx(0.5), 0.5)
    # in-sample (no cross-fit): B has fp .1, q .9: U_B = -(1 - .9^3) = -.271
    s = flaws.compare_selection(flags, k=3, c=1.0, crossfit=False)
    assert (s.plain, s.fp_aware) == (pytest.approx((1 - 0.271) / 2), pytest.approx(0.5))


def test_flaws_plot_and_cli(tmp_path):
    cands_a = [("1", 0.9, True, True, True)] * 3 + [("2", 0.9, True, False, True)]
    cands_b = [("2", 0.9, True, False, True), ("3", 0.2, True, False, False)] * 2
    rs = [row("a", "best_of_n", 0, True, width=4, cands=cands_a),
          row("b", "best_of_n", 0, False, width=4, cands=cands_b)]
    data = flaws.flaws_plot(flaws.problem_flags(rs), tmp_path, k_max=8, trials=500)
    check_files(data)
    # a: tp .75, fp .25 -> ceiling .75; b: tp 0, fp .5 -> 0; mean .375
    assert data["ceiling"] == pytest.approx(0.375)
    analytic = data["curves"][0]
    assert analytic["x"] == list(range(1, 9))
    # k = 1: a: .75 * (1 - 0) = .75 (q_a = 0), b: 0 -> .375
    assert analytic["y"][0] == pytest.approx(0.375)
    path = write(tmp_path / "runs.jsonl", rs + [row("a", "beam", 0, True, width=4)])
    flaws.main([str(path), "--out", str(tmp_path / "cli"), "--k-max", "8", "--cost-fp", "1"])
    assert (tmp_path / "cli" / "flaws_c1.svg").exists()


# -- compute-optimal table -------------------------------------------------------------------
def table_rows() -> list[dict]:
    """5 easy problems (probe scores .9, all candidates agree and are right) and 5 hard ones
    (scores .2, four different answers, one right); 4 seeds. Accuracy per bin by config,
    (correct rows out of 20), tokens per row fixed:
        config            tokens  easy  hard
        best_of_n n=4       400    20    4   (.2)
        best_of_n n=16     1600    20   16   (.8)
        best_of_n n=64     6400    20   18   (.9)
        beam n=4,m=2        800    20   17   (.85)
    """
    acc = {("best_of_n", 4): 4, ("best_of_n", 16): 16, ("best_of_n", 64): 18, ("beam", 4): 17}
    tokens = {("best_of_n", 4): 400, ("best_of_n", 16): 1600, ("best_of_n", 64): 6400,
              ("beam", 4): 800}
    out = []
    for (algo, width), hard_right in acc.items():
        knobs = {"n": width} if algo == "best_of_n" else {"n": width, "m": 2}
        for p in range(10):
            easy = p < 5
            for s in range(4):
                cell = (p - 5) * 4 + s  # 0..19 over the hard problems' rows
                ok = easy or cell < hard_right
                cands = ([("7", 0.9, True, True, None)] * 4 if easy else
                         [(str(i), 0.2, True, i == 0, None) for i in range(4)])
                out.append(row(f"p{p}", algo, s, ok, width=width, knobs=knobs,
                               tokens=tokens[algo, width], cands=cands))
    return out


@pytest.mark.parametrize("signal", ["score", "agreement", "oracle"])
def test_compute_table_picks_the_constructed_optimum(signal):
    from reports.studies import compute_table

    # token_cost 1e-4 (accuracy - 1e-4 * tokens): easy: n=4 .96 beats all; hard: n=4 .16,
    # n=16 .64, n=64 .26, beam .85 - .08 = .77 -> beam.
    table, gains = compute_table.fit(table_rows(), signal=signal, n_bins=2, token_cost=1e-4)
    easy, hard = gains
    assert (table["bins"][0]["algo"], table["bins"][0]["knobs"]) == ("best_of_n", {"n": 4})
    assert (table["bins"][1]["algo"], table["bins"][1]["knobs"]) == ("beam", {"n": 4, "m": 2})
    assert (easy.problems, hard.problems) == (5, 5)
    # easy: best-of-N's cheapest point already matches -> "at most" 400 tokens, gain 1
    assert (easy.match, easy.tokens_to_match, easy.gain) == ("at_most", 400, 1.0)
    # hard: A* = .85 lies halfway (.8 -> .9) between 1600 and 6400 tokens: log-interpolated
    # 1600 * 4^0.5 = 3200 tokens, gain 3200 / 800 = 4; at 800 tokens best-of-N (running max
    # .2 at 400, .8 at 1600) reaches .2 + .6 * log(2) / log(4) = .5.
    assert hard.match == "interpolated"
    assert hard.tokens_to_match == pytest.approx(3200)
    assert hard.gain == pytest.approx(4.0)
    assert hard.bon_accuracy_at_equal_tokens == pytest.approx(0.5)


def test_compute_table_probe_stop_charges_the_probe():
    """--probe-stop with best-of-4 as the probe: the probe's rows are the "probe" config and
    every other config pays the probe's 400 tokens. Easy bin: probe 1.0 at 400 tokens beats
    best-of-4 (1.0 at 800); hard bin (token cost 1e-4): probe .2 - .04 = .16, n=16 .8 - .2 =
    .6, n=64 .9 - .68 = .22, beam .85 - .12 = .73 -> beam, at 800 + 400 tokens; the baseline
    curve keeps best-of-N's own tokens (gain 3200 / 1200)."""
    from reports.studies import compute_table

    table, gains = compute_table.fit(table_rows(), signal="score", n_bins=2, token_cost=1e-4,
                                     probe_width=4, probe_stop=True)
    easy, hard = table["bins"]
    assert (easy["algo"], easy["mean_tokens"], easy["accuracy"]) == ("probe", 400, 1.0)
    assert (hard["algo"], hard["mean_tokens"]) == ("beam", 1200)
    assert gains[1].gain == pytest.approx(3200 / 1200)
    assert table["probe"]["n"] == 4 and table["fit"]["probe_stop"] is True
    with pytest.raises(ValueError, match="probe-width"):
        compute_table.fit(table_rows(), n_bins=2, probe_stop=True)


def test_compute_table_cli_writes_a_loadable_table(tmp_path, capsys):
    from reports.studies import compute_table
    from search.algos.compute_optimal import bin_of, load_table

    path = write(tmp_path / "runs.jsonl", table_rows())
    out = tmp_path / "table.json"
    compute_table.main([str(path), "--out", str(out), "--bins", "2", "--token-cost", "1e-4",
                        "--probe-width", "4"])
    tab = load_table(str(out))
    assert tab["probe"]["n"] == 4 and tab["probe"]["signal"] == "score"
    # difficulties: easy 1 - .9 = .1, hard 1 - .2 = .8 -> the median edge .45
    assert tab["edges"] == [pytest.approx(0.45)]
    assert tab["bins"][bin_of(0.8, tab["edges"])]["algo"] == "beam"
    assert "4.00x" in capsys.readouterr().out


def test_compute_table_refuses_configs_differing_only_in_width():
    from reports.studies import compute_table

    rs = [row("p0", "best_of_n", 0, True, width=4, knobs={}, cands=[("1", .5, True, True,
                                                                       None)]),
          row("p0", "best_of_n", 0, True, width=8, knobs={}, key="other")]
    with pytest.raises(ValueError, match="record the width in knobs"):
        compute_table.fit(rs, n_bins=1)


def test_compute_table_probe_samples_as_its_rows_did():
    """A greedy probe (best-of-1 at temperature 0, the rows' knobs) gives a table whose
    run-time probe is best-of-1 at temperature 0 too, not the default best-of-4 at 0.8."""
    from reports.studies import compute_table
    from search.algos.compute_optimal import load_table

    greedy = {"n": 1, "temperature": 0.0}
    rs = table_rows() + [row(f"p{p}", "best_of_n", s, p < 5, width=1, knobs=greedy, tokens=100,
                             cands=[("7", 1.0 if p < 5 else 0.0, True, p < 5, None)])
                         for p in range(10) for s in range(4)]
    table, _ = compute_table.fit(rs, signal="score", edges=[0.5], probe_width=1,
                                 probe_stop=True, token_cost=1e-4)
    probe = load_table(table)["probe"]
    assert (probe["n"], probe["temperature"], probe["select"]) == (1, 0.0, "score")
    # easy problems: the greedy probe (100 tokens, all right) stands; hard: beam, charged 100
    assert [(b["algo"], b["mean_tokens"]) for b in table["bins"]] == [("probe", 100),
                                                                       ("beam", 900)]


def test_demo_table_names_the_best_at_width_16_with_its_tokens():
    """4 problems: greedy right on 2 (50%); best-of-16 right on 3 at 1,000 tokens, one right
    candidate in each problem's 16 (pass@16 = 100%); particle Gibbs right on all 4 at 4,000
    tokens: it closes 100% of the gap, at 4.0x best-of-16's tokens."""
    from reports.demo import table

    right = [("1", 0.5, True, True, None)] + [("2", 0.5, True, False, None)] * 15
    rs = ([row(f"p{p}", "greedy", 0, p < 2, tokens=100) for p in range(4)]
          + [row(f"p{p}", "best_of_n", 0, p < 3, width=16, tokens=1000, cands=right)
             for p in range(4)]
          + [row(f"p{p}", "particle_gibbs", 0, True, width=16, tokens=4000) for p in range(4)])
    last = table(rs).splitlines()[-1]
    assert last == ("best at width 16: particle_gibbs (s) 100.0% at 4000 tokens, 4.0x "
                    "best-of-16's tokens, closing 100% of the gap from greedy 50.0% to "
                    "pass@16 100.0%")


def test_demo_grids_run_in_the_order_the_demo_has_always_run_them():
    """Under the step checker: greedy once, best-of-N at widths 1-16, the searches (particle
    Gibbs only here), compute_optimal at the largest budget; under the PRM: best-of-N and the
    searches that its table and cost allow."""
    from reports.demo import grids

    algos = ["greedy", "best_of_n", "beam", "particle_gibbs", "compute_optimal"]
    assert list(grids(algos, ["steps", "prm:x"], [4, 16])) == [
        ("steps", ["greedy"], [1]), ("steps", ["best_of_n"], [1, 2, 4, 8, 16]),
        ("steps", ["beam", "particle_gibbs"], [4, 16]), ("steps", ["compute_optimal"], [16]),
        ("prm:x", ["best_of_n"], [1, 2, 4, 8, 16]), ("prm:x", ["beam"], [4, 16])]
    assert list(grids(["beam"], ["prm:x"], [3])) == [("prm:x", ["beam"], [3])]


def test_demo_kernels_prints_what_the_time_outside_the_kernels_can_still_save(tmp_path, capsys):
    """`--kernels` on one greedy run: the demo's own line and the ceiling after it, its
    seconds inside the kernels more than zero and at most the wall."""
    import re

    from reports import demo

    demo.main(["--problems", "1", "--algos", "greedy", "--seeds", "0", "--scorers", "steps",
               "--quiet", "--kernels", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    got = re.search(r"inside the forward's kernels ([\d.]+) s of ([\d.]+) s", out)
    assert got is not None, out
    assert 0 < float(got[1]) <= float(got[2])


def test_demo_on_two_worker_processes_writes_the_rows_of_one_process(tmp_path, capsys):
    """The demo's two grids (greedy, then beam at 2) on one problem, through one pool of two
    worker processes and in this process: the same rows, and the summary says where."""
    import json

    from reports import demo
    from reports.bench.eval import comparable

    def rows(workers: int) -> list[str]:
        out = tmp_path / f"w{workers}"
        assert demo.main(["--problems", "1", "--algos", "greedy,beam", "--budgets", "2",
                          "--seeds", "0", "--scorers", "steps", "--quiet", "--workers",
                          str(workers), "--out", str(out)]) == 0
        lines = (out / "demo.jsonl").read_text().splitlines()
        return sorted(comparable(json.loads(line)) for line in lines)

    here = rows(1)
    assert "concurrency 16 here," in capsys.readouterr().out
    assert rows(2) == here and len(here) == 2
    assert "on each of up to 2 worker processes" in capsys.readouterr().out


def test_compute_table_fit_to_match_takes_the_cheapest_table_reaching_the_reference():
    """Reference best-of-16: (20 + 16) / 40 = .9 at 1,600 tokens. Token cost 0 picks n=4 on
    the easy bin and n=64 (.9) on the hard one: .95 at (400 + 6400) / 2 = 3,400 tokens; from
    1e-5 up to 1e-3 the hard bin takes beam (.85): .925 at (400 + 800) / 2 = 600, the
    cheapest table that still reaches .9 (the smallest such cost is reported); at 2e-3 it
    takes n=4 (.2): .6, below."""
    from reports.studies import compute_table

    table, _, m = compute_table.fit_to_match(table_rows(), algo="best_of_n", width=16,
                                             n_bins=2)
    assert m == pytest.approx({"token_cost": 1e-5, "accuracy": 0.925, "tokens": 600,
                               "reference_accuracy": 0.9, "reference_tokens": 1600})
    assert [b["algo"] for b in table["bins"]] == ["best_of_n", "beam"]
    assert table["fit"]["match"]["width"] == 16
    with pytest.raises(ValueError, match="no beam rows of width 64"):
        compute_table.fit_to_match(table_rows(), algo="beam", width=64, n_bins=2)
    with pytest.raises(ValueError, match="with {'select': 'vote'}"):  # its rows have no select
        compute_table.fit_to_match(table_rows(), algo="best_of_n", width=16, n_bins=2,
                                   knobs={"select": "vote"})
    _, _, by_knob = compute_table.fit_to_match(table_rows(), algo="best_of_n", width=16,
                                               n_bins=2, knobs={"n": 16})
    assert by_knob == m


def test_demo_claims_hold_only_where_every_problem_set_makes_the_same_call():
    """Two sets of 20 problems. Beam at width 4 is right on every problem of both, best-of-4
    on none: "higher" on both sets, so the claim holds. A* at 4 is right everywhere on set A
    and nowhere on set B: higher on A, no call on B, so it does not hold. Tokens: beam 200
    against best-of-4's 400 (0.50x), against best-of-16's 1,600 (0.12x)."""
    from reports.demo import claims

    def part(seed, astar_right):
        ids = [f"arith/d5/s{seed}/{p}" for p in range(20)]
        return ([row(i, "best_of_n", 0, False, width=4, tokens=400) for i in ids]
                + [row(i, "best_of_n", 0, False, width=16, tokens=1600) for i in ids]
                + [row(i, "beam", 0, True, width=4, tokens=200) for i in ids]
                + [row(i, "astar", 0, astar_right, width=4, tokens=300) for i in ids])

    lines = claims({1: part(1, True), 2: part(2, False)}).splitlines()
    beam = [ln for ln in lines if " beam " in ln]
    astar = [ln for ln in lines if " astar " in ln]
    assert len(beam) == len(astar) == 2  # against best-of-N at its width and best-of-16
    assert all(ln.endswith("-> higher") for ln in beam)
    assert "at 0.50x tokens" in beam[0] and "at 0.12x tokens" in beam[1]
    assert all(ln.endswith("-> does not hold on every set") for ln in astar)
    assert "+100.0 (+100.0..+100.0) at 0.75x tokens | +0.0 (+0.0..+0.0)" in astar[0]


def test_coverage_labels_dependent_candidates_and_titles_name_the_data(tmp_path):
    """Beam's candidates share prefixes: its coverage curve says they are not independent
    draws; best_of_n's does not. Titles name the dataset and the problem count (issue 33)."""
    rs = sweep()
    data = plots.coverage_plot(rs, tmp_path)
    by_algo = {c["label"].split()[0]: c for c in data["curves"]}
    assert by_algo["best_of_n"]["independent"] and "[not independent" not in \
        by_algo["best_of_n"]["legend"]
    assert not by_algo["beam"]["independent"]
    assert "[not independent draws]" in by_algo["beam"]["legend"]
    assert (data["datasets"], data["problems"]) == (["synthetic"], 5)
    svg = Path(data["files"]["svg"]).read_text()
    assert "synthetic · 5 problems" in svg
    rows_ = plots.coverage_plot(rs, tmp_path, source="rows", stem="cov_rows")
    assert all(c["independent"] for c in rows_["curves"])  # seeds are independent runs


def test_the_coverage_fit_leaks_no_warning():
    """Two points fit two parameters, so scipy cannot estimate their covariance (its
    OptimizeWarning); that is handled inside the fit, which stands: it goes through both."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fit = scaling.fit_exp_power_law([1, 2], [0.3, 0.5])
    assert fit.a < 0 and fit.b < 0
    assert fit.predict(np.array([1.0, 2.0])) == pytest.approx([0.3, 0.5], rel=1e-4)


def test_paired_difference_does_not_depend_on_the_rows_order():
    """Rows are written in finishing order: the same runs in any order give the same interval
    to the last bit, and two searches right on exactly the same runs differ by exactly 0.
    Hand-made rows: 40 problems x 7 seeds, right where a fixed pattern says."""
    import random as _random

    from reports.analysis.bands import paired_difference

    def rows(salt: int) -> list[dict]:
        return [{"problem_id": f"p{i}", "seed": s, "correct": (i * i + s * salt) % 11 < 5}
                for i in range(40) for s in range(7)]

    a, b = rows(3), rows(4)
    want = paired_difference(a, b)
    right = [sum(r["correct"] for r in rs) for rs in (a, b)]
    assert abs(want[0] - (right[0] - right[1]) / 280) < 1e-12
    for seed in range(5):
        shuffled_a, shuffled_b = a[:], b[:]
        _random.Random(seed).shuffle(shuffled_a)
        _random.Random(seed + 100).shuffle(shuffled_b)
        assert paired_difference(shuffled_a, shuffled_b) == want
    assert paired_difference(a, rows(3)) == (0.0, 0.0, 0.0)
