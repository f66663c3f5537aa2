r"""Arithmetic step checker: are the equations written in a reasoning step right?

    >>> check_step("She makes 9 * 2 = $18 every day.").status
    'correct'
    >>> check_final(["Mia has 5 * 8 = 40 apples.", "The answer is 40."], "40").status
    'correct'

`check_final` judges the step that ends a solution: besides its own equations, the answer
the solution states must follow from its work, i.e. equal the value of the last equation
on the path (so "The answer is 41." after "5 * 8 = 40" is wrong, though it has no equation).

It finds every arithmetic equation ("16 - 3 - 4 = 9", "9 * 2 = $18", "3 x 4 = 12", GSM8K's
"<<16-3-4=9>>" calculator annotations, LaTeX "\frac{3}{4} \times 8 = 6") and recomputes it
exactly with fractions. It is an imperfect verifier on purpose: it knows arithmetic, not
whether the right quantities were multiplied. Conventions:
- A chain "a = b = c" checks each link. A running computation "2 + 3 = 5 + 1 = 6" (the value
  carried into the next expression) counts as right, as a reader would take it.
- A claimed decimal may be rounded or truncated to the digits shown ("10 / 3 = 3.33", "= 3.3",
  not "= 3.4"); an integer claim must be exact.
- "n%" is n/100; a claimed "20%" also accepts 20 (as in "0.2 * 100 = 20%").
- Equations with variables ("x + 2 = 5"), bare labels ("Day 1 = 5") and numbers glued to
  words ("2x = 6") are not arithmetic and are skipped.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from verifiers._math.exact import eval_rational

MAX_STEP_CHARS = 20_000  # longer text is cut: bounded time whatever a model writes
CACHED = 1 << 14  # step verdicts remembered (least recently used out)


@dataclass(frozen=True)
class StepVerdict:
    status: str  # "correct" (all equations right), "wrong" (at least one wrong), "none" (none)
    equations: tuple[tuple[str, str, bool], ...]  # (expression, claimed value, arithmetic ok)


_ANNOTATION = re.compile(r"<<([^<>]{1,300})>>")
_TOKEN = re.compile(
    r"(?P<word>\d[\d.,]*[A-Za-z_]\w*|[A-Za-z_]\w*)"  # "2x", "5th", "apples": not arithmetic
    r"|(?P<num>(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?%?|\.\d+%?)"
    r"|(?P<op>\*\*|[+\-*/^])|(?P<lp>\()|(?P<rp>\))|(?P<eq>=)|(?P<space>\s+)|(?P<other>.)"
)
_LATEX_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")


def check_step(text: str) -> StepVerdict:
    """Check every arithmetic equation in one reasoning step. Never raises."""
    return _checked(str(text)[:MAX_STEP_CHARS])


@functools.lru_cache(maxsize=CACHED)
def _checked(text: str) -> StepVerdict:
    """check_step of a text at most MAX_STEP_CHARS long, remembered: a path's earlier steps
    are checked again with every step after them (check_final), and searches on one problem
    write the same steps again (the verdict is immutable and depends on the text alone)."""
    try:
        equations = _check(text)
    except Exception:  # a bug here must not stop a search; report "no evidence"
        equations = []
    if not equations:
        return StepVerdict("none", ())
    status = "correct" if all(ok for _, _, ok in equations) else "wrong"
    return StepVerdict(status, tuple(equations))


def check_final(steps: Sequence[str], answer: str | None) -> StepVerdict:
    """The verdict on the last of `steps` (a finished solution's step texts, in order) given
    the answer the solution states. Never raises.

    correct: the step's equations are right, the path's last equation is right, and the
             answer equals its value (as a claim is checked: exactly, or rounded to the
             decimals the answer shows);
    wrong:   one of the step's equations is wrong, the last equation is, or the answer
             differs from its value;
    none:    no answer, an answer that is not a number, or no equation on the path.
    The verdict's equations are the step's own plus, last, ("answer", answer, follows).
    """
    verdicts = [check_step(text) for text in steps]
    if not verdicts:
        return StepVerdict("none", ())
    own = verdicts[-1]
    last = next((v.equations[-1] for v in reversed(verdicts) if v.equations), None)
    try:
        stated = _prepare(str(answer)[:MAX_STEP_CHARS]).strip() if answer is not None else ""
        computed = _value(last[1]) if last is not None else None
        if own.status == "wrong" or computed is None or _value(stated) is None:
            return own
        follows = last is not None and last[2] and _matches(computed, stated)
    except Exception:  # never raise on model output: no evidence either way
        return own
    return StepVerdict("correct" if follows else "wrong",
                       own.equations + (("answer", stated, follows),))


def _check(text: str) -> list[tuple[str, str, bool]]:
    found: list[tuple[str, str, bool]] = []
    for m in _ANNOTATION.finditer(text):
        found.extend(_check_chain([s.strip() for s in _prepare(m.group(1)).split("=")]))
    seen = {(_key(e), _key(c)) for e, c, _ in found}
    # The text around an annotation repeats it ("16 - 3 - 4 = <<16-3-4=9>>9"): drop the copy.
    for equation in _equations_in(_prepare(_ANNOTATION.sub("", text))):
        if (_key(equation[0]), _key(equation[1])) not in seen:
            found.append(equation)
    return found


def _key(expr: str) -> str:
    return re.sub(r"[\s,$]", "", expr)


def _prepare(text: str) -> str:
    """Unify the ways models write operators and currency."""
    text = re.sub(r",\\!\s*", ",", text)  # 729,\!000: LaTeX thousands separator
    text = re.sub(r"[\d.]*\\overline\{\d*\}", " ? ", text)  # 0.\overline{3}: not exact here
    text = _LATEX_FRAC.sub(_fraction, text)
    text = re.sub(r"\\times|\\cdot|×|·|∗", "*", text)
    text = re.sub(r"\\div|÷", "/", text)
    text = re.sub(r"\\left|\\right|\\[,;!]|\\\$|\$|\\\(|\\\)|\\\[|\\\]", " ", text)
    text = text.replace("\\%", "%").replace("−", "-").replace("–", "-")
    for glyph, fraction in (("¼", " 1/4"), ("½", " 1/2"), ("¾", " 3/4")):
        text = text.replace(glyph, fraction)
    # "3 x 4" and "3x4": an x between two numbers is a times sign.
    return re.sub(r"(?<=[\d)%])\s*[xX]\s*(?=[\d(.])", " * ", text)


def _fraction(m: re.Match[str]) -> str:
    """\\frac{a}{b} -> (a/b), with inner parentheses only where a or b is not a number."""
    num, den = (x if re.fullmatch(r"\s*[\d.]+\s*", x) else f"({x})" for x in m.groups())
    return f"({num.strip()}/{den.strip()})"


def _equations_in(text: str) -> list[tuple[str, str, bool]]:
    found: list[tuple[str, str, bool]] = []
    run: list[re.Match[str]] = []
    before = None  # the token just before the current run (a word or punctuation), if any
    for m in _TOKEN.finditer(text):
        if m.lastgroup == "space":
            continue
        if m.lastgroup in ("num", "op", "lp", "rp", "eq"):
            run.append(m)
            continue
        found.extend(_run_equations(text, run, before, after=m))
        run, before = [], m
    found.extend(_run_equations(text, run, before, after=None))
    return found


# A word before a run that makes the run's first number part of a bigger product:
# "15 pages x 1/3 = 5", "3/4 of 364 = 273".
_CONNECTORS = {"x", "X", "times", "of", "by", "multiplied", "divided", "per"}


def _run_equations(
    text: str, run: list[re.Match[str]], before: re.Match[str] | None, after: re.Match[str] | None
) -> list[tuple[str, str, bool]]:
    """Equations in one maximal run of arithmetic tokens, e.g. "16 - 3 - 4 = 9"."""
    if not any(m.lastgroup == "eq" for m in run):
        return []
    segments: list[list[re.Match[str]]] = [[]]
    for m in run:
        if m.lastgroup == "eq":
            segments.append([])
        else:
            segments[-1].append(m)
    word = before if before is not None and before.lastgroup == "word" else None
    if segments[0] and _continues_before(segments[0], word):
        segments[0] = []
    if segments[-1] and _continues_after(segments[-1], after):
        segments[-1] = []
    texts = [" ".join(text[s[0].start() : s[-1].end()].split()) if s else "" for s in segments]
    texts[0], texts[-1] = _outer_side(texts[0], first=True), _outer_side(texts[-1], first=False)
    chains: list[list[str]] = [[]]
    for t in texts:  # an unusable side splits the chain in two
        if t and _value(t) is not None:
            chains[-1].append(t)
        else:
            chains.append([])
    return [eq for chain in chains for eq in _check_chain(chain)]


def _continues_before(side: list[re.Match[str]], word: re.Match[str] | None) -> bool:
    """Whether a run's first side is the tail of something before it: "x + 2 = 5" (starts
    with an operator), "pages x 1/3 = 5" (a connector word), "f(2) = 4" (glued to a word)."""
    if side[0].lastgroup == "op":
        # A "-" is a sign at the start of text or glued to its number ("get -1 + 1 = 0");
        # spaced after a word ("x - 3 = 5") it subtracts from that word.
        glued = len(side) > 1 and side[1].start() == side[0].end()
        return not (side[0].group() == "-" and (word is None or glued))
    return word is not None and (word.group() in _CONNECTORS or word.end() == side[0].start())


def _continues_after(side: list[re.Match[str]], after: re.Match[str] | None) -> bool:
    """Whether a run's last side goes on after it: "= 5 * x", "= (5/2)x"."""
    if side[-1].lastgroup == "op":
        return True
    return after is not None and after.lastgroup == "word" and after.start() == side[-1].end()


