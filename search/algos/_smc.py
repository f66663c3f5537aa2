"""Sequential Monte Carlo over reasoning steps, for particle_filter and particle_gibbs.

Puri et al. 2025, "A Probabilistic Inference Approach to Inference-Time Scaling of LLMs using
Particle-Based Monte Carlo Methods" (arXiv:2502.01618). The math is in plain functions so
tests can check it by hand; `sweep` is one pass of the (conditional) particle filter, run
by a `SweepPlan` (its fixed settings).

Weights. Every step a particle takes multiplies its weight by exp(phi(r) / tau), where r is
the PRM score of its newest step and phi(r) = log(r / (1 - r)), r clipped to
[1e-7, 1 - 1e-7] (the logit that the authors' reference implementation, its_hub, feeds to
its softmax). Normalised weights are therefore a softmax with temperature tau:
    w_i = exp(phi(r_i)/tau) / sum_j exp(phi(r_j)/tau)      (from equal weights)
ESS = 1 / sum_i w_i^2 over normalised weights: N when uniform, 1 when one particle has all.
Resampling draws N ancestors with E[count_i] = N w_i (both schemes are unbiased):
    multinomial  N independent draws from Categorical(w)      (the paper's choice)
    systematic   u ~ U[0, 1/N); ancestor j is the particle whose CDF interval holds
                 u + j/N, so count_i is floor(N w_i) or ceil(N w_i) (less variance)
Resampling resets the resampled particles' weights to their mean (mass is preserved), and it
runs when ESS < ess_threshold * (number of live particles); ess_threshold = 1 resamples at
every step, as the paper does.

Finished particles are never extended. resample_finished=False (the paper's
`resample_inactive=False`): they are frozen, never resampled (neither copied nor dropped),
their unnormalised log-weight stays what it was when they finished (recorded as
ParticleMark.log_weight), and only the live particles are resampled among themselves.
resample_finished=True (the authors' released run script, `--resample-inactive`, and
its_hub): every slot is in the resampling pool, a finished particle weighed each round by its
final step's reward as the references do (they re-weigh every particle by its last reward
each round), so a finished particle may be copied into live slots (and a copy stays finished)
or dropped; the pass ends when no slot is live.
With a reference path (conditional SMC, for particle Gibbs) slot 0 follows that path step
by step without sampling; the other slots of the pool draw their ancestors from every slot
of the pool, the reference included, and slot 0 keeps the reference.

The next reference of particle Gibbs (pick_reference) is drawn among the pass's finished
particles by "weight" (their accumulated log-weights) or by "reward" (softmax of
logit(last step's reward) / tau: both references, the authors' code and its_hub).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from search.algos._stepwise import Sampler, at_bar, draw_rounds
from search.budget import Meter
from search.engines.base import Engine
from search.marks import Mark
from search.resample import Resampler, multinomial
from search.scoring import Scorer, reward, score_nodes
from search.types import Node, Problem

CLIP = 1e-7


@dataclass(slots=True)
class ParticleMark(Mark):
    """A particle's values on its node (None until written), for particle_filter and
    particle_gibbs."""

    key = "smc"
    log_weight: float | None = None  # its log-weight when it finished
    reference: int | None = None  # particle_gibbs: the pass after which it was the reference


def potential(score: float, tau: float = 1.0) -> float:
    """phi(r) / tau: the log-weight increment of a step whose PRM score is r."""
    r = score if math.isfinite(score) else CLIP
    r = min(max(r, CLIP), 1.0 - CLIP)
    return math.log(r / (1.0 - r)) / tau


def logsumexp(xs: Sequence[float]) -> float:
    top = max(xs)
    if top == -math.inf:
        return -math.inf
    return top + math.log(math.fsum(math.exp(x - top) for x in xs))


def normalize(log_weights: Sequence[float]) -> list[float]:
    """Softmax of log-weights: normalised weights summing to 1."""
    total = logsumexp(log_weights)
    return [math.exp(x - total) for x in log_weights]


def weights_from_scores(scores: Sequence[float], tau: float = 1.0) -> list[float]:
    """Normalised weights of particles with equal prior weight after one scored step."""
    return normalize([potential(s, tau) for s in scores])


def ess(weights: Sequence[float]) -> float:
    """Effective sample size 1 / sum w_i^2 of (normalised here) weights."""
    total = math.fsum(weights)
    return total * total / math.fsum(w * w for w in weights)


@dataclass
class Swarm:
    """N particles: slot i holds the leaf of its path and its unnormalised log-weight.
    history[t] is the slots' nodes after step t+1 was taken (before any resampling)."""

    nodes: list[Node]
    log_weights: list[float]
    history: list[list[Node]] = field(default_factory=list)
    resamplings: int = 0

    def live(self) -> list[int]:
        return [i for i, node in enumerate(self.nodes) if not node.finished]

    def weights(self) -> list[float]:
        return normalize(self.log_weights)

    def resample(self, pool: Sequence[int], draw: Resampler, rng: random.Random, *,
                 keep_first: bool) -> None:
        """Resample the slots in pool among themselves; keep_first pins slot pool[0]."""
        lw = [self.log_weights[i] for i in pool]
        mean = logsumexp(lw) - math.log(len(pool))  # each resampled slot gets the mean weight
        targets = list(pool[1:] if keep_first else pool)
        picks = draw(normalize(lw), len(targets), rng)
        ancestors = [self.nodes[pool[j]] for j in picks]
        for i, node in zip(targets, ancestors):
            self.nodes[i] = node
        for i in pool:
            self.log_weights[i] = mean
        self.resamplings += 1


