"""Token sampling from a batch of logits: greedy, temperature, nucleus (top-p)."""

from __future__ import annotations

import torch


def sample(logits: torch.Tensor, *, temperature: float, top_p: float,
           generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [B, V] -> (tokens [B], model logprobs [B]).

    The returned logprob is the model's own log-probability of the token (temperature 1, no
    truncation), so path sums are comparable across sampling settings.
    """
    logits = logits.float()
    logp = torch.log_softmax(logits, dim=-1)
    if temperature == 0:
        tokens = logits.argmax(dim=-1)
    else:
        tokens = torch.multinomial(probs(logits, temperature, top_p), 1,
                                   generator=generator).squeeze(-1)
    return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)


def probs(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """[..., V] -> the distribution `sample` draws from at temperature > 0 (tempered, top-p
    cut); speculative acceptance (search.engines.spec) uses the very same one."""
    z = logits / temperature
    if top_p < 1.0:
        sorted_z, order = z.sort(dim=-1, descending=True)
        p = torch.softmax(sorted_z, dim=-1)
        # drop a token once the mass before it already reaches top_p (the first stays)
        drop = (p.cumsum(-1) - p) >= top_p
        sorted_z = sorted_z.masked_fill(drop, float("-inf"))
        z = torch.full_like(z, float("-inf")).scatter(-1, order, sorted_z)
    return torch.softmax(z, dim=-1)
