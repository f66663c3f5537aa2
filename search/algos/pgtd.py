"""Planning-Guided Transformer Decoding (PG-TD).

Zhang et al. 2023, "Planning with Large Language Models for Code Generation" (ICLR): MCTS over
tokens. The LM proposes the top-k next tokens of a prefix (with their probabilities as priors
for P-UCB); a prefix is evaluated by completing it greedily and scoring the program with the
public tests (the scorer: rewards.unit_tests.UnitTestScorer, which search.solve picks for pgtd
when no scorer is given). The program with the best public score is returned; hidden tests are
never seen by the search.

    repeat `rollouts` times (or until the budget ends, or a program scores 1 with early_stop):
        s <- root; descend by argmax_a  Q(s,a) + beta(s) P(a|s) sqrt(log N(s)) / (1 + n(s,a)),
             beta(s) = log((N(s) + c_base + 1) / c_base) + c,
             creating the chosen child (one forced token) when it is new, then stopping
        new s: its top-k next tokens are cached (tree caching); its greedy completion is
             reused with its score if an earlier greedy rollout passed through s (sequence
             caching), else decoded (temperature 0 to EOS or `horizon` tokens) and scored
        back up: Q(s,a) <- max(Q(s,a), r); n(s,a) += 1; N(s) += 1 along the path
    return the best-scoring program (ties: the first found)

As in the authors' code (Code-AI-Tree-Search, "var_p_uct"): N(s) starts at 1, Q is the max
return (not the mean: greedy completions are deterministic), unvisited actions have Q = 0,
priors are the LM's probabilities of the top-k tokens, defaults width 3, c 4, c_base 10,
horizon 1024, greedy (beam 1) evaluation. Our choices: early_stop is on by default (their
--early-stop flag): with ties going to the first program, searching past a perfect public score
cannot change the answer, only the cost; a rollout cut short by the budget is not scored
(but if no program has finished, it goes on from the budget's reserve, Budget.reserve, and
is scored if it finishes); a finished prefix (EOS) or one at the horizon is scored as it
stands. MCTS is sequential: each
iteration makes one forced-token call and at most one rollout, as in the paper.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from search.algos import Run
from search.algos._stepwise import Sampler, roll
from search.budget import Meter
from search.engines.base import Engine
from search.fit import Width
from search.knobs import at_least, rules
from search.scoring import Scorer
from search.session import Session
from search.types import Node, Outcome, Problem


@dataclass
class _Stats:
    """MCTS statistics of one prefix (a tree node)."""

    actions: list[tuple[int, float]]  # top-k (token id, prior probability), likeliest first
    visits: int = 1  # N(s)
    child: dict[int, Node] = field(default_factory=dict)  # token id -> child node
    q: dict[int, float] = field(default_factory=dict)  # Q(s, a): best return through a
    n: dict[int, int] = field(default_factory=dict)  # n(s, a)


@dataclass
class _SeqCache:
    """Finished greedy rollouts: (prefix length it started at, full token ids, leaf)."""

    entries: list[tuple[int, tuple[int, ...], Node]] = field(default_factory=list)
    hits: int = 0

    def find(self, node: Node) -> Node | None:
        """The leaf of an earlier rollout whose greedy path runs through node, if any: greedy
        decoding from any prefix of that path reproduces the rest of it."""
        ids = tuple(node.token_ids())
        for start, seq, leaf in self.entries:
            if start <= len(ids) <= len(seq) and seq[:len(ids)] == ids:
                self.hits += 1
                return leaf
        return None


def _p_ucb(st: _Stats, a: int, prior: float, c: float, c_base: float) -> float:
    beta = math.log((st.visits + c_base + 1) / c_base) + c
    return st.q.get(a, 0.0) + beta * prior * math.sqrt(math.log(st.visits)) / (1 + st.n.get(a, 0))


def _rollout(engine: Engine, meter: Meter, node: Node, horizon: int) -> tuple[Node, bool]:
    """Greedy completion of node to EOS or `horizon` generated tokens: (where it got, False
    if the budget ran out first). Each step decodes with no stop string up to the horizon,
    so an engine gets there in one step. A step that adds no token ends the rollout where
    it is (greedy decoding would only repeat it, and a token budget would never run out)."""

    def greedy(tips: Sequence[Node]) -> list[Node]:
        return [child for (child,) in engine.expand(
            tips, 1, stop=None, temperature=0.0, max_tokens=horizon - tips[0].generated_tokens)]

    def goes_on(tip: Node) -> bool:
        added = tip is node or (tip.step is not None and len(tip.step.token_ids) > 0)
        return added and not tip.finished and tip.generated_tokens < horizon

    [leaf], cut = roll([node], greedy, meter, goes_on=goes_on)
    return leaf, not cut


# the seed cannot change the result (greedy decoding throughout)
@rules(at_least(1, "rollouts", "width"),
       depth_limit=False,
       scale=Width(("rollouts",)), deterministic=True)
def pgtd(problem: Problem, engine: Engine, scorer: Scorer, session: Session, *, seed: int = 0,
         rollouts: int = 128, width: int = 3, c: float = 4.0, c_base: float = 10.0,
         horizon: int = 1024, early_stop: bool = True) -> Outcome:
    # programs are scored by their public tests (the scorer's last value, whatever its agg)
    run = Run.begin(problem, engine, scorer, session, seed=seed, sampler=Sampler(0.0, 1.0),
                    agg="last")

    def terminal(node: Node) -> bool:
        return node.finished or node.generated_tokens >= horizon

    def new_stats(node: Node) -> _Stats:  # tree caching: top-k of each prefix, computed once
        if terminal(node):
            return _Stats(actions=[])
        top = run.engine.topk_next([node], width)[0]
        return _Stats(actions=[(t, math.exp(lp)) for t, lp in top])

    root = run.root
    stats = {root.id: new_stats(root)}
    cache = _SeqCache()
    programs: list[Node] = []  # every scored completion, in the order found
    cut: list[Node] = []  # the rollout the budget stopped, if it did
    iterations = 0
    for _ in range(rollouts):
        if run.meter.exhausted():
            break
        iterations += 1
        # selection: descend by P-UCB until a new child is created or a terminal is reached
        node, trail = root, []
        while stats[node.id].actions:
            st = stats[node.id]
            a = max(st.actions, key=lambda tp: _p_ucb(st, tp[0], tp[1], c, c_base))[0]
            trail.append((st, a))
            if a in st.child:
                node = st.child[a]
                continue
            (node,) = run.engine.extend([node], [[a]], generated=True)
            st.child[a] = node
            stats[node.id] = new_stats(node)
            break
        # evaluation: a cached completion through this prefix, else the prefix itself if
        # terminal, else its greedy completion
        leaf = cache.find(node)
        if leaf is None:
            leaf, whole = (node, True) if terminal(node) else \
                _rollout(run.engine, run.meter, node, horizon)
            if not whole:
                cut.append(leaf)  # budget gone mid-rollout: nothing to score
                break
            cache.entries.append((len(node.token_ids()), tuple(leaf.token_ids()), leaf))
        if leaf.scores.reward is None:
            programs.append(leaf)
        (reward,) = run.score([leaf])
        # backpropagation: max return along the path
        stats[node.id].visits += 1
        for st, a in trail:
            st.q[a] = max(st.q.get(a, -math.inf), reward)
            st.n[a] = st.n.get(a, 0) + 1
            st.visits += 1
        if early_stop and reward >= 1.0:
            break

    # no program finished before the budget ran out: the cut rollout goes on from the reserve
    rest = max([horizon - leaf.generated_tokens for leaf in cut] + [1])
    return run.finish(programs + cut, score=_reward, max_depth=rest, reserve_scores="leaf",
                      reserve_sampler=Sampler(0.0, 1.0, rest, None), partial=cut,
                      stats=dict(iterations=iterations, programs=len(programs),
                                 cache_hits=cache.hits))


def _reward(program: Node) -> float:
    """A program's public-test score (-inf if it was never scored: the budget cut it)."""
    return -math.inf if program.scores.reward is None else program.scores.reward