@dataclass(frozen=True)
class SweepPlan:
    """What every pass of one particle filter (or particle Gibbs) run keeps fixed, built once
    by the algorithm from its knobs: n slots, the resampling scheme `draw`, resampling when
    ESS < ess_threshold * the pool's size, the weight temperature tau, at most max_depth
    rounds, and whether finished particles join the resampling pool."""

    n: int
    draw: Resampler
    ess_threshold: float
    tau: float
    max_depth: int
    resample_finished: bool = False
    rounds: int = 1  # proposals drawn in rounds (propose_in_rounds); 1: one per live slot


def sweep(problem: Problem, engine: Engine, scorer: Scorer, meter: Meter, rng: random.Random,
          sampler: Sampler, root: Node, plan: SweepPlan, *, reference: Sequence[Node] = ()
          ) -> Swarm:
    """One particle-filter pass from root: every live particle takes one sampled step per
    round (one engine batch), is weighted by the PRM, and the pool (the live particles, or
    every slot with plan.resample_finished) is resampled when its ESS falls below
    plan.ess_threshold * its size. With `reference` (its nodes from depth 1 to a finished
    leaf) slot 0 replays that path: conditional SMC."""
    n, tau, resample_finished = plan.n, plan.tau, plan.resample_finished
    ref = list(reference)
    if ref and not ref[-1].finished:
        raise ValueError("a reference path must end in a finished node")
    if plan.rounds > 1 and (ref or resample_finished):
        raise ValueError("rounds > 1 resamples the live slots from a varying number of "
                         "proposals: not with a reference path nor resample_finished")
    swarm = Swarm([root] * n, [0.0] * n)
    bank = 0
    for depth in range(plan.max_depth):
        live = swarm.live()
        if not live or meter.exhausted():
            break
        if plan.rounds > 1:
            bank = propose_in_rounds(problem, engine, scorer, meter, rng, sampler, swarm, plan,
                                     bank, first=depth == 0)
            continue
        pinned = bool(ref) and live[0] == 0
        free = live[1:] if pinned else live
        kids = sampler.expand(engine, [swarm.nodes[i] for i in free], 1, rng)
        for i, (kid,) in zip(free, kids):
            swarm.nodes[i] = kid
        if pinned:
            swarm.nodes[0] = ref[depth]
        score_nodes(scorer, problem, [swarm.nodes[i] for i in live], meter=meter)  # ref's: cached
        # each live particle's newest step, and (resample_finished) each finished one's last
        for i in range(n) if resample_finished else live:
            swarm.log_weights[i] += potential(reward(swarm.nodes[i]), tau)
            if swarm.nodes[i].finished and i in live:
                swarm.nodes[i].scores.of(ParticleMark).log_weight = swarm.log_weights[i]
        swarm.history.append(list(swarm.nodes))
        still = swarm.live()
        pool = list(range(n)) if resample_finished else still
        if still and ess(normalize([swarm.log_weights[i] for i in pool])) < \
                plan.ess_threshold * len(pool):
            swarm.resample(pool, plan.draw, rng, keep_first=bool(ref) and pool[0] == 0)
    return swarm


