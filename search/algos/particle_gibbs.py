"""Particle Gibbs: repeated particle filtering, each pass conditioned on a reference path.

Puri et al. 2025, "A Probabilistic Inference Approach to Inference-Time Scaling of LLMs using
Particle-Based Monte Carlo Methods" (arXiv:2502.01618), Sec. on particle Gibbs: the first
pass is a plain particle filter; every later pass is conditional SMC, in which one slot
replays the reference particle, which is never resampled away, while the other N-1 slots
sample afresh and may resample onto the reference's prefixes. The next reference is drawn
from the pass's finished particles in proportion to their weights, so good solutions
persist and seed further exploration.

    ref <- none
    for it = 1..iterations (or until the budget ends):
        particles <- particle filter over N slots, slot 0 replaying ref (if any)
        ref <- a finished particle drawn with probability ~ its weight (reference="weight")
               or ~ softmax(logit(its last step's reward) / tau) (reference="reward": the
               authors' code and its_hub)
    return select(every finished particle of every pass)    (pool="all")
           select(the last pass's particles)               (pool="last": its_hub; the
                                                            last pass that finished one)

resample_finished is particle_filter's knob (the authors' run script sets it, its_hub always
resamples finished particles). The reference's steps are never re-sampled or re-scored
(their PRM scores are cached on the nodes) and stay in the KV cache between passes. A chosen
reference records the pass after which it was drawn (ParticleMark.reference).
"""

from __future__ import annotations

from search.algos import Run
from search.algos._smc import (
    REFERENCE_DRAWS,
    ParticleMark,
    SweepPlan,
    pick_reference,
    sweep,
)
from search.algos._stepwise import SAMPLER, Sampler
from search.engines.base import Engine
from search.fit import Width
from search.knobs import above, at_least, one_of, rules, within
from search.resample import resampler
from search.scoring import Scorer
from search.select import DEFAULT
from search.session import Session
from search.types import Node, Outcome, Problem

POOLS = ("all", "last")  # the answers: every pass's particles, or the last pass's


@rules(at_least(2, "n"), at_least(1, "iterations"), above(0, "tau"),
       within(0, 1, "ess_threshold"), one_of("reference", REFERENCE_DRAWS), one_of("pool", POOLS),
       scores_as_it_goes=True,
       width=Width(("n",), floor=2))
def particle_gibbs(problem: Problem, engine: Engine, scorer: Scorer, session: Session, *,
                   seed: int = 0, n: int = 4, iterations: int = 4, tau: float = 1.0,
                   resample: str = "multinomial", ess_threshold: float = 1.0,
                   resample_finished: bool = False, reference: str = "weight",
                   pool: str = "all", max_depth: int = 40, agg: str | None = None,
                   select: str = DEFAULT,
                   sampler: Sampler = SAMPLER) -> Outcome:
    run = Run.begin(problem, engine, scorer, session, seed=seed, agg=agg, select=select,
                    sampler=sampler)
    plan = SweepPlan(n, resampler(resample), ess_threshold, tau, max_depth, resample_finished)
    path: list[Node] = []  # the reference's nodes, depth 1 to its finished leaf
    seen: dict[int, Node] = {}  # every pass's particles; a kept reference counts once
    for it in range(iterations):
        if run.meter.exhausted():
            break
        swarm = sweep(run.problem, run.engine, run.scorer, run.meter, run.rng, run.sampler,
                      run.root, plan, reference=path)
        found = {node.id: node for node in swarm.nodes if node is not run.root}
        if pool == "all":
            seen.update(found)
        elif not seen or any(node.finished for node in found.values()):
            seen = found  # the last pass that finished a particle (the budget may cut one)
        ref = pick_reference(swarm, run.rng, reference, tau)
        if ref is None:  # nothing finished (budget or depth): no reference to condition on
            break
        ref.scores.of(ParticleMark).reference = it
        path = ref.path()[1:]
    done = [node for node in seen.values() if node.finished]
    leaves = done or list(seen.values())
    return run.finish(leaves, max_depth=max_depth)
