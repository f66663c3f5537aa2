"""Choosing the final answer among a search's candidates (its leaves, scored).

Selection rules are plain functions over candidates:
  by_score       the highest-scoring finished candidate
  majority_vote  the most frequent answer (self-consistency, Wang et al. 2023)
  weighted_vote  the answer with the largest total score (reward-weighted vote)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from search.answers import extract, vote_key
from search.types import Candidate, Node, Problem


def candidates(problem: Problem, leaves: Sequence[Node], scores: Sequence[float]
               ) -> list[Candidate]:
    """One candidate per leaf (answers extracted only from finished paths)."""
    return [Candidate(text=leaf.text, answer=extract(problem, leaf.text) if leaf.finished else None,
                      score=float(s), finished=leaf.finished, node_id=leaf.id)
            for leaf, s in zip(leaves, scores)]


def _eligible(cands: Sequence[Candidate]) -> list[Candidate]:
    return [c for c in cands if c.finished and c.answer is not None]


def by_score(problem: Problem, cands: Sequence[Candidate]) -> Candidate | None:
    del problem
    pool = _eligible(cands)
    # max keeps the first of equal scores, so ties go to the earliest candidate
    return max(pool, key=lambda c: c.score) if pool else None


def _vote(problem: Problem, cands: Sequence[Candidate], weight: Callable[[Candidate], float]
          ) -> Candidate | None:
    pool = _eligible(cands)
    if not pool:
        return None
    groups: dict[str, list[Candidate]] = {}
    for c in pool:
        assert c.answer is not None
        groups.setdefault(vote_key(problem, c.answer), []).append(c)

    # most weight wins; ties go to the larger summed score, then the earlier answer
    def rank(key: str) -> tuple[float, float]:
        group = groups[key]
        return (math.fsum(weight(c) for c in group),
                math.fsum(c.score for c in group if math.isfinite(c.score)))

    return max(groups[max(groups, key=rank)], key=lambda c: c.score)


def majority_vote(problem: Problem, cands: Sequence[Candidate]) -> Candidate | None:
    return _vote(problem, cands, lambda c: 1.0)


def weighted_vote(problem: Problem, cands: Sequence[Candidate]) -> Candidate | None:
    return _vote(problem, cands, lambda c: c.score if math.isfinite(c.score) else 0.0)


# the selection rules by name: the values of every algorithm's `select` knob
SELECTIONS: dict[str, Callable[[Problem, Sequence[Candidate]], Candidate | None]] = {
    "score": by_score, "vote": majority_vote, "weighted_vote": weighted_vote}
SCORED = ("score", "weighted_vote")  # the rules that read candidate scores


def rule(name: str) -> Callable[[Problem, Sequence[Candidate]], Candidate | None]:
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
    def of(cls, select: str, scored_by: str) -> Selection:
        """A rule of SELECTIONS by name; scored_by says what the candidate scores are."""
        return cls.choosing(rule(select), selected_by(select, scored_by))


def best_partial(cands: Sequence[Candidate]) -> Candidate | None:
    """The best-scoring unfinished candidate (the first of ties): where a search that a
    cut ended before any answer had got to; None when it has no partial path."""
    pool = [c for c in cands if not c.finished and c.text]
    return max(pool, key=lambda c: c.score if math.isfinite(c.score) else -math.inf,
               default=None)
