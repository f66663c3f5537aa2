"""LM self-evaluation: the generator is asked whether the latest step is correct.

reward = P(" Yes") / (P(" Yes") + P(" No")) after the path followed by a question
(as in "Self-Evaluation Guided Beam Search for Reasoning", Xie et al. 2023). The question is
teacher-forced after the node through the engine, so the path's KV is reused; the question
node is detached from the tree afterwards.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from search.scoring import registered_as
from search.session import Bindable, bind
from search.types import Node, Problem

QUESTION = "\n\nIs the last step above correct? Answer Yes or No.\nAnswer:"


@registered_as("self_eval", engine=True)
class SelfEvalScorer(Bindable):
    """A path's score is the product of its steps' (path_agg "prod"), as Xie et al. score
    a reasoning chain by the product of its steps' self-evaluated confidences."""

    name = "self_eval"
    path_agg = "prod"

    def __init__(self, engine: Any, *, question: str = QUESTION, yes: str = " Yes",
                 no: str = " No") -> None:
        self.engine = engine
        self.question = question
        self.yes, self.no = self._token(yes), self._token(no)

    def _token(self, text: str) -> int:
        ids = self.engine.tokenizer(text, add_special_tokens=False)["input_ids"]
        return int(ids[0])  # the first token carries the decision

    def score(self, problem: Problem, nodes: Sequence[Node]) -> list[float]:
        del problem
        self.meter.charge_scorer(calls=len(nodes))
        engine = bind(self.engine, self.session)  # its forwards are this search's too
        asked = engine.extend(list(nodes), [self.question] * len(nodes))
        values = []
        for q, (y, n) in zip(asked, engine.next_logprobs(asked, [self.yes, self.no])):
            values.append(1.0 / (1.0 + math.exp(n - y)))
            q.detach()
        return values
