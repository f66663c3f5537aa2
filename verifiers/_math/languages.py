r"""Which language a text is written in, and its words in the English the readers know.

The data are one table a language, `verifiers/_math/languages/<code>.json`:
  words          common function words, by which a text in a Latin script is identified
  markers        what states the answer ("odpowiedź to", "jibu ni", "คำตอบคือ")
  checks         the head of a check of the answer ("Sprawdzenie", "Kontrol", "ตรวจสอบ")
  or, hedges     "or" between two values, and the "maybe" that offers a second one
  negations      "not" ("nie 60"); with `negation_after`, the language puts it after the
                 value ("60 değil"), and it becomes "isnot", which negates the value before it
  refusals       declining to answer ("nie można ustalić", "informasi tidak cukup")
  suppose        "if" ("jeśli", "eğer")
  corrections    "mistake" ("błąd", "hata")
  letters        letters only it writes among the tables ("ığş", "łśżąę"), which identify it too
  problem_heads  the head of a new problem ("Zadanie", "Soal"), which ends a few-shot run-on
  decimal, group the locale's decimal and grouping symbols (CLDR through Babel)
  numbers        {value: [words]}, spelled by num2words (reports/grader/lexicons.py fills
                 these three; the rest is written by hand)
The tables of French, German, Spanish, Portuguese, Italian, Russian, Chinese, Japanese and
Korean hold only their words, problem heads and numbers: their answer words are regexes in
verifiers/_math/lexicon.py.

`identify(text)` names the language: a script that only one table writes (Thai, Bengali,
Telugu, Devanagari, Hebrew, Greek, Hangul; Japanese where kana are, else Chinese), else,
among the tables of its script (Latin; Cyrillic; Arabic), the one whose words and letters the
text uses most, when they are enough of its words; "" for a text of no words, None for a
language no table reads (a script none writes: Georgian, Amharic, Tamil; Latin words none
knows). `translate(text, code)` rewrites each table word in the
English the readers know ("Odpowiedź:" -> "Answer:", "lub" -> "or", "nie" -> "not",
"czterdzieści dwa" -> "42"), longest phrase first, whole words only (but in Thai, Chinese and
Japanese, written without spaces).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

_TABLES = Path(__file__).with_name("languages")
# the English each role's words become (a marker with its colon becomes "Answer:")
ENGLISH = {"markers": "the answer is", "checks": "Check", "or": "or", "hedges": "maybe",
           "negations": "not", "refusals": "cannot determine", "suppose": "if",
           "corrections": "mistake", "problem_heads": "Problem"}
ROLES = tuple(ENGLISH)
# the letters of each script (ranges), and the languages it is read as
SCRIPTS = {
    "Latn": "A-Za-z\u00c0-\u024f\u1e00-\u1eff", "Cyrl": "\u0400-\u04ff", "Grek": "\u0370-\u03ff\u1f00-\u1fff",
    "Arab": "\u0600-\u06ff\u0750-\u077f\ufb50-\ufdff\ufe70-\ufeff", "Hebr": "\u0590-\u05ff",
    "Deva": "\u0900-\u097f", "Beng": "\u0980-\u09ff", "Telu": "\u0c00-\u0c7f", "Thai": "\u0e00-\u0e7f",
    "Hani": "\u3400-\u4dbf\u4e00-\u9fff", "Kana": "\u3040-\u30ff", "Hang": "\uac00-\ud7af",
}  # fmt: skip
_SCRIPT = re.compile("|".join(f"(?P<{name}>[{chars}]+)" for name, chars in SCRIPTS.items()))
_LETTER = re.compile(r"[^\W\d_]")
# no words: LaTeX ("\end{align*}", "$x$"), code ([asy] blocks, ``` fences), addresses
_LATEX = re.compile(r"\\[A-Za-z]+\*?(?:\{[^{}]*\})?|\$[^$]*\$|\[asy\].*?(?:\[/asy\]|$)|```.*?(?:```|$)|\S*://\S*", re.S)
_WORDS = {name: re.compile(f"[{chars}{'' if name != 'Latn' else chr(39)}]+") for name, chars in SCRIPTS.items()}
_UNITS = frozenset(["kg", "km", "cm", "mm", "ml", "mg", "min", "sec", "hr", "hrs", "km/h", "usd", "eur", "rp"])  # no language's words
_REACH = 4000  # characters from the end that identify the language
# the combining marks of the scripts read (Devanagari, Bengali, Telugu, Thai vowel signs; Arabic vowels)
MARKS = ("\u0300-\u036f\u064b-\u065f\u0670\u0900-\u0903\u093a-\u094f\u0951-\u0957\u0962\u0963"
         "\u0981-\u0983\u09bc-\u09d7\u09e2\u09e3\u0c00-\u0c04\u0c3e-\u0c56\u0c62\u0c63\u0e31\u0e34-\u0e3a\u0e47-\u0e4e")
# a word boundary in scripts with combining marks (Devanagari, Bengali, Telugu, Arabic vowels)
_BEFORE = rf"(?<![^\W\d_])(?<![{MARKS}])"
_AFTER = rf"(?![^\W\d_])(?![{MARKS}])"


WORD = re.compile(f"(?:[^\\W\\d_]|[{MARKS}])+")  # a word, with its combining marks ("কলা", "টি")


@dataclass(frozen=True)
class Language:
    code: str
    name: str
    script: str
    spaced: bool  # words are separated by spaces (not Thai, Chinese, Japanese)
    negation_after: bool  # "60 değil": the negation follows the value it negates
    letters: re.Pattern[str] | None  # letters only it writes among the tables ("ı", "ł", "ő")
    words: frozenset[str]  # its function words and those of its roles and numbers
    roles: dict[str, tuple[str, ...]]
    decimal: str
    group: str
    numbers: dict[str, tuple[str, ...]]


def _load(path: Path) -> Language:
    data = json.loads(path.read_text(encoding="utf-8"))
    # the words that identify it: its function words and every word of its roles and numbers
    said = [*data["words"], *(p for role in ROLES for p in data.get(role, ())),
            *(w for spellings in data.get("numbers", {}).values() for w in spellings)]
    words = frozenset(w for phrase in said for w in WORD.findall(phrase.lower()))
    return Language(
        path.stem, data["name"], data["script"], data["spaced"], data.get("negation_after", False),
        re.compile(f"[{data['letters']}]") if data.get("letters") else None, words,
        {role: tuple(data.get(role, ())) for role in ROLES}, data.get("decimal", "."),
        data.get("group", ","), {k: tuple(v) for k, v in data.get("numbers", {}).items()},
    )


TABLES = {lang.code: lang for lang in map(_load, sorted(_TABLES.glob("*.json")))}
# a script that one table reads; the others are told apart by letters only one of them has
_BY_SCRIPT = {"Thai": "th", "Beng": "bn", "Telu": "te", "Deva": "hi", "Hebr": "he", "Grek": "el",
              "Hang": "ko", "Kana": "ja"}


def identify(text: str) -> str | None:
    """The code of the language of `text`'s prose, "" when it has no words, None when no
    table reads it (a script no table writes, or Latin words no table knows well enough)."""
    tail = _LATEX.sub(" ", text[-_REACH:])
    counts: dict[str, int] = {}
    letters = 0
    for m in _SCRIPT.finditer(tail):
        name = m.lastgroup or ""
        counts[name] = counts.get(name, 0) + m.end() - m.start()
    letters = len(_LETTER.findall(tail))
    known = sum(counts.values())
    if letters == 0:
        return ""
    if letters - known > max(2, known // 5):  # Georgian, Amharic, Tamil, ...
        return None
    other = {k: v for k, v in counts.items() if k != "Latn"}
    if "Kana" in other and "Hani" in other:
        other["Kana"] += other.pop("Hani")
    if other and max(other.values()) * 2 >= counts.get("Latn", 0) / 3:
        script = max(other, key=other.__getitem__)
        if script in _BY_SCRIPT:
            return _BY_SCRIPT[script]
        if script == "Hani":
            return "zh"
        return _by_words(tail, script, short=False) if script in ("Arab", "Cyrl") else None
    return _by_words(tail, "Latn", short=True)


def _by_words(tail: str, script: str, *, short: bool) -> str | None:
    """Among the tables of a script, the one whose words and letters the text uses most, when
    they are enough of its words (see `identify`); short: a text of a few English words is
    English even when its words are in no table ("Janet makes dollars")."""
    words = [w.lower().strip("'") for w in _WORDS[script].findall(tail)
             if (len(w) > 1 or w in "aAoOeEyYi") and w.lower() not in _UNITS]
    if not words:
        return ""
    index, letters = _index(script)
    hits = dict.fromkeys(sorted(index[""]), 0)  # every table of the script, in a fixed order (ties)
    for w in words:  # a word counts once for each table that lists it or writes one of its letters
        for code in index.get(w, frozenset()) | {c for ch in set(w) & letters.keys() for c in letters[ch]}:
            hits[code] += 1
    best = max(hits, key=lambda code: (hits[code], code == "en"))
    if hits[best] >= max(1 if len(words) <= 3 else 2, 0.25 * len(words)):
        return best
    if short and len(words) <= 6 and (hits["en"] or len(words) <= 2) and all(w.isascii() for w in words):
        return "en"
    return best if script != "Latn" else None


@cache
def _index(script: str) -> tuple[dict[str, frozenset[str]], dict[str, frozenset[str]]]:
    """For the tables of a script: word -> the tables that list it ("" -> all of them), and
    letter -> the tables that alone write it."""
    tables = [lang for lang in TABLES.values() if lang.script == script]
    words: dict[str, set[str]] = {"": {lang.code for lang in tables}}
    letters: dict[str, set[str]] = {}
    for lang in tables:
        for w in lang.words:
            words.setdefault(w, set()).add(lang.code)
        for ch in lang.letters.pattern.strip("[]") if lang.letters else "":
            letters.setdefault(ch.lower(), set()).add(lang.code)
    return ({w: frozenset(c) for w, c in words.items()}, {ch: frozenset(c) for ch, c in letters.items()})


@cache
def _translation(code: str) -> tuple[re.Pattern[str], dict[str, str]] | None:
    """The pattern of every table phrase of a language (longest first) and each one's English."""
    lang = TABLES[code]
    english: dict[str, str] = {}
    for role, phrases in lang.roles.items():
        for phrase in phrases:
            said = "isnot" if role == "negations" and lang.negation_after else ENGLISH[role]
            if role == "markers" and phrase.endswith((":", "：")):
                phrase, said = phrase.rstrip(":："), "Answer"
            english.setdefault(phrase.lower(), said)
    for value, spellings in lang.numbers.items():
        for words in spellings:
            english.setdefault(words.lower(), value)
    if not english:
        return None
    alternatives = "|".join(re.escape(p).replace(r"\ ", r"\s+") for p in sorted(english, key=len, reverse=True))
    pattern = f"(?:{alternatives})" if not lang.spaced else f"{_BEFORE}(?:{alternatives}){_AFTER}"
    return re.compile(pattern, re.I), english


