"""The core's own scorer, "logprob": free, from the generator's own token log-probabilities.
It is the default of `search.solve`, so the default path needs no plug-in."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from search.session import Bindable
from search.types import Node, Problem


class LogprobScorer(Bindable):
    """Step score = the geometric-mean token probability of the node's latest step,
    exp(mean logprob), in (0, 1]. It costs no forward pass (the engine recorded the
    logprobs while sampling) but is still charged as scorer calls, one per node.

    A path's score is the mean of its steps' (path_agg "mean"): close to the path's own
    per-token confidence, where "last" would judge a path by its final step alone.
    implicit=True marks the instance `search.solve` supplies when no scorer is named.
    """

    name = "logprob"
    path_agg = "mean"

    def __init__(self, *, implicit: bool = False) -> None:
        self.implicit = implicit

    def score(self, problem: Problem, nodes: Sequence[Node]) -> list[float]:
        del problem
        self.meter.charge_scorer(calls=len(nodes))
        out = []
        for node in nodes:
            lps = node.step.logprobs if node.step is not None else ()
            out.append(math.exp(math.fsum(lps) / len(lps)) if lps else 0.0)
        return out


def make(engine: Any = None) -> LogprobScorer:
    """The registry's factory (search.scoring.SCORERS["logprob"]); needs no engine."""
    del engine
    return LogprobScorer()
