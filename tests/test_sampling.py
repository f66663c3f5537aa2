"""search.runtime.sampling.categorical: the inverse-CDF draw every sampled token goes through."""

from __future__ import annotations

import pytest
import scipy.stats as sps
import torch

from search.runtime.sampling import categorical


def test_draws_follow_the_distribution_and_never_a_zero_mass_token():
    p = torch.tensor([0.0, 0.5, 0.0, 0.2, 0.3, 0.0])  # zero mass first, inside and last
    gen = torch.Generator().manual_seed(0)
    draws = torch.cat([categorical(p.expand(500, -1), gen) for _ in range(40)])  # 20,000
    counts = torch.bincount(draws, minlength=6)
    assert counts[[0, 2, 5]].tolist() == [0, 0, 0]
    expected = 20_000 * p[[1, 3, 4]]
    assert sps.chisquare(counts[[1, 3, 4]].numpy(), expected.numpy()).pvalue > 1e-3


def test_unnormalised_rows_each_with_their_own_distribution():
    # row 0 always token 2; row 1 never token 0 (mass 0) and token 1 four times as often as 2
    p = torch.tensor([[0.0, 0.0, 7.0], [0.0, 4.0, 1.0]])
    gen = torch.Generator().manual_seed(1)
    draws = torch.stack([categorical(p, gen) for _ in range(5000)])  # [5000, 2]
    assert (draws[:, 0] == 2).all()
    share = (draws[:, 1] == 1).float().mean().item()
    assert (draws[:, 1] != 0).all() and share == pytest.approx(0.8, abs=0.02)


def test_same_generator_seed_same_draws():
    p = torch.softmax(torch.randn(8, 1000, generator=torch.Generator().manual_seed(2)), -1)
    a = categorical(p, torch.Generator().manual_seed(3))
    b = categorical(p, torch.Generator().manual_seed(3))
    c = categorical(p, torch.Generator().manual_seed(4))
    assert torch.equal(a, b) and not torch.equal(a, c)
