"""The value-head scorer ("value"): a PRM on the generator's own hidden states, scoring a step
at no forward. This module holds what scoring needs (the head, its features, where it is
saved); its training is training.value_train.

The engine (HFEngine(keep_hidden=True)) records, for every generated step, the final hidden
state its last token was predicted from. A logistic head maps that state, next to a few
confidence figures of the path read off the token log-probabilities the engine already
recorded (`confidence`), to P(this path reaches a correct answer):

    score(step) = sigmoid(w . [h(step); conf(path)] + b)

Why the confidence figures: a small reasoner's mistakes are slips it makes while unsure (a
product it half knows), and the hidden state at the step's end no longer shows how unsure
the model was at the slip; the path's worst token log-probability does.

The head is saved next to the model it belongs to (HEAD_FILE, with value_head.json holding
its training record): an embedded model's folder (search.models.folder_of) or the local
folder the model was loaded from.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from search.models import folder_of
from search.scoring import registered_as
from search.session import Bindable
from search.types import Node, Problem

HEAD_FILE = "value_head.safetensors"
TRAIN = "python -m training.value_train"  # the command that trains a head
UNSURE = math.log(0.5)  # a token the model gave less than even odds
CONFIDENCE = ("path min logprob", "path mean logprob", "step min logprob",
              "path tokens below log(1/2)", "depth")


def confidence(node: Node) -> list[float]:
    """[len(CONFIDENCE)] figures of node's path from its steps' temperature-1 token
    log-probabilities (clamped at -30 so a zero-probability token stays finite)."""
    if node.step is None:
        raise ValueError("the root has no step to score")
    path = [max(lp, -30.0) for s in node.steps() for lp in s.logprobs] or [0.0]
    step = [max(lp, -30.0) for lp in node.step.logprobs] or [0.0]
    if any(math.isnan(lp) for lp in path):
        raise ValueError(f"NaN log-probability on the path to {node!r}")
    return [min(path), sum(path) / len(path), min(step), float(sum(lp < UNSURE for lp in path)),
            float(node.depth)]


def features(engine: Any, nodes: Sequence[Node]) -> torch.Tensor:
    """[B, hidden + len(CONFIDENCE)]: each node's recorded step state and its path's
    confidence figures; a clear error for steps this engine did not sample with keep_hidden."""
    missing = [n for n in nodes if n not in engine.step_features]
    if missing:
        raise ValueError(f"no step features for {missing[0]!r}: only steps sampled by this "
                         "engine with keep_hidden=True can be scored by its value head")
    hid = torch.stack([engine.step_features[n] for n in nodes])
    return torch.cat([hid, torch.tensor([confidence(n) for n in nodes], dtype=hid.dtype)], 1)


class ValueHead(torch.nn.Module):
    """Logistic head [hidden] -> P(correct). Inputs are standardised with stored stats."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(hidden, 1)
        self.mean: torch.Tensor
        self.std: torch.Tensor
        self.register_buffer("mean", torch.zeros(hidden))
        self.register_buffer("std", torch.ones(hidden))

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # [B, hidden] -> [B]
        return torch.sigmoid(self.linear((h - self.mean) / self.std)).squeeze(-1)


def load(folder: str | Path) -> ValueHead:
    from safetensors.torch import load_file

    path = Path(folder) / HEAD_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no value head at {path}; train one with "
                                f"`{TRAIN} --model <name>`")
    state = load_file(str(path))
    head = ValueHead(state["mean"].shape[0])
    head.load_state_dict(state)
    return head.eval()


def head_folder(model: str) -> Path:
    """Where model `model`'s head is saved: an embedded model's own folder, else the model
    as a local path (a folder that may not exist: the caller says what is missing)."""
    return folder_of(model) or Path(model)


def model_folder(engine: Any) -> Path:
    """The folder of the engine's model, where its head lives: an embedded model's own
    folder or the local folder it was loaded from."""
    name = str(getattr(engine, "name", ""))
    folder = head_folder(name)
    if folder.is_dir():
        return folder
    raise FileNotFoundError(f"no model folder for engine {name!r}: a value head lives next to "
                            "an embedded reasoner or a locally saved model")


def needs_value_head(problem: Problem, model: str) -> None:
    """The value scorer's check before any model loads: a head lives next to the model (an
    embedded reasoner or a locally saved model)."""
    del problem
    folder = head_folder(model)
    if not (folder / HEAD_FILE).is_file():
        raise ValueError(f"scorer 'value' needs a value head saved next to the model, and "
                         f"model {model!r} has none (no {HEAD_FILE} in {folder}); train one "
                         f"with `{TRAIN} --model {model}`")


@registered_as("value", check=needs_value_head, engine=True)
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
