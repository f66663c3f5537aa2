"""`needs_kernel`: what holds only on the CPU attention kernel's path (search.runtime.kernel),
built wherever a C++ compiler is, as on every machine this project runs; without one the lean
forward falls back to attending each Pass alone, which makes no thread-count or merging claim."""

from __future__ import annotations

import pytest

from search.runtime import kernel

needs_kernel = pytest.mark.skipif(not kernel.available(), reason="the CPU attention kernel "
                                  "could not be built here (no C++ toolchain)")
