"""Particle filtering over reasoning steps, weighted by a process reward model.

Puri et al. 2025, "A Probabilistic Inference Approach to Inference-Time Scaling of LLMs using
Particle-Based Monte Carlo Methods" (arXiv:2502.01618): treat the PRM as the likelihood of
"this partial solution is right" and track that posterior with N particles, so the budget
flows to promising prefixes without discarding the others outright (as beam search does).

    particles <- N copies of the root, equal weights
    repeat until every particle finished, depth limit, or budget:
        every live particle samples one next step (one engine batch)
        log w_i += logit(PRM(step_i)) / tau                 (softmax weights, temperature tau)
        finished particles are never extended; by default they freeze (never resampled,
            weight kept); resample_finished=True puts them in the pool, re-weighed each
            round by their last step (the authors' released script and its_hub)
        if ESS(pool weights) < ess_threshold * #pool: resample the pool
            (multinomial or systematic), each slot taking the pool's mean weight
    return select(particles)   (best path score by default, as the paper's argmax; the path
                                score aggregates step rewards by the scorer's own rule
                                unless agg says otherwise)

Rounds (knob `rounds`, default 1: one proposal per live particle a step, as the paper runs
it): a step's proposals are drawn in rounds of L // rounds particles (L live), and the L
live slots are resampled from the proposals drawn (_smc.propose_in_rounds). A step stops
early once a round's worth of proposals reach the bar (the best newest-step reward among the
particles) and none finished, banking the proposals it did not draw; a step where no
proposal reaches the bar (every particle's next step fell) draws further rounds from the
same particles, paid by the bank. So the filter never draws more than L proposals a step on
the whole, and spends them on the step where it is failing. The rule is beam search's (its
docstring gives the references: Snell et al.'s compute spent where the problem is hard,
Aggarwal et al. 2023's adaptive sampling); drawing several proposals per particle and
resampling N of them is the multiple-proposal particle filter (Doucet & Johansen 2009, "A
Tutorial on Particle Filtering and Smoothing", sec. 4.2's auxiliary/multiple proposals).

The weights, ESS and both resampling schemes are plain functions in search/algos/_smc.py.
The paper's weights (softmax of logit(r) / tau at each step) and its resampling law are the
references'; which finished-particle policy is the default is decided by measurement on the
demo grid (README, "Reference variants").
"""

from __future__ import annotations

from search.algos import Run
from search.algos._smc import SweepPlan, sweep
from search.algos._stepwise import SAMPLER, Sampler
from search.engines.base import Engine
from search.fit import Width
from search.knobs import Rule, above, at_least, rules, within
from search.resample import resampler
from search.scoring import Scorer
from search.select import DEFAULT
from search.session import Session
from search.types import Outcome, Problem


@rules(at_least(1, "n", "rounds"), above(0, "tau"), within(0, 1, "ess_threshold"),
       Rule(("rounds", "resample_finished"), lambda r, f: r == 1 or not f,
            "rounds > 1 resamples the live particles only (resample_finished=False)"),
       scores_as_it_goes=True,
       width=Width(("n",)))
def particle_filter(problem: Problem, engine: Engine, scorer: Scorer, session: Session, *,
                    seed: int = 0, n: int = 16, tau: float = 1.0, resample: str = "multinomial",
                    ess_threshold: float = 1.0, resample_finished: bool = False,
                    rounds: int = 1, max_depth: int = 40, agg: str | None = None,
                    select: str = DEFAULT, sampler: Sampler = SAMPLER) -> Outcome:
    run = Run.begin(problem, engine, scorer, session, seed=seed, agg=agg, select=select,
                    sampler=sampler)
    plan = SweepPlan(n, resampler(resample), ess_threshold, tau, max_depth, resample_finished,
                     rounds)
    swarm = sweep(run.problem, run.engine, run.scorer, run.meter, run.rng, run.sampler,
                  run.root, plan)
    # resampled copies share a node: each path is one candidate
    leaves = [node for node in {node.id: node for node in swarm.nodes}.values()
              if node is not run.root]
    return run.finish(leaves, max_depth=max_depth)
