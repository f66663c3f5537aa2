r"""Equivalence of two extracted answers by math-verify. Runs inside the worker process only.

`compare(gold, pred)` takes the answers `verifiers._math.extract.answer_of` found, rewrites each
as the LaTeX it means (`verifiers._math.spelling.for_math_verify`: digit groups, plain-text "pi",
"oo", "6.72e-5", "\sqrt51", units), parses the whole of it with math-verify's LaTeX parser
(latex2sympy2-extended) and asks math-verify's `verify` whether the two are equal: sets,
intervals, tuples, matrices, equations and relations, symbolic equality, and numbers
rounded to 6 decimal places when one side is a decimal. Only the whole answer is parsed: an
answer the parser cannot read is not equal to anything (no number is fished out of it).

math-verify's own timeouts use signal.alarm; they are off here, because the caller kills this
whole process when `timeout` runs out (verifiers._math.pool), which also stops a runaway sympy.
"""

from __future__ import annotations

import logging
from functools import lru_cache

from math_verify import LatexExtractionConfig, parse, verify

from verifiers._math.spelling import for_math_verify

# "Timeout is disabled": known, and meant (the pool's kill is the timeout); nothing else is said
logging.getLogger("math_verify").setLevel(logging.CRITICAL)
_LATEX = [LatexExtractionConfig()]


def compare(gold: str, pred: str) -> tuple[bool, str]:
    """(equal, reason) for two extracted answers; gold first (it decides how "x=3" is read)."""
    g, p = _read(gold), _read(pred)
    if not g:
        return False, "the gold answer cannot be parsed"
    if not p:
        return False, "the predicted answer cannot be parsed"
    if verify(g, p, float_rounding=6, strict=True, timeout_seconds=None):
        return True, "equal (math-verify)"
    return False, "not equal (math-verify)"


@lru_cache(maxsize=4096)  # a problem's gold, and its candidates' answers, come back many times
def _read(answer: str) -> list:
    """The parsed answer ([] if the parser cannot read all of it)."""
    latex = for_math_verify(answer)
    if not latex:
        return []
    return parse(f"${latex}$", _LATEX, fallback_mode="no_fallback", extraction_mode="first_match",
                 parsing_timeout=None)  # type: ignore[arg-type]
