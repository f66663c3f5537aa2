r"""Compound quantities: "5 hours and 30 minutes", "18 feet 6 inches", "16 dollars and 50 cents".

`COMPOUND` finds one in prose (two or more number-unit parts of one dimension, larger unit
first, joined by nothing, "," or "and"); `value_in(answer, unit)` is its value in one unit.

How a compound answer is compared (verifiers.math), decided for model output:
- against a gold with a unit of the same dimension ("5.5 hours", "330 \text{ minutes}"): the
  compound's value in the gold's unit;
- against a bare gold number: the compound's value in its own first (largest) unit, the unit
  the question most likely asked in ("5 hours and 30 minutes" is 5.5, not 330; "16 dollars
  and 50 cents" is 16.5); a question that asked for minutes and got hours and minutes back is
  graded wrong, which is the safe side;
- two compounds: their values in a common unit.
"""

from __future__ import annotations

import re
from fractions import Fraction

# unit spelling -> (dimension, size in the dimension's smallest unit here)
_SIZES: dict[str, tuple[str, int]] = {}
for _dim, _units in {
    "time": [(("weeks", "week"), 604800), (("days", "day"), 86400),
             (("hours", "hour", "hrs", "hr", "h"), 3600),
             (("minutes", "minute", "mins", "min"), 60), (("seconds", "second", "secs", "sec", "s"), 1)],
    "age": [(("years", "year", "yrs", "yr"), 12), (("months", "month"), 1)],
    "length": [(("miles", "mile", "mi"), 63360), (("yards", "yard", "yd", "yds"), 36),
               (("feet", "foot", "ft"), 12), (("inches", "inch", "in"), 1)],
    "metric": [(("kilometers", "kilometres", "kilometer", "kilometre", "km"), 100000),
               (("meters", "metres", "meter", "metre", "m"), 100),
               (("centimeters", "centimetres", "centimeter", "centimetre", "cm"), 1)],
    "money": [(("dollars", "dollar"), 100), (("cents", "cent"), 1)],
    "weight": [(("pounds", "pound", "lbs", "lb"), 16), (("ounces", "ounce", "oz"), 1)],
    "mass": [(("kilograms", "kilogram", "kg"), 1000), (("grams", "gram", "g"), 1)],
    "volume": [(("liters", "litres", "liter", "litre", "l"), 1000),
               (("milliliters", "millilitres", "milliliter", "millilitre", "ml"), 1)],
}.items():  # fmt: skip
    for _names, _size in _units:
        _SIZES.update({n: (_dim, _size) for n in _names})

_UNIT = "|".join(sorted(_SIZES, key=len, reverse=True))
_WORDS = {w: k for k, w in enumerate(["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"], 1)}
_WORDS.update({"a": 1, "an": 1})
_PART = rf"(\d+(?:\.\d+)?|{'|'.join(_WORDS)})\s*(?:\\(?:text|mbox|mathrm)\s*\{{\s*)?({_UNIT})\b(?:\s*\}})?"
_DOLLARS = r"\\?\$\s*(\d+)"  # "$12 and 75 cents": the dollars' unit is the sign
_SHARES = {"a half": Fraction(1, 2), "a quarter": Fraction(1, 4), "three quarters": Fraction(3, 4)}
_SHARE = re.compile(rf"(\d+)\s+and\s+({'|'.join(_SHARES)})\s+({_UNIT})\b", re.I)
# two parts or more, larger unit first (checked in `parts`), joined by "," / "and" / nothing;
# or a number and a share of its unit ("4 and a half hours")
COMPOUND = re.compile(
    rf"(?<![\w.])(?:{_SHARE.pattern}|(?:{_PART}|{_DOLLARS})(?:\s*(?:,\s*)?(?:\\(?:text|mbox)\s*\{{\s*)?(?:\band\b\s*)?(?:\}}\s*)?{_PART})+)",
    re.I,
)
_ONE_PART = re.compile(_PART, re.I)
_UNIT_AFTER = re.compile(rf"^\s*(-?\d+(?:\.\d+)?)\s*(?:\\(?:text|mbox|mathrm)\s*\{{\s*)?({_UNIT})\b", re.I)


