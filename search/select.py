"""Choosing the final answer among finished paths, and packing what a search found (Outcome).

Selection rules are plain functions over candidates:
  by_score       the highest-scoring finished candidate
  majority_vote  the most frequent answer (self-consistency, Wang et al. 2023)
  weighted_vote  the answer with the largest total score (reward-weighted vote)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from search.answers import extract, vote_key
from search.budget import Meter
from search.types import Candidate, Node, Problem, Result, Usage


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


RULES: dict[str, Callable[[Problem, Sequence[Candidate]], Candidate | None]] = {
    "score": by_score, "vote": majority_vote, "weighted_vote": weighted_vote}
SCORED = ("score", "weighted_vote")  # the rules that read candidate scores


def rule(name: str) -> Callable[[Problem, Sequence[Candidate]], Candidate | None]:
    if name not in RULES:
        raise ValueError(f"unknown selection rule {name!r}; choose from {sorted(RULES)}")
    return RULES[name]


def selected_by(select: str, scored_by: str) -> str:
    """What Result.selected_by says: the rule, and for a rule that reads scores what the
    scores were ("steps, min": the scorer and the aggregation of its step scores).
    selected_by("vote", ...) == "vote"; selected_by("score", "steps, min") ==
    "score(steps, min)"."""
    return select if select not in SCORED else f"{select}({scored_by})"


@dataclass(frozen=True)
class Selection:
    """The final choice among candidates: a rule, and what Result.selected_by says of it."""

    choose: Callable[[Problem, Sequence[Candidate]], Candidate | None]
    label: str

    @classmethod
    def of(cls, select: str, scored_by: str) -> Selection:
        """A rule of RULES by name; scored_by says what the candidate scores are."""
        return cls(rule(select), selected_by(select, scored_by))


Rank = Callable[[Problem, Sequence[Node], Sequence[Candidate]],
                tuple[list[Candidate], Candidate | None, Mapping[str, Any]]]


@dataclass(frozen=True)
class Ranking:
    """A search's own final choice, where candidate scores depend on all the leaves (rpc's
    perplexity consistency): rank(problem, leaves, their candidates) -> (the candidates as
    finally scored, the chosen one, stats for Result.stats); label: Result.selected_by."""

    rank: Rank
    label: str


@dataclass(frozen=True)
class Outcome:
    """What a search found, before it is a Result: the chosen answer (text, score), the
    candidates, the tree, the status (as the meter it ran on saw it), its stats, what chose
    the answer (Result.selected_by), and the knobs it resolved itself (agg=None as the
    scorer's own, ...). The call that knows every knob's actual value builds the Result from
    it, once (search.knobs.run)."""

    answer: str | None
    text: str
    score: float
    candidates: tuple[Candidate, ...]
    tree: Node
    status: str
    stats: Mapping[str, Any] = field(default_factory=dict)
    selected_by: str = ""
    resolved: Mapping[str, Any] = field(default_factory=dict)

    def result(self, *, usage: Usage, seed: int, algo: str, knobs: Mapping[str, Any],
               stats: Mapping[str, Any], model: str = "", scorer: str = "",
               load_seconds: float = 0.0) -> Result:
        """The Result: what was found, with what the call knows (stats: the Outcome's, and
        any the call adds)."""
        return Result(answer=self.answer, text=self.text, score=self.score,
                      candidates=self.candidates, tree=self.tree, usage=usage, seed=seed,
                      algo=algo, status=self.status, knobs=dict(knobs), stats=dict(stats),
                      selected_by=self.selected_by, model=model, scorer=scorer,
                      load_seconds=load_seconds)


def best_partial(cands: Sequence[Candidate]) -> Candidate | None:
    """The best-scoring unfinished candidate (the first of ties): where a search that a
    cut ended before any answer had got to; None when it has no partial path."""
    pool = [c for c in cands if not c.finished and c.text]
    return max(pool, key=lambda c: c.score if math.isfinite(c.score) else -math.inf,
               default=None)


def pack(problem: Problem, root: Node, cands: Sequence[Candidate], chosen: Candidate | None,
         meter: Meter, *, resolved: Mapping[str, Any] | None = None,
         stats: Mapping[str, Any] | None = None, chosen_by: str = "") -> Outcome:
    """The Outcome of a search; says why when there is no answer (nothing is made up), and
    which limit cut it short or stopped it (stats["cut_by"], on every "budget_exhausted";
    stats["cut_in_flight"] when it cut a batch or scorer call short, not between them),
    and with no answer, its best partial candidate (stats["best_partial"]: its node id). chosen_by: the rule that chose
    (Result.selected_by); resolved: the knobs the search resolved itself."""
    if meter.cut == "interrupted":  # stopped from outside (Ctrl-C): the best so far
        status = "interrupted"
    elif meter.cut is not None:  # a limit cut work short: the answer is the best so far
        status = "budget_exhausted"
    elif chosen is not None:
        status = "ok"
    elif any(c.finished for c in cands):
        status = "no_answer"
    else:
        status = "budget_exhausted" if meter.exhausted() else "unfinished"
    if status in ("budget_exhausted", "interrupted"):
        stats = {**(stats or {}), "cut_by": meter.stopped_by()}
        if meter.cut is not None:  # the limit cut work in flight (else: stopped between)
            stats["cut_in_flight"] = True
        partial = best_partial(cands) if chosen is None else None
        if partial is not None:  # no answer is made up; the candidate says how far it got
            stats["best_partial"] = partial.node_id
    return Outcome(answer=chosen.answer if chosen else None, text=chosen.text if chosen else "",
                   score=chosen.score if chosen else -math.inf, candidates=tuple(cands),
                   tree=root, status=status, stats=dict(stats or {}), selected_by=chosen_by,
                   resolved=dict(resolved or {}))
