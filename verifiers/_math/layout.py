r"""The layout of an output around its conclusion: markdown tables, a few-shot run-on, a bold
answer with an aside. Plain string work, linear in the text.

- `tables(text)`: a markdown table as lines of prose ("| Total | **42** |" -> "Total: **42**."),
  its rule ("|---|:--:|") gone, so the readers see a table's answer row as a statement;
- `run_on(text)`: the text up to a new problem's head on a line of its own ("Problem:",
  "Question 2:", "Q:"; other languages' heads are put in English first) that follows its math
  and leads to an answer of its own: a few-shot run-on, where the model invents the next
  problem and answers it;
- `bold(text)`: with no other stated answer, the last bold value of the last paragraph whose
  sentence goes on with an aside ("He needs **126** bottles, since 7 cases hold 18 per case"),
  read as a weak marker.
"""

from __future__ import annotations

import re

from verifiers._math.conclusion import Candidate, sentence_bounds
from verifiers._math.items import math_items
from verifiers._math.phrases import has_prose

# a markdown table's rows ("| Total | **42** |") and its rule ("|---|:--:|")
_TABLE_ROW = re.compile(r"^[ \t]*\|(.*)\|[ \t]*$", re.M)
_TABLE_RULE = re.compile(r"[\s|:-]*")
# the head of a new problem on a line of its own ("Problem:", "Question 2:", "Q:"), after
# which a few-shot run-on invents the next problem
_NEXT_PROBLEM = re.compile(
    r"\n[ \t#*]*(?:Problem|Question|Exercise|Task|Q)(?:\s*\d+)?[ \t*]*[:：.]", re.I)
_ANSWERED = re.compile(r"\b(?:answer|solution)\b|\\boxed|####", re.I)


def tables(text: str) -> str:
    """A markdown table as lines of prose: "| Total | 42 |" -> "Total: 42.", its rule gone."""
    if "|" not in text:
        return text

    def row(m: re.Match[str]) -> str:
        cells = [c.strip() for c in m.group(1).split("|")]
        if _TABLE_RULE.fullmatch(m.group(1)):
            return ""
        return (f"{cells[0]}: {', '.join(cells[1:])}" if len(cells) > 1 else cells[0]).rstrip(".") + "."

    return _TABLE_ROW.sub(row, text)


def run_on(text: str) -> str:
    """The text up to a new problem's head that follows its math and leads to an answer of its
    own (a few-shot run-on: the model invents the next problem and answers it)."""
    for m in _NEXT_PROBLEM.finditer(text):
        if re.search(r"\d", text[: m.start()]) and _ANSWERED.search(text, m.end()):
            return text[: m.start()]
    return text


# a bold value ("**126**") in the last paragraph, then the rest of its sentence: a unit or a
# few words, then an aside ("since ...", "(12 cartons of 7)") or the sentence's end
_BOLD = re.compile(r"\*\*([^*\n]{1,40})\*\*")
_ASIDE_AFTER = re.compile(
    r"(?:\s*[^\W\d_]+){0,3}\s*(?:$|[.。!]|,?\s*(?:since|because|as|for|from|which|—|–|-\s)|\s*[(:;])", re.I)


def bold(text: str) -> list[Candidate]:
    """With no other stated answer: the last bold value of the last paragraph, when what
    follows it in its sentence is an aside and no sentence after it holds math (a weak
    marker: "He needs **126** bottles, since 7 cases hold 18 per case.")."""
    paragraph = max(text.rstrip().rfind("\n\n"), 0)
    found = [m for m in _BOLD.finditer(text, paragraph) if not has_prose(m.group(1)) and re.search(r"\d", m.group(1))]
    if not found:
        return []
    m = found[-1]
    _, end, _ = sentence_bounds(text, m.end())
    if not _ASIDE_AFTER.match(text, m.end(), end) or math_items(text[end:]):
        return []
    return [Candidate(m.start(), m.end(), m.group(1).strip(), "phrase")]
