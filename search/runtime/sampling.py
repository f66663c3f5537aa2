"""Token sampling from a batch of logits: greedy, temperature, nucleus (top-p).

`sample_many` draws for several calls at once (search.runtime.sched merges their decode
steps): every op is row-wise, and each call's uniforms come from its own generator in its own
row order, so each call's tokens are bit for bit what `draw` gives it alone. A token's
logprob is the model's own (temperature 1, no truncation), so path sums are comparable
across sampling settings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from search.runtime.transfer import readback, upload


@dataclass(eq=False)
class Draw:
    """How one call draws its rows' next tokens: `order` lists its cache slots in row order
    (None: slot order is row order), so a row's uniform never depends on its slot."""

    temperature: float
    top_p: float
    generator: torch.Generator | None
    order: Sequence[int] | None = None


def draw(logits: torch.Tensor, d: Draw) -> tuple[torch.Tensor, torch.Tensor]:
    """One call's draw: logits [B, V] -> (tokens [B, 1], model logprobs [B, 1]), the rows'
    uniforms taken in row order."""
    return sample_many([logits], [d])[0]


def sample_many(logits: Sequence[torch.Tensor], draws: Sequence[Draw], *, read: bool = False
                ) -> list[tuple[Any, ...]]:
    """Per call, (tokens [B_i, 1], model logprobs [B_i, 1]) from its logits [B_i, V]: what
    `draw` gives each alone (rows in `order`), computed once over all rows. read: and the
    same as host lists ([[token]] and [[logprob]] a row), every call's read back at once
    (transfer.readback: one copy, not one a call)."""
    sizes = [x.shape[0] for x in logits]
    z = (logits[0] if len(logits) == 1 else torch.cat(list(logits))).float()
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    groups: dict[tuple[float, float], list[int]] = {}
    for i, d in enumerate(draws):
        groups.setdefault((d.temperature, d.top_p), []).append(i)
    tokens = torch.empty(z.shape[0], dtype=torch.long, device=z.device)
    for (temperature, top_p), idx in groups.items():
        rows = slice(None) if len(groups) == 1 else torch.cat(  # (one group: every row)
            [torch.arange(starts[i], starts[i] + sizes[i], device=z.device) for i in idx])
        # each call's uniforms, one per row in row order, from its generator
        tokens[rows] = z[rows].argmax(dim=-1) if temperature == 0 else inverse_cdf(
            probs(z[rows], temperature, top_p),
            torch.cat([_uniforms(draws[i], sizes[i], z.device) for i in idx]))
    tokens = tokens[:, None]
    lp = torch.log_softmax(z, dim=-1).gather(-1, tokens)
    each = list(zip(tokens.split(sizes), lp.split(sizes)))
    if not read:
        return each
    toks, lps = readback(tokens, lp)
    return [(t, p, toks[a:a + n], lps[a:a + n]) for (t, p), a, n in zip(each, starts, sizes)]


def _uniforms(d: Draw, n: int, device: torch.device) -> torch.Tensor:
    """[n, 1] float64 uniforms from d's generator, one per row in row order (d.order)."""
    drawn = torch.rand(n, 1, generator=d.generator, dtype=torch.float64, device=device)
    return drawn if d.order is None else drawn.new_empty(n, 1).index_copy_(
        0, upload(list(d.order), device), drawn)


def categorical(p: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One draw per row of p [B, V] (non-negative; rows need not sum to 1) -> [B].

    Inverse CDF: one uniform per row against the row's cumulative sums, in float64 so a
    50k-token vocabulary loses no mass to rounding; token j is drawn when u * total falls in
    [cdf[j-1], cdf[j]), an empty interval for a zero-probability token. torch.multinomial
    draws V exponentials per row instead, a sizeable share of a small model's decode step.
    """
    u = torch.rand(p.shape[0], 1, generator=generator, dtype=torch.float64, device=p.device)
    return inverse_cdf(p, u)


def inverse_cdf(p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """p [B, V], u [B, 1] uniforms in [0, 1) -> [B]: the token where u * total falls."""
    cdf = p.double().cumsum(-1)  # [B, V]
    j = torch.searchsorted(cdf, u * cdf[:, -1:], right=True)  # [B, 1]
    return j.clamp_max(p.shape[-1] - 1).squeeze(-1)


def probs(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """[..., V] -> the distribution `draw` draws from at temperature > 0 (tempered, top-p
    cut); speculative acceptance (search.engines.hf.spec) uses the very same one."""
    z = logits / temperature
    if top_p < 1.0:
        sorted_z, order = z.sort(dim=-1, descending=True)
        p = torch.softmax(sorted_z, dim=-1)
        # drop a token once the mass before it already reaches top_p (the first stays)
        drop = (p.cumsum(-1) - p) >= top_p
        sorted_z = sorted_z.masked_fill(drop, float("-inf"))
        z = torch.full_like(z, float("-inf")).scatter(-1, order, sorted_z)
    return torch.softmax(z, dim=-1)