def _outer_side(s: str, first: bool) -> str:
    """The first or last side of a run, without parentheses that belong outside the equation.

    "(so 3 + 4 = 7)": the "(" before 3 and the ")" after 7 enclose the whole equation, so
    they go. "(5 + 4, 0 + 3) = (9, 3)": the ")" after 3 closes a tuple opened before the run,
    so that side is part of a bigger structure and is dropped.
    """
    enclosing, closing = ("(", ")") if first else (")", "(")
    s = s[::-1] if not first else s
    while s.startswith(enclosing) and s.count(enclosing) > s.count(closing):
        s = s[1:].strip()
    depth = 0
    for c in s:  # any unmatched bracket left means the side continues outside the run
        depth += (c == enclosing) - (c == closing)
        if depth < 0:
            return ""
    return s if first else s[::-1]


def _check_chain(sides: list[str]) -> list[tuple[str, str, bool]]:
    found = []
    for left, right in zip(sides, sides[1:]):
        lv, rv = _value(left), _value(right)
        if lv is None or rv is None:
            continue
        if not _has_operator(left):
            continue  # "Day 1 = 5" is a label, "48 = 100% + 20%" a definition
        if _matches(lv, right):
            found.append((left, right, True))
            continue
        lead = re.match(r"\s*((?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?%?)\s*[+\-*/^]", right)
        if lead and _matches(lv, lead.group(1)):  # running chain: "2 + 3 = 5 + 1 = 6"
            found.append((left, lead.group(1), True))
        else:
            found.append((left, right, False))
    return found