def translate(text: str, code: str) -> str:
    """`text` with the table words of language `code` in English (see the module docstring);
    "100 هزار" (100 thousand) is 100000, and in a language that groups digits by points
    ("2.500" for 2500 in Indonesian, German, Turkish) one point group is thousands."""
    found = _translation(code)
    if found is None:
        return text
    pattern, english = found
    text = _CURRENCY.sub(r"\1 ", text)
    thousand = _thousand(code)
    if thousand is not None:
        text = thousand.sub(lambda m: str(int(m.group(1)) * 1000), text)
    if TABLES[code].group == "." and "." in text:
        text = _POINT_GROUPS.sub(lambda m: m.group(0).replace(".", ""), text)

    def said(m: re.Match[str]) -> str:
        word = english.get(re.sub(r"\s+", " ", m.group(0).lower()), m.group(0))
        return f" {word} " if not TABLES[code].spaced else word

    return pattern.sub(said, text)


_CURRENCY = re.compile(r"\b(Rp|Rs|RM|TL|Kč|zł|USD|EUR|IDR|VND)(?=\d)")  # "Rp10.000": the number apart
_POINT_GROUPS = re.compile(r"(?<![\d.,])\d{1,3}(?:\.\d{3})+(?![\d]|[.,]\d)")


@cache
def _thousand(code: str) -> re.Pattern[str] | None:
    """A number of thousands written with the word ("100 هزار", "12 ribu", "5 bin")."""
    words = TABLES[code].numbers.get("1000", ())
    if not words:
        return None
    alternatives = "|".join(re.escape(w) for w in words)
    return re.compile(rf"(?<![\d.,])(\d{{1,3}})\s+(?:{alternatives}){_AFTER}", re.I)


def decimal_comma(code: str | None) -> bool:
    """Whether the language writes "3,5" for 3.5 (its locale's decimal symbol is a comma)."""
    return bool(code) and TABLES[code or "en"].decimal == ","
