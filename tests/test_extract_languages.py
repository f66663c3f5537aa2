"""The grader's language tables (verifiers/_math/languages/*.json): a test per row, that is per
language and role, each building outputs from the row's words and holding the grader to the
verdict a reader of the language gives. References that are not the tables themselves: the
decimal symbol is CLDR's (Babel), number words are num2words' own spelling, and each
sentence's verdict is what it says (a hedge or a refusal answers no gold).
"""

from __future__ import annotations

import pytest

from verifiers._math.languages import TABLES, identify, translate
from verifiers.math import verify

TABLED = sorted(code for code, lang in TABLES.items() if lang.roles["markers"])
MGSM = {"bn", "de", "es", "fr", "ja", "ru", "sw", "te", "th", "zh"}
ISSUE = {"nl", "pl", "tr", "vi", "id", "ar", "hi", "cs", "sv", "uk", "el", "ro", "hu", "fi", "da",
         "fa", "he", "th"}


def marker(code: str) -> str:
    """The language's first answer marker, as written before a value."""
    return TABLES[code].roles["markers"][0]


def rows(role: str) -> list[tuple[str, str]]:
    return [(code, word) for code in TABLED for word in TABLES[code].roles[role]]


def test_every_language_the_issue_names_has_a_table() -> None:
    assert set(TABLES) >= MGSM | ISSUE
    assert ISSUE | {"bn", "sw", "te"} <= set(TABLED)  # their words are read from the tables
    for code in TABLED:
        roles = TABLES[code].roles
        assert all(roles[r] for r in ("markers", "checks", "or", "hedges", "negations", "refusals",
                                      "suppose", "problem_heads")), code


@pytest.mark.parametrize("code", sorted(TABLES))
def test_decimal_symbol_is_cldrs(code: str) -> None:
    from babel.numbers import get_decimal_symbol, get_group_symbol

    assert (TABLES[code].decimal, TABLES[code].group) == (get_decimal_symbol(code), get_group_symbol(code))


@pytest.mark.parametrize("code", sorted(c for c in TABLED if TABLES[c].decimal == ","))
def test_a_decimal_comma_is_read_in_its_language(code: str) -> None:
    text = f"{marker(code)} 3,5"
    assert verify("3.5", text).correct, translate(text, code)
    assert not verify("35", text).correct and not verify("3", text).correct


@pytest.mark.parametrize("code", sorted(TABLES))
def test_the_tables_own_words_identify_it(code: str) -> None:
    lang = TABLES[code]
    sample = " ".join(sorted(lang.words)[:40])
    assert identify(sample) == code


@pytest.mark.parametrize("code, word", rows("markers"))
def test_marker_row(code: str, word: str) -> None:
    text = f"{word} 42."
    assert verify("42", text).correct, (translate(text, code), verify("42", text))
    assert not verify("24", text).correct


@pytest.mark.parametrize("code, word", rows("checks"))
def test_check_row(code: str, word: str) -> None:
    """A check after the conclusion never replaces it."""
    text = f"{marker(code)} 42.\n\n{word}: 42 − 2 = 40 ✓"
    assert verify("42", text).correct, translate(text, code)
    assert not verify("40", text).correct


@pytest.mark.parametrize("code, word", rows("or"))
def test_or_row(code: str, word: str) -> None:
    """Two values offered: no single gold is the answer."""
    text = f"{marker(code)} 59 {word} 60."
    assert not verify("59", text).correct and not verify("60", text).correct, translate(text, code)


@pytest.mark.parametrize("code, word", rows("hedges"))
def test_hedge_row(code: str, word: str) -> None:
    text = f"{marker(code)} 59, {word} 60."
    assert not verify("59", text).correct and not verify("60", text).correct, translate(text, code)


@pytest.mark.parametrize("code, word", rows("negations"))
def test_negation_row(code: str, word: str) -> None:
    """A negated value is not stated: "nie 60", "60 değil"."""
    negated = f"60 {word}" if TABLES[code].negation_after else f"{word} 60"
    text = f"{marker(code)} {negated}."
    assert not verify("60", text).correct, translate(text, code)


@pytest.mark.parametrize("code, word", rows("refusals"))
def test_refusal_row(code: str, word: str) -> None:
    """A refusal, then a guess: no answer, whatever the guess computes."""
    text = f"{word}. 3 × 20 = 60."
    verdict = verify("60", text)
    assert not verdict.correct and (verdict.unread or "abstains" in verdict.reason), translate(text, code)


@pytest.mark.parametrize("code, word", rows("suppose"))
def test_suppose_row(code: str, word: str) -> None:
    """A supposed value is not concluded."""
    text = f"{word} 3 × 20 = 60"
    assert not verify("60", text).correct, translate(text, code)


@pytest.mark.parametrize("code, word", rows("corrections"))
def test_correction_row(code: str, word: str) -> None:
    """A correction withdraws what came before it."""
    text = f"{marker(code)} 12. {word}! {marker(code)} 14."
    assert verify("14", text).correct and not verify("12", text).correct, translate(text, code)


@pytest.mark.parametrize("code, word", rows("problem_heads"))
def test_problem_head_row(code: str, word: str) -> None:
    """A few-shot run-on ends the output: the invented problem's answer is not the answer."""
    text = f"{marker(code)} 18.\n\n{word}: 20 + 5?\n{marker(code)} 25."
    assert verify("18", text).correct and not verify("25", text).correct, translate(text, code)


@pytest.mark.parametrize("code", sorted(c for c in TABLES if TABLES[c].numbers))
def test_number_words_row(code: str) -> None:
    """Every number the table spells is read as its value, in num2words' spelling where
    num2words has the language (an independent reference for the table's copy)."""
    from num2words import CONVERTER_CLASSES, num2words

    for value in (2, 7, 15, 42, 99, 100):
        spelled = num2words(value, lang=code) if code in CONVERTER_CLASSES else TABLES[code].numbers[str(value)][0]
        text = f"{marker(code)} {spelled}." if code in TABLED else spelled
        assert verify(str(value), text).correct, (code, value, translate(text, code))
        assert not verify(str(value + 1), text).correct


@pytest.mark.parametrize("code", sorted(TABLED))
def test_unmarked_conclusion_row(code: str) -> None:
    """With no marker: the last statement is the answer when nothing doubts it, and unread
    when a hedge or a negation follows it."""
    lang = TABLES[code]
    plain = "12 + 30 = 42."
    assert verify("42", plain).correct
    doubted = f"12 + 30 = 42, {lang.roles['hedges'][0]} 43."
    assert not verify("42", doubted).correct and not verify("43", doubted).correct