def _has_operator(side: str) -> bool:
    return bool(re.search(r"(?<=[\d)%\s])[+\-*/^]", side))


def _value(side: str) -> Fraction | None:
    """Exact value of one side: thousands commas dropped, n% read as n/100, ^ as power."""
    expr = re.sub(r"(?<=\d),(?=\d{3})", "", side)
    expr = re.sub(r"(\d+(?:\.\d+)?|\.\d+)%", r"(\1/100)", expr).replace("^", "**")
    return eval_rational(expr)


def _matches(value: Fraction, claimed: str) -> bool:
    """`value` equals the claimed side, exactly or as rounded to the decimals shown."""
    target = _value(claimed)
    if target is None:
        return False
    if value == target:
        return True
    literal = re.fullmatch(r"\s*-?(?:[\d,]*)(?:\.(\d+))?(%?)\s*", claimed)
    if not literal:
        return False  # an expression must agree exactly
    if literal.group(2) and value == target * 100:
        return True  # "0.2 * 100 = 20%"
    places = len(literal.group(1) or "")
    if places == 0:
        return False  # an integer claim must be exact: 7/2 = 3 is wrong
    unit = (Fraction(1, 100) if literal.group(2) else Fraction(1)) / 10**places
    rounded = abs(value - target) <= unit / 2
    truncated = abs(value - target) < unit and abs(target) <= abs(value) and value * target >= 0
    return rounded or truncated