def propose_in_rounds(problem: Problem, engine: Engine, scorer: Scorer, meter: Meter,
                      rng: random.Random, sampler: Sampler, swarm: Swarm, plan: SweepPlan,
                      bank: int, *, first: bool) -> int:
    """One step of the filter with its proposals drawn in rounds (_stepwise.draw_rounds; the
    particle filter's knob `rounds`): the live slots, in order and then again from the
    start, each propose one next step, max(1, L // rounds) slots a round (L live slots).
    The bar is the best newest-step reward among the live particles (none at the first
    step: its L are drawn). The step has enough when one round's worth of proposals reach
    the bar and none finished; it collapsed when none reaches it, and then draws further
    rounds from the same particles, paid by the bank. Each proposal's log-weight is its
    particle's plus potential(reward) / tau; the L live slots are then resampled from the
    proposals (every step, whatever ess_threshold), each taking the proposals' mean weight.
    Returns the bank left."""
    live = swarm.live()
    bar = math.inf if first else max(reward(swarm.nodes[i]) for i in live)
    size = max(1, len(live) // plan.rounds)
    order = iter(live * (1 + (len(live) + bank) // max(len(live), 1)))
    props: list[tuple[int, Node]] = []

    def draw(k: int) -> list[Node]:
        slots = [next(order) for _ in range(k)]
        kids = [kid for (kid,) in sampler.expand(engine, [swarm.nodes[i] for i in slots], 1,
                                                 rng)]
        score_nodes(scorer, problem, kids, meter=meter)
        props.extend(zip(slots, kids))
        return kids

    enough, collapsed = at_bar(reward, bar, size)
    _, bank = draw_rounds(draw, len(live), rounds=plan.rounds, bank=bank, enough=enough,
                          collapsed=collapsed,
                          exhausted=meter.exhausted)
    if not props:  # the budget ended first: the loop stops at its next check
        return bank
    lw = [swarm.log_weights[i] + potential(reward(kid), plan.tau) for i, kid in props]
    for (_, kid), w in zip(props, lw):
        if kid.finished:
            kid.scores.of(ParticleMark).log_weight = w
    picks = plan.draw(normalize(lw), len(live), rng)
    mean = logsumexp(lw) - math.log(len(lw))
    for i, j in zip(live, picks):
        swarm.nodes[i], swarm.log_weights[i] = props[j][1], mean
    swarm.resamplings += 1
    swarm.history.append(list(swarm.nodes))
    return bank


REFERENCE_DRAWS = ("weight", "reward")


def reference_weights(swarm: Swarm, by: str = "weight", tau: float = 1.0
                      ) -> list[tuple[Node, float]]:
    """The finished slots' particles and the probabilities of drawing each as the next
    reference: softmax of their log-weights ("weight") or of logit(last step's reward) / tau
    ("reward"). A particle held by several slots appears once per slot."""
    done = [i for i, node in enumerate(swarm.nodes) if node.finished]
    if by not in REFERENCE_DRAWS:
        raise ValueError(f"reference draw must be one of {REFERENCE_DRAWS}, got {by!r}")
    if not done:
        return []
    logits = [swarm.log_weights[i] if by == "weight"
              else potential(reward(swarm.nodes[i]), tau) for i in done]
    return list(zip((swarm.nodes[i] for i in done), normalize(logits)))


def pick_reference(swarm: Swarm, rng: random.Random, by: str = "weight", tau: float = 1.0
                   ) -> Node | None:
    """A finished particle drawn by reference_weights (None if none finished)."""
    pairs = reference_weights(swarm, by, tau)
    if not pairs:
        return None
    [j] = multinomial([w for _, w in pairs], 1, rng)
    return pairs[j][0]
