"""Choosing the final answer among a search's candidates (its leaves, scored).

Every search ends with the same shared step: its finalists (candidates, scored by the
path score) go to one rule, named by the `select` knob, with one default for every
search (DEFAULT):
  by_score       the highest-scoring finished candidate
  majority_vote  the most frequent answer (self-consistency, Wang et al. 2023)
  weighted_vote  the answer with the largest total score (reward-weighted vote)

Ties are never broken by the candidates' order (generation or leaf order): the tied
candidates (or answers) are put in a canonical order (answer key, then text) and one is
drawn with `rng` (a search's Selection seeds it from the run's seed, so the same seed picks
the same candidate however the leaves are listed); without rng the first in canonical order
is taken. A vote's tie in weight goes first to the larger summed score (as before).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from search.answers import extract, vote_key
from search.plugins import Registry
from search.types import Candidate, Node, Problem

T = TypeVar("T")


def candidates(problem: Problem, leaves: Sequence[Node], scores: Sequence[float]
               ) -> list[Candidate]:
    """One candidate per leaf (answers extracted only from finished paths)."""
    return [Candidate(text=leaf.text, answer=extract(problem, leaf.text) if leaf.finished else None,
                      score=float(s), finished=leaf.finished, node_id=leaf.id)
            for leaf, s in zip(leaves, scores)]


def _eligible(cands: Sequence[Candidate]) -> list[Candidate]:
    return [c for c in cands if c.finished and c.answer is not None]


def _canonical(c: Candidate) -> tuple[str, str]:
    return (c.answer or "", c.text)


def tie_break(tied: Sequence[T], order: Callable[[T], Any], rng: random.Random | None) -> T:
    """One of `tied` (not empty): drawn by rng among them in canonical `order`, or the first
    in that order without rng. The result does not depend on the order of `tied`."""
    ranked = sorted(tied, key=order)
    return ranked[0] if rng is None or len(ranked) == 1 else ranked[rng.randrange(len(ranked))]


def _top(items: Sequence[T], key: Callable[[T], Any]) -> list[T]:
    best = max(map(key, items))
    return [x for x in items if key(x) == best]


def by_score(problem: Problem, cands: Sequence[Candidate], *,
             rng: random.Random | None = None) -> Candidate | None:
    del problem
    pool = _eligible(cands)
    return tie_break(_top(pool, lambda c: c.score), _canonical, rng) if pool else None


def _vote(problem: Problem, cands: Sequence[Candidate], weight: Callable[[Candidate], float],
          rng: random.Random | None) -> Candidate | None:
    pool = _eligible(cands)
    if not pool:
        return None
    groups: dict[str, list[Candidate]] = {}
    for c in pool:
        assert c.answer is not None
        groups.setdefault(vote_key(problem, c.answer), []).append(c)

    # most weight wins; ties go to the larger summed score, then to the seeded draw
    def rank(key: str) -> tuple[float, float]:
        group = groups[key]
        return (math.fsum(weight(c) for c in group),
                math.fsum(c.score for c in group if math.isfinite(c.score)))

    key = tie_break(_top(list(groups), rank), lambda k: k, rng)
    return tie_break(_top(groups[key], lambda c: c.score), _canonical, rng)


def majority_vote(problem: Problem, cands: Sequence[Candidate], *,
                  rng: random.Random | None = None) -> Candidate | None:
    return _vote(problem, cands, lambda c: 1.0, rng)


def weighted_vote(problem: Problem, cands: Sequence[Candidate], *,
                  rng: random.Random | None = None) -> Candidate | None:
    return _vote(problem, cands, lambda c: c.score if math.isfinite(c.score) else 0.0, rng)


class Rule(Protocol):
    """A selection rule: the chosen candidate (None if no finished one answers); ties drawn
    by rng (see the module doc)."""

    def __call__(self, problem: Problem, cands: Sequence[Candidate], *,
                 rng: random.Random | None = None) -> Candidate | None: ...


# the selection rules by name: the values of every algorithm's `select` knob
SELECTIONS: Registry[Rule] = Registry("selections", "selection rule", {
    "score": by_score, "vote": majority_vote, "weighted_vote": weighted_vote})
SCORED = ("score", "weighted_vote")  # the rules that read candidate scores
# every search's `select` default: the textbook choice of the highest path score (Cobbe et
# al. 2021's verifier; search-and-learn's "last"/"min" best-of-N and beam); a comparison of
# searches passes one rule to all of them (reports.demo.SELECT)
DEFAULT = "score"


def tie_seed(seed: int) -> random.Random:
    """The random stream that breaks a run's ties in the final selection: from the run's
    seed alone, so it does not depend on how much of the search's own stream was used."""
    return random.Random(f"select:{seed}")


def rule(name: str) -> Rule:
    if name not in SELECTIONS:
        raise ValueError(f"unknown selection rule {name!r}; choose from {sorted(SELECTIONS)}")
    return SELECTIONS[name]


def selected_by(select: str, scored_by: str) -> str:
    """What Result.selected_by says: the rule, and for a rule that reads scores what the
    scores were ("steps, min": the scorer and the aggregation of its step scores).
    selected_by("vote", ...) == "vote"; selected_by("score", "steps, min") ==
    "score(steps, min)"."""
    return select if select not in SCORED else f"{select}({scored_by})"


Rank = Callable[[Problem, Sequence[Node], Sequence[Candidate]],
                tuple[list[Candidate], Candidate | None, Mapping[str, Any]]]


@dataclass(frozen=True)
class Selection:
    """The final choice among a search's leaves: rank(problem, leaves, their candidates) ->
    (the candidates as finally scored, the chosen one or None, stats for Result.stats);
    label: what Result.selected_by says of it. Most searches choose by a rule over the
    candidates (`of`, `choosing`); a search whose candidate scores depend on all the leaves
    (rpc's perplexity consistency) gives its own rank."""

    rank: Rank
    label: str

    @classmethod
    def choosing(cls, choose: Callable[[Problem, Sequence[Candidate]], Candidate | None],
             label: str) -> Selection:
        """A rule that chooses among the candidates as they are scored."""
        return cls(lambda problem, leaves, cands: (list(cands), choose(problem, cands), {}),
                   label)

    @classmethod
    def of(cls, select: str, scored_by: str, *, seed: int | None = None) -> Selection:
        """A rule of SELECTIONS by name; scored_by says what the candidate scores are; ties
        drawn by tie_seed(seed) (None: the first in canonical order)."""
        choose = rule(select)
        return cls.choosing(
            lambda problem, cands: choose(problem, cands,
                                          rng=None if seed is None else tie_seed(seed)),
            selected_by(select, scored_by))


def best_partial(cands: Sequence[Candidate]) -> Candidate | None:
    """The best-scoring unfinished candidate (of ties, the first by text): where a search
    that a cut ended before any answer had got to; None when it has no partial path."""
    pool = [c for c in cands if not c.finished and c.text]
    if not pool:
        return None
    return tie_break(_top(pool, lambda c: c.score if math.isfinite(c.score) else -math.inf),
                     _canonical, None)
