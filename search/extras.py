"""Optional extras (ray, llama-cpp-python, vllm) imported by name when a feature needs them.

Imported through importlib, the module is typed as a plain ModuleType, so the type checker
accepts a machine without the extra (`make lint` passes with and without them) and a user
without it gets one error naming the pip command.
"""

from __future__ import annotations

import importlib
from types import ModuleType


class ExtraMissing(ImportError):
    """An optional extra that is not installed."""


def require(module: str, extra: str) -> ModuleType:
    """`import module`, or ExtraMissing saying `pip install 'tts-search[extra]'`."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ExtraMissing(f"{module} is not importable: it comes with the optional extra "
                           f"{extra!r} (pip install 'tts-search[{extra}]')") from err
