"""The value-head scorer ("value"): problems.value_head's head applied to the features the
engine recorded for each step (HFEngine(keep_hidden=True)): scoring a step costs no forward.
The head, its features and its training live in problems.value_head."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from problems.value_head import CONFIDENCE, ValueHead, features, load, model_folder
from search.session import Bindable
from search.types import Node, Problem


def value_scorer(engine: Any) -> ValueHeadScorer:
    """The scorer registered as "value": the head saved next to the engine's model. It asks
    the engine to record step features (its public switch, HFEngine.record_features), so
    every step sampled from now on records them."""
    switch = getattr(engine, "record_features", None)
    if not callable(switch):
        raise ValueError(f"scorer 'value' reads the step features a transformers engine "
                         f"records; {type(engine).__name__} records none")
    head = load(model_folder(engine))
    switch()
    return ValueHeadScorer(engine, head)


class ValueHeadScorer(Bindable):
    """Scorer: the head applied to each node's recorded step features. Its labels are
    Math-Shepherd's (the share of completions from a step that grade correct), so the
    newest step's value already estimates the whole path's chance: path_agg "last"."""

    name = "value"
    path_agg = "last"


    def __init__(self, engine: Any, head: ValueHead) -> None:
        if not engine.kv.keep_hidden:
            raise ValueError("a value head needs the engine built with keep_hidden=True")
        self.engine, self.head = engine, head

    def score(self, problem: Problem, nodes: Sequence[Node]) -> list[float]:
        del problem
        x = features(self.engine, nodes)
        if x.shape[1] != self.head.mean.shape[0]:
            raise ValueError(f"the value head takes {self.head.mean.shape[0]} features; this "
                             f"engine gives {x.shape[1]} (hidden size + {len(CONFIDENCE)}): "
                             "the head belongs to another model")
        self.meter.charge_scorer(calls=len(nodes), flops=2.0 * x.numel())
        with torch.no_grad():
            return self.head(x).tolist()
