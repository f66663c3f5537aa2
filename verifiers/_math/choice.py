r"""Multiple-choice answers: the letter an answer names, the options a problem gives, and the
verdict of a choice against a choice gold.

`letter_of(answer)`: "(B)", "B", "B)", "B.", "(B) 27", "option B", "Option (C): 12", "选项B",
"вариант Б" (Cyrillic А-Д are A-E) -> the letter; None for anything else ("B = 5" is no
choice, nor is a lower-case "b", a variable).
`options_of(text)`: "(A) 12 (B) 27 (C) 30" or one option a line ("A. 12", "B) 27") -> {letter:
text}, the letters in order from A; a list of options (a problem's metadata) is lettered A, B...
`compare(gold, pred, options, equal)`: the verdict when either side is a choice, else None:
- a letter against a letter: equal letters;
- with the problem's options, a letter against an option's text (either side the gold): the
  letter's option against the text, by `equal` (the grader's own comparison); a prediction
  that gives a letter and a text ("(B) 27") must agree with itself: the text must be the
  letter's option, or the answer is no answer;
- with no options, "(B) 27" against a gold that is no letter is its text, 27.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

_CYRILLIC = str.maketrans("АБВГД", "ABCDE")
_NAMES = r"(?:option|choice|answer|opci[óo]n|op[çc][ãa]o|opzione|r[ée]ponse|antwort|вариант|选项|選択肢|选)"
_ARTICLE = r"(?:the|la|le|l'|el|die|der)"
_WORDS = rf"(?:(?:{_ARTICLE}\s*)?{_NAMES}|{_ARTICLE}(?=\s))"  # "option C", "la (B)", "the option C"
_LETTER = re.compile(
    rf"\s*(?:{_WORDS}\s*[:：]?\s*)?(?:\(([A-JАБВГД])\)|\[([A-JАБВГД])\]|([A-JАБВГД])(?:[).:]|(?=\s|$)))"
    r"(?:\s*[:\-–]?\s*(.*?))?\s*\.?\s*",
    re.I | re.S,
)
_OPTION_MARK = re.compile(r"(?:(?<=\s)|^)\(([A-J])\)\s*|(?:^|\n)[ \t]*([A-J])[.):][ \t]+")


def letter_of(answer: str) -> tuple[str, str] | None:
    """(letter, the text after it) of an answer that names a choice, or None."""
    m = _LETTER.fullmatch(answer)
    if not m:
        return None
    letter = next(g for g in m.groups()[:3] if g)
    if not (letter.isupper() or m.group(0).lstrip()[:1] in "(["):  # "b" alone is a variable
        return None
    bare = m.group(3) is not None and not re.match(rf"\s*{_WORDS}", answer, re.I)
    rest = (m.group(4) or "").strip()
    if bare and rest and not re.match(r"[).:]", answer.strip()[1:2]):  # "B = 5", "A 12": no choice
        return None
    return letter.translate(_CYRILLIC).upper(), rest


def options_of(source: str | Sequence[str] | Mapping[str, str] | None) -> dict[str, str]:
    """The options a problem gives, {letter: text}; {} when it gives none (fewer than two)."""
    if not source:
        return {}
    if isinstance(source, Mapping):
        return {str(k).strip("() ").upper(): str(v).strip() for k, v in source.items()}
    if not isinstance(source, str):
        return {chr(65 + k): str(v).strip() for k, v in enumerate(source)}
    marks = [(m.group(1) or m.group(2), m.start(), m.end()) for m in _OPTION_MARK.finditer(source)]
    # the run of marks lettered A, B, C... (a problem may say "(A)" in its text before them)
    start = max((k for k, (letter, _, _) in enumerate(marks) if letter == "A"), default=None)
    if start is None:
        return {}
    run = [marks[start]]
    for mark in marks[start + 1 :]:
        if ord(mark[0]) != ord(run[-1][0]) + 1:
            break
        run.append(mark)
    if len(run) < 2:
        return {}
    out = {}
    for (letter, _, end), nxt in zip(run, [*run[1:], None]):
        text = source[end : nxt[1] if nxt else len(source)]
        out[letter] = text.split("\n")[0].strip().rstrip(",;").strip() if nxt is None else text.strip().rstrip(",;").strip()
    return out


def compare(gold: str, pred: str, options: Mapping[str, str], equal: Callable[[str, str], bool],
            plain: tuple[str, str] = ("", "")) -> tuple[bool, str] | None:
    """The verdict of a choice answer (see the module docstring), or None when neither side
    is one. `plain`: both answers' normal forms, in which "\\text{(C)}" is already "C"."""
    g, p = (letter_of(raw) or (letter_of(form) if re.fullmatch(r"[A-E]", form) else None)
            for raw, form in zip((gold, pred), plain))
    if g is None and p is None:
        return None
    if p is not None and p[1] and options and p[0] in options and not equal(options[p[0]], p[1]):
        return False, f"the prediction's letter {p[0]} and its text {p[1]!r} disagree"
    if g is not None and p is not None:
        return g[0] == p[0], "same choice" if g[0] == p[0] else "different choices"
    if g is not None:  # a letter gold, a text prediction
        named = [k for k, text in options.items() if equal(text, pred)]
        if len(named) != 1:
            return False, "the prediction names no single option"
        return named[0] == g[0], f"the prediction is option {named[0]}"
    assert p is not None  # a text gold, a letter prediction
    if p[0] in options:
        right = equal(gold, options[p[0]])
        return right, f"option {p[0]} is {options[p[0]]!r}"
    if p[1]:
        return equal(gold, p[1]), "the text after the letter"
    return False, "a letter against a gold that is no letter, with no options given"
