"""The reference variants as knobs, each against a small case worked out by hand.

particle_filter resample_finished (the authors' `--resample-inactive`, its_hub), particle
Gibbs's reference draw by softmax(logit(last reward)) and its last-pass answer pool (its_hub),
RPC's Weibull fit with the authors' bounds and more starting points.
"""

from __future__ import annotations

import math
import random
import warnings

import numpy as np
import pytest

import search
import search.algos.particle_gibbs as pg_module
from search import resample
from search.algos import _smc
from search.algos._stepwise import Sampler
from search.budget import Meter
from search.engines.fake import ScriptedEngine, ScriptedScorer, path_of
from search.types import Problem
from search.weibull import fit_weibull_mixture, prune_low, weibull_nll

PROBLEM = Problem(prompt="toy", id="toy")

# -- particle filter: finished particles in the resampling pool --------------------------------
# the root's children: an early finisher F (reward 0.9: odds 9) and a partial step A (reward
# 0.5: odds 1), each with probability 1/2; A always ends "The answer is 2." (reward 0.5)
EARLY = {(): [("The answer is 1.", 0.5), ("a ", 0.5)], ("a ",): [("The answer is 2.", 1.0)]}
REWARD = {"The answer is 1.": 0.9, "a ": 0.5, "The answer is 2.": 0.5}


def two_particles(seed: int, resample_finished: bool) -> list[str]:
    engine = ScriptedEngine(lambda p: EARLY.get(p, []))
    plan = _smc.SweepPlan(n=2, draw=resample.multinomial, ess_threshold=1.0, tau=1.0, max_depth=5,
                          resample_finished=resample_finished)
    swarm = _smc.sweep(PROBLEM, engine, ScriptedScorer(lambda p: REWARD[p[-1]]), Meter(),
                       random.Random(seed), Sampler(), engine.root(PROBLEM), plan)
    assert all(node.finished for node in swarm.nodes)
    return [node.text for node in swarm.nodes]


@pytest.mark.parametrize("resample_finished, expected", [(False, 0.5), (True, 0.7)])
def test_finished_particles_in_the_pool_change_the_answer_mix_as_computed_by_hand(
        resample_finished, expected):
    """Share of the two slots ending in F. The first round samples FF, FA, AF or AA (1/4 each).
    Frozen finishers: F keeps its slot and A goes on alone, so the share is 1/2 on average.
    In the pool: FF and AA have equal weights (no resampling), while FA resamples both slots
    from weights 9/10 and 1/10, so the share is 1/4 * 1 + 1/2 * 0.9 + 1/4 * 0 = 0.7."""
    shares = [two_particles(seed, resample_finished).count("The answer is 1.") / 2
              for seed in range(400)]
    assert np.mean(shares) == pytest.approx(expected, abs=0.06)  # SE ~0.02


def test_a_copied_finisher_is_never_extended():
    engine = ScriptedEngine(lambda p: EARLY.get(p, []))
    plan = _smc.SweepPlan(n=8, draw=resample.systematic, ess_threshold=1.0, tau=1.0, max_depth=5,
                          resample_finished=True)
    swarm = _smc.sweep(PROBLEM, engine, ScriptedScorer(lambda p: REWARD[p[-1]]), Meter(),
                       random.Random(3), Sampler(), engine.root(PROBLEM), plan)
    root = swarm.nodes[0].root
    finishers = [c for c in root.children if c.finished]
    assert finishers and all(not c.children for c in finishers)
    # systematic resampling after round 1: F's slots get floor/ceil of 8 * 9f / (9f + a)
    f = len(finishers)
    a = len(root.children) - f
    copies = sum(node.text == "The answer is 1." for node in swarm.nodes)
    share = 8 * 9 * f / (9 * f + a)
    assert math.floor(share) <= copies <= math.ceil(share)


def test_resample_finished_reaches_the_particle_filter():
    engine = ScriptedEngine(lambda p: EARLY.get(p, []))
    res = search.solve(PROBLEM, "particle_filter", engine=engine,
                       scorer=ScriptedScorer(lambda p: REWARD[p[-1]]), n=8, seed=0,
                       resample_finished=True)
    assert res.knobs["resample_finished"] is True


# -- particle Gibbs: the reference draw and the answer pool ----------------------------------
def finished_swarm():
    """Two finished particles X (steps 0.99 then 0.6) and Y (0.5 then 0.8) and a live one."""
    tree = {(): [("x ", 1), ("y ", 1), ("z ", 1)], ("x ",): [("The answer is 1.", 1)],
            ("y ",): [("The answer is 2.", 1)], ("z ",): [("w ", 1)]}
    engine = ScriptedEngine(lambda p: tree.get(p, []))
    root = engine.root(PROBLEM)
    kids = {path_of(c)[0]: c for c in engine.expand([root], 30, seed=1)[0]}
    x, y = (engine.expand([kids[s]], 1, seed=0)[0][0] for s in ("x ", "y "))
    x.scores.reward, y.scores.reward = 0.6, 0.8
    # accumulated log-weights: logit(.99) + logit(.6) = 5.0 and logit(.5) + logit(.8) = 1.39
    lw = [math.log(99) + math.log(1.5), math.log(1) + math.log(4), 0.0]
    return _smc.Swarm([x, y, kids["z "]], lw), x, y


