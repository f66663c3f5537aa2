"""Verifiers: math answers (`verify`), arithmetic in reasoning steps (`check_step`).

Importing this package is cheap: sympy and math-verify are only imported inside the worker
processes that `verify` starts on first need.
"""

from verifiers.math import Verdict, extract_answer, normalize, verify
from verifiers.steps import StepVerdict, check_step

__all__ = ["StepVerdict", "Verdict", "check_step", "extract_answer", "normalize", "verify"]
