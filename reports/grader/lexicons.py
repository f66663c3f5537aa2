"""Fills the parts of the grader's language tables (verifiers/_math/languages/*.json) that a
maintained source knows, so that no one writes them by hand:

- `decimal` and `group`: the decimal and grouping symbols of the language's locale, from CLDR
  through Babel;
- `numbers`: {value: [words]} for 2..100 and the hundreds to 1000, spelled by num2words (the
  languages it covers); one, the article in most languages, is left out. Swahili and Greek,
  which num2words lacks, are composed from their units and tens (both regular); Chinese,
  Japanese, Korean and Thai are left out, since their numerals are single letters inside
  other words ("一共" is "in total", "ห้าม" is "forbid").

    python -m reports.grader.lexicons      # rewrite those fields in every table
"""

from __future__ import annotations

import json
from pathlib import Path

TABLES = Path(__file__).resolve().parents[2] / "verifiers" / "_math" / "languages"
VALUES = [*range(2, 101), *range(200, 1001, 100)]
UNSPELLED = {"en", "zh", "ja", "ko", "th", "hi"}  # numwords.py; single letters inside words; irregular 21..99
_TURKISH_TENS = ("on", "yirmi", "otuz", "kırk", "elli", "altmış", "yetmiş", "seksen", "doksan")
# (units 1..9, tens 10..90, hundred): Swahili and Greek compose the rest regularly
_COMPOSED = {
    "sw": (["moja", "mbili", "tatu", "nne", "tano", "sita", "saba", "nane", "tisa"],
           ["kumi", "ishirini", "thelathini", "arobaini", "hamsini", "sitini", "sabini", "themanini", "tisini"],
           " na ", "mia"),
    "el": (["ένα", "δύο", "τρία", "τέσσερα", "πέντε", "έξι", "επτά", "οκτώ", "εννέα"],
           ["δέκα", "είκοσι", "τριάντα", "σαράντα", "πενήντα", "εξήντα", "εβδομήντα", "ογδόντα", "ενενήντα"],
           " ", "εκατό"),
}
_GREEK_TEENS = {11: "έντεκα", 12: "δώδεκα", 13: "δεκατρία", 14: "δεκατέσσερα", 15: "δεκαπέντε",
                16: "δεκαέξι", 17: "δεκαεπτά", 18: "δεκαοκτώ", 19: "δεκαεννέα"}
_SWAHILI_BIG = {1000: "elfu moja"}


def composed(code: str, n: int) -> str | None:
    units, tens, joiner, hundred = _COMPOSED[code]
    if code == "el" and n in _GREEK_TEENS:
        return _GREEK_TEENS[n]
    if n < 10:
        return units[n - 1]
    if n < 100:
        t, u = divmod(n, 10)
        return tens[t - 1] + (joiner + units[u - 1] if u else "")
    if n == 100:
        return hundred if code == "el" else "mia moja"
    if code == "sw" and n < 1000:
        return f"mia {units[n // 100 - 1]}"
    return _SWAHILI_BIG.get(n) if code == "sw" else None


def spelled(code: str) -> dict[str, list[str]]:
    from num2words import CONVERTER_CLASSES, num2words

    out: dict[str, list[str]] = {}
    for n in VALUES:
        if code in _COMPOSED:
            words = composed(code, n)
        elif code in CONVERTER_CLASSES and code not in UNSPELLED:
            words = num2words(n, lang=code)
        else:
            words = None
        if words:
            variants = {words.lower(), words.lower().replace("-", " "), words.lower().replace(" و ", " و")}
            tens = next((t for t in _TURKISH_TENS if code == "tr" and words.startswith(t) and words != t), None)
            if tens:  # num2words writes "kırkiki"; Turkish writes "kırk iki"
                variants.add(f"{tens} {words[len(tens):]}")
            out[str(n)] = sorted(variants)
    return out


def fill(path: Path) -> None:
    from babel.numbers import get_decimal_symbol, get_group_symbol

    table = json.loads(path.read_text(encoding="utf-8"))
    code = path.stem
    table["decimal"] = get_decimal_symbol(code)
    table["group"] = get_group_symbol(code)
    table["numbers"] = spelled(code)
    path.write_text(json.dumps(table, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def main() -> None:
    for path in sorted(TABLES.glob("*.json")):
        fill(path)
        print(path.name)


if __name__ == "__main__":
    main()
