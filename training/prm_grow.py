"""Growing a PRM past its policy: layers added on top that start as the identity, and
equation drills (training.arith_drills) trained before the labels.

A PRM initialised from the policy reads a step with the policy's own layers, whose last one
holds at each token the policy's prediction of the next. A slip ("29 * 3 = 24") is where the
written digit differs from that prediction, but no position of the policy's own stack sees
both: the prediction for a digit is formed at the token before it. One layer more lets the
digit's position read it, and the step's end gather what the digits found.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from search.types import Problem
from training.arith_drills import equation_drills
from training.prm_labels import LabelledPath

FRESH_LR_SCALE = 2.0  # grown layers start at zero output: they learn at twice the rate


def grow_layers(model: Any, k: int) -> None:
    """Append k decoder layers, each a copy of the last with its attention output and MLP
    down projections zeroed: every layer adds its output to the residual stream, so the
    grown model computes exactly what it did before (same logits), and training starts from
    the policy's own function."""
    import copy

    if k < 0:
        raise ValueError(f"grow must be >= 0, got {k}")
    layers = model.get_decoder().layers
    for _ in range(k):
        layer = copy.deepcopy(layers[-1])
        torch.nn.init.zeros_(layer.self_attn.o_proj.weight)
        torch.nn.init.zeros_(layer.mlp.down_proj.weight)
        layer.self_attn.layer_idx = len(layers)  # its slot in a KV cache
        layers.append(layer)
    types = getattr(model.config, "layer_types", None)
    if k and types:
        model.config.layer_types = list(types) + [types[-1]] * k
    model.config.num_hidden_layers = len(layers)


def drills_for(problems: Sequence[Problem], n: int, seed: int) -> list[LabelledPath]:
    """--drills: n equation drill paths of generator seed `seed` for a PRM of `problems`'
    task (the arithmetic one only: drills are equations); none for n = 0."""
    if not n:
        return []
    if not all(p.id.startswith("arith/") for p in problems):
        raise ValueError("--drills needs the arithmetic task (training.arith_drills)")
    return equation_drills(n, seed=seed)
