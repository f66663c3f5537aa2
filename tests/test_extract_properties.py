"""Properties of the conclusion reader in every language it reads (hypothesis draws the numbers,
the language, the marker and whether a check follows):
- a wrong final answer after a right intermediate is never accepted, even when a check after
  it recomputes the right value;
- a right final answer after a wrong intermediate is accepted, and the intermediate is not;
- a refusal after a right computation is no answer;
- number words read back as the number an independent writer spelled.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from verifiers import verify
from verifiers._math.numwords import value_of

# per language: steps ("{a} × {b} = {p}", then "{p} − {d} = {w}"), answer markers, and checks
LANGUAGES = {
    "en": ("First, {a} × {b} = {p}. Then {p} − {d} = {w}.",
           ["The answer is {v}.", "Final answer: {v}", "So the answer is $\\boxed{{{v}}}$.", "**Answer:** {v}"],
           ["Verification: {w} + {d} = {p}. ✓", "To double-check: {w} + {d} = {p}."]),
    "zh": ("首先，{a} × {b} = {p}。然后 {p} − {d} = {w}。",
           ["因此，答案是 {v}。", "答案：{v}", "所以最终答案为 {v}。"],
           ["验证：{w} + {d} = {p}，正确。", "检验：{w} + {d} = {p}。"]),
    "fr": ("D'abord, {a} × {b} = {p}. Ensuite, {p} − {d} = {w}.",
           ["Donc la réponse est {v}.", "Réponse : {v}", "La réponse finale est {v}."],
           ["Vérification : {w} + {d} = {p}.", "**Vérification** : {w} + {d} = {p}."]),
    "de": ("Zuerst: {a} × {b} = {p}. Dann {p} − {d} = {w}.",
           ["Also ist die Antwort {v}.", "Antwort: {v}", "Die Antwort lautet {v}."],
           ["Überprüfung: {w} + {d} = {p} ✓", "Probe: {w} + {d} = {p}."]),
    "es": ("Primero, {a} × {b} = {p}. Luego, {p} − {d} = {w}.",
           ["Por lo tanto, la respuesta es {v}.", "Respuesta: {v}", "La respuesta final es {v}."],
           ["Verificación: {w} + {d} = {p}.", "Comprobación: {w} + {d} = {p}."]),
    "pt": ("Primeiro, {a} × {b} = {p}. Depois, {p} − {d} = {w}.",
           ["Portanto, a resposta é {v}.", "Resposta: {v}", "A resposta final é {v}."],
           ["Verificação: {w} + {d} = {p}.", "Verificando: {w} + {d} = {p}."]),
    "ru": ("Сначала {a} · {b} = {p}. Затем {p} − {d} = {w}.",
           ["Ответ: {v}.", "Итак, ответ равен {v}.", "Окончательный ответ: {v}"],
           ["Проверка: {w} + {d} = {p}.", "Проверим: {w} + {d} = {p}."]),
    "ja": ("まず、{a} × {b} = {p}。次に {p} − {d} = {w}。",
           ["したがって、答えは {v} です。", "答え：{v}", "最終的な答えは {v} です。"],
           ["検証：{w} + {d} = {p} となり、正しい。", "確認：{w} + {d} = {p}。"]),
}  # fmt: skip
# a refusal after the computation, per language
REFUSALS = {
    "en": "But the question is missing information, so I cannot determine the answer.",
    "zh": "但是题目缺少条件，无法确定答案。",
    "fr": "Mais il manque des informations : il est impossible de déterminer la réponse.",
    "de": "Aber es fehlen Angaben, daher lässt sich die Antwort nicht bestimmen.",
    "es": "Pero falta información, así que no se puede determinar la respuesta.",
    "pt": "Mas faltam dados, então não é possível determinar a resposta.",
    "ru": "Но данных недостаточно, поэтому невозможно определить ответ.",
    "ja": "しかし情報が不足しているため、答えは判断できません。",
}
CASES = st.fixed_dictionaries({
    "language": st.sampled_from(sorted(LANGUAGES)), "a": st.integers(2, 30), "b": st.integers(2, 30),
    "d": st.integers(1, 9), "marker": st.integers(0, 3), "check": st.sampled_from([None, 0, 1]),
})  # fmt: skip


def _text(case: dict, final: str) -> tuple[str, int, int]:
    """(solution text, the intermediate p, the computed w): steps, a marker stating `final`
    ("p" or "w"), and maybe a check of w that recomputes p."""
    steps, markers, checks = LANGUAGES[case["language"]]
    p = case["a"] * case["b"]
    w = p - case["d"]
    parts = [steps.format(a=case["a"], b=case["b"], p=p, d=case["d"], w=w),
             markers[case["marker"] % len(markers)].format(v=p if final == "p" else w)]
    if case["check"] is not None:
        parts.append(checks[case["check"]].format(w=w, d=case["d"], p=p))
    return "\n\n".join(parts), p, w


@settings(max_examples=300, deadline=None)
@given(CASES)
def test_wrong_final_after_right_intermediate_is_never_accepted(case: dict) -> None:
    text, p, w = _text(case, final="w")  # the gold is p, computed on the way; the text ends at w
    assert not verify(str(p), text).correct, text
    assert verify(str(w), text).correct, text  # and its conclusion is read


@settings(max_examples=300, deadline=None)
@given(CASES)
def test_right_final_after_wrong_intermediate_is_accepted(case: dict) -> None:
    text, p, w = _text(case, final="p")  # concludes p; w is a value computed on the way
    assert verify(str(p), text).correct, text
    assert not verify(str(w), text).correct, text


@settings(max_examples=100, deadline=None)
@given(CASES)
def test_refusal_after_computation_is_no_answer(case: dict) -> None:
    steps = LANGUAGES[case["language"]][0]
    p = case["a"] * case["b"]
    text = steps.format(a=case["a"], b=case["b"], p=p, d=case["d"], w=p - case["d"]) + " " + REFUSALS[case["language"]]
    for gold in (p, p - case["d"]):
        verdict = verify(str(gold), text)
        assert not verdict.correct and "abstains" in verdict.reason, (text, verdict)


_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
         "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def _spell(n: int, hyphen: bool, joiner: str) -> str:
    """An independent English writer of 0 <= n < 10**9: "forty-two", "one hundred and five"."""
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + (("-" if hyphen else " ") + _ONES[n % 10] if n % 10 else "")
    for size, name in ((10**6, "million"), (1000, "thousand"), (100, "hundred")):
        if n >= size:
            rest = n % size
            head = f"{_spell(n // size, hyphen, joiner)} {name}"
            return head + (f"{joiner}{_spell(rest, hyphen, joiner)}" if rest else "")
    raise AssertionError(n)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10**9 - 1), st.booleans(), st.sampled_from([" ", " and "]))
def test_number_words_read_back(n: int, hyphen: bool, joiner: str) -> None:
    assert value_of(_spell(n, hyphen, joiner)) == str(n)


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 999), st.sampled_from(["The answer is {}.", "So she has {} apples left."]))
def test_number_words_in_a_conclusion(n: int, template: str) -> None:
    """From two on ("one" in prose is a pronoun as often as a number: numwords.py)."""
    text = template.format(_spell(n, True, " "))
    assert verify(str(n), text).correct, text
    assert not verify(str(n + 1), text).correct, text