def parts(text: str) -> list[tuple[Fraction, str, int]] | None:
    """(number, dimension, unit size) of each part of a compound quantity that is the whole
    of `text`, or None: parts of one dimension, each unit smaller than the one before."""
    m = COMPOUND.fullmatch(text.strip().rstrip("."))
    if not m:
        return None
    written = re.sub(rf"^{_DOLLARS}", r"\1 dollars", m.group(0))
    part = _SHARE.fullmatch(written)
    if part:  # "4 and a half hours"
        dim, size = _SIZES[part.group(3).lower()]
        return [(int(part.group(1)) + _SHARES[part.group(2).lower()], dim, size)]
    out = []
    for p in _ONE_PART.finditer(written):
        dim, size = _SIZES[p.group(2).lower()]
        number = p.group(1).lower()
        out.append((Fraction(_WORDS.get(number, 0) or number), dim, size))
    if len({d for _, d, _ in out}) != 1 or any(a[2] <= b[2] for a, b in zip(out, out[1:])):
        return None
    return out


def value_in(text: str, size: int | None = None) -> Fraction | None:
    """A compound quantity's value in the unit of `size` (default its first unit), or None."""
    ps = parts(text)
    if ps is None:
        return None
    total = sum(n * s for n, _, s in ps)
    return Fraction(total) / (size or ps[0][2])


def unit_of(text: str) -> tuple[Fraction, str, int] | None:
    """ "5.5 hours" -> (5.5, "time", 3600): a single number with a unit, or None."""
    m = _UNIT_AFTER.match(text)
    if not m or text[m.end() :].strip(" }.") != "":
        return None
    dim, size = _SIZES[m.group(2).lower()]
    return Fraction(m.group(1)), dim, size


def compare(gold: str, pred: str, *, gold_text: str = "") -> tuple[bool, str] | None:
    """The verdict when either answer is a compound quantity, else None (not this module's
    case). `gold`/`pred`: the extracted answers; `gold_text`: the gold as given, whose unit
    ("330 minutes") extraction may have dropped."""
    g_parts, p_parts = parts(gold), parts(pred)
    if g_parts is None and p_parts is None:
        return None
    if g_parts is not None and p_parts is not None:
        if g_parts[0][1] != p_parts[0][1]:
            return False, "compound quantities of different kinds"
        equal = value_in(gold, 1) == value_in(pred, 1)
        return equal, "compound quantities " + ("equal" if equal else "differ")
    compound, other = (pred, gold) if p_parts is not None else (gold, pred)
    dim = (p_parts or g_parts or [(Fraction(0), "", 0)])[0][1]
    single = unit_of(other) or (unit_of(gold_text.strip()) if other is gold else None)
    if single is not None:
        number, other_dim, size = single
        if other_dim != dim:
            return False, "a compound quantity against another kind of unit"
        value = value_in(compound, size)
    else:
        number = _number(other)
        value = value_in(compound)
    if number is None or value is None:
        return False, "a compound quantity against a non-number"
    equal = number == value
    return equal, "compound quantity " + ("equal" if equal else "differs") + " in one unit"


def _number(text: str) -> Fraction | None:
    s = re.sub(r"\\\$|\$|\\!|\{,\}|,(?=\d{3}\b)", "", text).strip()
    m = re.fullmatch(r"-?\d+(?:\.\d+)?", s)
    if m:
        return Fraction(m.group(0))
    frac = re.fullmatch(r"(-?\d+)\s*/\s*(\d+)|\\[dt]?frac\{(-?\d+)\}\{(\d+)\}", s)
    if frac:
        num, den = (int(g) for g in frac.groups() if g is not None)
        return Fraction(num, den) if den else None
    return None
