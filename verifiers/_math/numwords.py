"""Numbers written in English words: "forty-two", "one hundred twenty", "three and a half".

`NUMBER_WORDS` finds a run of number words in prose; `value_of(words)` is its value as the
string the readers compare ("42", "120", "3.5", "2/3"), or None when the run is no number
("and", "a" alone). Fractions read are halves, quarters and thirds, after a whole ("three
and a half") or alone with a count ("two thirds"); a count of more is left alone, since
"three fifths" beside "the fifth" reads ambiguously.

Which runs are items of prose (verifiers._math.items): every run but "one", "a" and "an",
which are pronouns and articles more often than numbers ("the one that", "a car"); a whole
answer that is number words ("The answer is one.") is read by `whole_answer`.
"""

from __future__ import annotations

import re
from fractions import Fraction

_UNITS = {w: k for k, w in enumerate(
    ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"])}
_TENS = {w: 10 * k for k, w in enumerate(["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"], 2)}
_SCALES = {"hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9}
_SHARES = {"half": Fraction(1, 2), "halves": Fraction(1, 2), "quarter": Fraction(1, 4),
           "quarters": Fraction(1, 4), "third": Fraction(1, 3), "thirds": Fraction(1, 3)}
_WORD = "|".join(sorted([*_UNITS, *_TENS, *_SCALES], key=len, reverse=True))
_SHARE = "|".join(sorted(_SHARES, key=len, reverse=True))
# a run: number words joined by spaces, hyphens or "and", then optionally "and a half"
_FIRST = "".join(sorted({w[0] for w in [*_UNITS, *_TENS, *_SCALES, "minus", "negative", "a"]}))
NUMBER_WORDS = re.compile(  # led by a class of first letters, which the regex engine scans fast
    rf"(?=[{_FIRST}])(?<![\w-])(?:minus\s+|negative\s+)?(?:(?:{_WORD})(?:(?:\s+and\s+|[\s-]+)(?:{_WORD}))*"
    rf"(?:\s+and\s+(?:a|one)\s+(?:{_SHARE})|\s+(?:{_SHARE}))?|(?:a|one)\s+(?:half|quarter|third))(?![\w-])",
    re.I,
)
_SKIPPED = {"one", "a", "an"}


def value_of(words: str) -> str | None:
    """The value of a run of number words, or None when it is none (a malformed run)."""
    tokens = re.findall(r"[a-z]+", words.lower())
    sign = -1 if tokens and tokens[0] in ("minus", "negative") else 1
    tokens = [t for t in tokens if t not in ("minus", "negative", "and")]
    if not tokens:
        return None
    share = Fraction(0)
    if tokens[-1] in _SHARES:
        if len(tokens) >= 2 and tokens[-2] in ("a", "one"):  # "three and a half", "a half"
            share, tokens = _SHARES[tokens[-1]], tokens[:-2]
        else:  # "two thirds"
            count = _whole(tokens[:-1])
            if count is None:
                return None
            share, tokens = count * _SHARES[tokens[-1]], []
    whole = _whole(tokens) if tokens else Fraction(0)
    if whole is None:
        return None
    value = sign * (whole + share)
    if value.denominator == 1:
        return str(value.numerator)
    if value.denominator in (2, 4):
        return str(float(value))
    return f"{value.numerator}/{value.denominator}"


def _whole(tokens: list[str]) -> Fraction | None:
    """ "one hundred twenty" -> 120; None for no tokens or words out of order ("two three",
    "twenty thirty": two numbers side by side, not one)."""
    if not tokens:
        return None
    total, current, last = 0, 0, ""  # last: the kind of the word before ("unit", "ten", "scale")
    for token in tokens:
        if token in _UNITS and last in ("", "scale") or token in _UNITS and last == "ten" and _UNITS[token] < 10:
            current, last = current + _UNITS[token], "unit"
        elif token in _TENS and last in ("", "scale"):
            current, last = current + _TENS[token], "ten"
        elif token == "hundred" and last in ("", "unit") and current < 100:
            current, last = (current or 1) * 100, "scale"
        elif token in _SCALES and token != "hundred" and last != "":
            total, current, last = total + current * _SCALES[token], 0, "scale"
        else:
            return None
    return Fraction(total + current)


def prose_number(words: str) -> str | None:
    """A run's value when it stands for a number in prose: not "one" / "a" / "an" alone."""
    if words.strip().lower() in _SKIPPED:
        return None
    return value_of(words)


def whole_answer(answer: str) -> str:
    """ "forty-two" -> "42", "forty-two apples" -> "42 apples": an answer that is number words
    (with what follows them) in digits; anything else as it is."""
    m = NUMBER_WORDS.match(answer.strip())
    if not m or m.group(0).lower() in ("a", "an"):
        return answer
    value = value_of(m.group(0))
    if value is None:
        return answer
    rest = answer.strip()[m.end() :]
    if rest and not re.fullmatch(r"(?:\s+[A-Za-z][A-Za-z\s.]*)?\.?", rest):
        return answer  # "two x + 3": words within an expression are not this reader's
    return value + rest
