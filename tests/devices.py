"""The devices the engine's tests run on: the CPU always, CUDA where this torch sees a GPU.

`device` is a fixture parametrised over DEVICES (registered in conftest.py): a test that takes
it runs once per device, the same test, not a second copy. References (a plain full-prefix
forward, transformers' generate) stay on the CPU model the test builds; what an engine on
the device returns is brought back with `host` before it is compared.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

DEVICES = ("cpu", "cuda") if torch.cuda.is_available() else ("cpu",)


@pytest.fixture(scope="session", params=DEVICES)
def device(request: pytest.FixtureRequest) -> str:
    """"cpu", then "cuda" where a GPU is visible."""
    return request.param


def host(x: Any) -> Any:
    """A tensor (or a tuple/list of them) on the CPU, to compare with a CPU reference."""
    if isinstance(x, (list, tuple)):
        return type(x)(host(t) for t in x)
    return x.cpu() if isinstance(x, torch.Tensor) else x


def exact(device: str) -> dict[str, Any]:
    """Engine options under which every search's rows are bit for bit what it computes alone,
    at any concurrency, on `device`: on the CPU the defaults (packed linears compute a row the
    same way whatever rows share its forward); on a GPU merge=False (cuBLAS picks its GEMM
    kernel by the batch's rows, so merged searches' logits move by the GEMMs' rounding)."""
    return {} if device == "cpu" else {"merge": False}
