"""A Result's search tree as data: the chosen path, a networkx graph, a GraphML file (for
networkx, Gephi, yEd). reports.figures.viewer draws the same tree as HTML."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from search.types import Node, Result, tree_to_networkx

if TYPE_CHECKING:
    import networkx as nx


# -- the chosen path --------------------------------------------------------------------------
def chosen_node_id(result: Result) -> int | None:
    """The node id of the chosen candidate, or None when no answer was chosen.

    `search.algos.Run.finish` copies the chosen candidate's answer, text and score into the
    Result; selection rules keep the first of equal candidates, so the first candidate that
    matches all three is the chosen one."""
    if result.answer is None:
        return None
    for c in result.candidates:
        same_score = c.score == result.score or (math.isnan(c.score) and math.isnan(result.score))
        if c.answer == result.answer and c.text == result.text and same_score:
            return c.node_id
    return None


def chosen_path(result: Result) -> list[Node]:
    """Nodes from the root to the chosen candidate's node ([] if none, or not in the tree)."""
    target = chosen_node_id(result)
    if target is None or result.tree is None:
        return []
    for node in result.tree.walk():
        if node.id == target:
            return node.path()
    return []


# -- GraphML ----------------------------------------------------------------------------------
_XML_ILLEGAL = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml(text: str) -> str:
    """XML 1.0 cannot hold control characters or lone surrogates: each becomes U+FFFD."""
    return _XML_ILLEGAL.sub("\ufffd", text)


def _graphml_value(value: Any) -> bool | int | float | str:
    """A GraphML-legal value: bool/int/float/str kept, None -> "", anything else -> JSON."""
    if isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return _xml(value)
    if value is None:
        return ""
    return _xml(json.dumps(value, default=repr, sort_keys=True))


def to_networkx(result: Result) -> nx.DiGraph:
    """`tree_to_networkx` plus viewer attributes, every value GraphML-legal.

    Node attributes: text, depth, n_tokens, cum_logprob, finished, score_<key> (always
    float), stop_reason, step_tokens, step_logprob, chosen (on the chosen path), candidate,
    and candidate_score/answer for candidates. Graph attributes: problem, answer, status,
    algo, seed, score, knobs/stats (JSON), chosen_node (-1 if none) and usage_<field>."""
    import networkx as nx

    if not isinstance(result, Result):
        raise TypeError(f"to_networkx needs a search.Result, got {type(result).__name__}")
    graph = tree_to_networkx(result.tree) if result.tree is not None else nx.DiGraph()
    on_path = {node.id for node in chosen_path(result)}
    cands = {c.node_id: c for c in reversed(result.candidates)}
    for node in result.tree.walk() if result.tree is not None else ():
        attrs = graph.nodes[node.id]
        for key in list(attrs):
            value = attrs[key]
            if key.startswith("score_"):  # one GraphML type per key: every score is a float
                attrs[key] = float(value) if isinstance(value, (int, float)) else math.nan
            else:
                attrs[key] = _graphml_value(value)
        attrs["stop_reason"] = node.step.stop_reason if node.step else ""
        attrs["step_tokens"] = len(node.step.token_ids) if node.step else 0
        attrs["step_logprob"] = node.step.logprob if node.step else 0.0
        attrs["chosen"] = node.id in on_path
        cand = cands.get(node.id)
        attrs["candidate"] = cand is not None
        if cand is not None:
            attrs["candidate_score"] = float(cand.score)
            attrs["answer"] = _graphml_value(cand.answer)
    problem = result.tree.problem if result.tree is not None else None
    chosen_id = chosen_node_id(result)
    graph.graph.update(
        problem=_xml(problem.prompt) if problem else "", problem_id=_xml(problem.id) if problem else "",
        answer=_graphml_value(result.answer), status=_xml(result.status), algo=_xml(result.algo),
        seed=result.seed, score=float(result.score),
        knobs=_graphml_value(dict(result.knobs)), stats=_graphml_value(dict(result.stats)),
        chosen_node=-1 if chosen_id is None else chosen_id,
        **{f"usage_{k}": v for k, v in result.usage.as_dict().items()})
    return graph


def to_graphml(result: Result, path: str | Path) -> nx.DiGraph:
    """Write the tree as GraphML (read back with networkx.read_graphml(path, node_type=int));
    returns the graph written."""
    import networkx as nx

    graph = to_networkx(result)
    nx.write_graphml(graph, str(path))
    return graph