def test_reference_weights_by_hand():
    swarm, x, y = finished_swarm()
    by_weight = dict((n.id, w) for n, w in _smc.reference_weights(swarm, "weight"))
    assert by_weight[x.id] == pytest.approx(148.5 / (148.5 + 4))  # e^5.0 : e^1.39
    by_reward = dict((n.id, w) for n, w in _smc.reference_weights(swarm, "reward"))
    assert by_reward[x.id] == pytest.approx(1.5 / 5.5)  # odds of the last rewards 1.5 : 4
    hot = dict((n.id, w) for n, w in _smc.reference_weights(swarm, "reward", tau=2.0))
    assert hot[x.id] == pytest.approx(math.sqrt(1.5) / (math.sqrt(1.5) + 2))
    assert len(by_reward) == 2  # the live particle is never a reference
    picks = [_smc.pick_reference(swarm, random.Random(s), "reward") for s in range(2000)]
    draws = [p.id for p in picks if p is not None]
    assert draws.count(x.id) / 2000 == pytest.approx(1.5 / 5.5, abs=0.03)


def spy_passes(monkeypatch):
    passes = []
    real = pg_module.sweep

    def spy(*args, **kwargs):
        swarm = real(*args, **kwargs)
        passes.append(swarm)
        return swarm

    monkeypatch.setattr(pg_module, "sweep", spy)
    return passes


CONTRACT = {(): [("l1 ", 0.6), ("r1 ", 0.3), ("m1 ", 0.1)],
            ("l1 ",): [("l2 ", 0.9), ("r2 ", 0.1)], ("r1 ",): [("r2 ", 0.8), ("l2 ", 0.2)],
            ("m1 ",): [("l2 ", 1.0)]}


def contract_children(path):
    if path in CONTRACT:
        return CONTRACT[path]
    return [("The answer is 7." if path == ("r1 ", "r2 ") else "The answer is 3.", 1.0)]


def contract_value(path):
    return 1.0 if path == ("r1 ", "r2 ", "The answer is 7.")[:len(path)] else 0.2


@pytest.mark.parametrize("pool", ["all", "last"])
def test_particle_gibbs_answer_pool(monkeypatch, pool):
    passes = spy_passes(monkeypatch)
    res = search.solve(PROBLEM, "particle_gibbs", engine=ScriptedEngine(contract_children),
                       scorer=ScriptedScorer(contract_value), n=4, iterations=3, seed=2,
                       pool=pool, reference="reward")
    assert len(passes) == 3 and res.knobs["pool"] == pool and res.knobs["reference"] == "reward"
    ids = [{n.id for n in swarm.nodes if n.finished} for swarm in passes]
    want = set().union(*ids) if pool == "all" else ids[-1]
    assert {c.node_id for c in res.candidates} == want


def test_particle_gibbs_draws_its_reference_by_the_named_rule(monkeypatch):
    asked = []
    real = pg_module.pick_reference

    def spy(swarm, rng, by="weight", tau=1.0):
        asked.append((by, tau))
        return real(swarm, rng, by, tau)

    monkeypatch.setattr(pg_module, "pick_reference", spy)
    search.solve(PROBLEM, "particle_gibbs", engine=ScriptedEngine(contract_children),
                 scorer=ScriptedScorer(contract_value), n=4, iterations=3, seed=0,
                 reference="reward", tau=0.5)
    assert asked == [("reward", 0.5)] * 3
    with pytest.raises(ValueError, match="reference"):
        search.solve(PROBLEM, "particle_gibbs", engine=ScriptedEngine(contract_children),
                     scorer=ScriptedScorer(contract_value), reference="best")


# -- RPC: the Weibull fit's bounds and starting points ------------------------------------------
def nll(mix, x):
    x = np.asarray(x, dtype=float)
    s = x.max()
    theta = np.array([mix.weight, mix.k_hi, mix.lam_hi / s, mix.k_lo, mix.lam_lo / s])
    with np.errstate(all="ignore"):
        return weibull_nll(theta, x / s)[0]


def test_authors_bounds_let_a_tight_cluster_take_a_shape_above_the_cap():
    # four probabilities within 3e-4 of 0.9: a Weibull that tight has a shape in the thousands
    x = [0.9, 0.9001, 0.9002, 0.9003, 0.5, 0.4, 0.45, 0.3]
    ours = fit_weibull_mixture(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = fit_weibull_mixture(x, bounds="authors")
    assert ours.k_hi == pytest.approx(100.0)  # held at the project's cap
    assert theirs.k_hi > 100.0 and nll(theirs, x) < nll(ours, x)


def test_more_starts_find_the_better_optimum_inside_the_bounds():
    # ten path probabilities where the 2-start fit stops at a worse optimum
    x = [0.779, 0.933, 0.65, 0.932, 0.709, 0.748, 0.448, 0.323, 0.365, 0.208]
    fits = {s: fit_weibull_mixture(x, starts=s) for s in (1, 2, 4, 12)}
    values = [nll(fits[s], x) for s in (1, 2, 4, 12)]
    assert values == sorted(values, reverse=True)  # each start list extends the previous
    assert values[-1] < values[1] - 1.0
    for mix in fits.values():  # inside the project's bounds
        assert 0.2 <= mix.weight <= 0.8 and max(mix.k_hi, mix.k_lo) <= 100.0


def test_fit_knobs_are_checked_and_reach_rpc():
    with pytest.raises(ValueError, match="bounds"):
        prune_low([0.1, 0.2], bounds="paper")
    with pytest.raises(ValueError, match="starts"):
        prune_low([0.1, 0.2], starts=0)
    tree = {(): [("a ", 0.5), ("b ", 0.5)], ("a ",): [("The answer is 1.", 1.0)],
            ("b ",): [("The answer is 2.", 1.0)]}
    res = search.solve(Problem(prompt="q", id="q", answer="1"), "rpc",
                       engine=ScriptedEngine(lambda p: tree.get(p, [])), n=4,
                       fit_bounds="authors", fit_starts=6)
    assert (res.knobs["fit_bounds"], res.knobs["fit_starts"]) == ("authors", 6)
