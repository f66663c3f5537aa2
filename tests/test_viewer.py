"""The search-tree viewer (reports/figures/viewer.py): HTML page, GraphML export and CLI.

Fast tests run searches on the scripted engine (exact, model-free trees) or on hand-built
Results, and check the page by parsing it back: one row per node with its own text, scores
and token counts, rows in an order where every subtree is contiguous (the page folds
subtrees by that), exactly the chosen path marked, exact usage numbers, and every hostile
string escaped. The references are independent: networkx paths and descendants, and the
default selection rule re-implemented here. Slow tests render pages in headless Chromium.
"""

from __future__ import annotations

import html
import math
import os
import random
import re
import shutil
import struct
import subprocess
import sys
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import networkx as nx
import pytest

import search
import search.api
from reports.figures import viewer
from search.engines.fake import ScriptedEngine, ScriptedScorer
from search.types import Budget, Candidate, Node, Problem, Result, Step, Usage

PROBLEM = Problem(prompt="toy question", id="toy", answer="7")
TREE = {
    (): [("l1 ", 0.6), ("r1 ", 0.3), ("m1 ", 0.1)],
    ("l1 ",): [("l2 ", 0.9), ("r2 ", 0.1)],
    ("r1 ",): [("r2 ", 0.8), ("l2 ", 0.2)],
    ("m1 ",): [("l2 ", 1.0)],
}
RIGHT = ("r1 ", "r2 ", "The answer is 7.")


def children(path):
    if path in TREE:
        return TREE[path]
    if len(path) == 2:
        return [("The answer is 7.", 1.0)] if path == RIGHT[:2] else [("The answer is 3.", 1.0)]
    return []


def value(path):
    return 1.0 if path == RIGHT[:len(path)] else 0.2


def beam_result(seed=3, tree=children, problem=PROBLEM):
    engine = ScriptedEngine(tree, tokens_per_step=3)
    return search.solve(problem, algo="beam", budget=Budget(tokens=600), engine=engine,
                        scorer=ScriptedScorer(value), seed=seed, n=4, m=2)


# -- reading the page back ----------------------------------------------------------------
class Page(HTMLParser):
    """Rows (div.n) in page order with their attributes and text; usage cells; tag counts."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: list[dict] = []
        self.usage: dict[str, str] = {}
        self.tags: dict[str, int] = {}
        self._div_depth = 0  # >0 while inside a row
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        a = dict(attrs)
        if tag == "tr" and "data-usage" in a:
            self.usage[a["data-usage"] or ""] = a["data-value"] or ""
        if self._div_depth:
            self.rows[-1]["text"] += " "  # adjacent spans show apart (the row is a flex box)
        if tag != "div":
            return
        if self._div_depth:
            self._div_depth += 1
        elif "n" in (a.get("class") or "").split():
            self.rows.append({"id": int(a["data-id"] or ""), "parent": int(a["data-parent"] or ""),
                              "size": int(a["data-size"] or ""),
                              "classes": set((a.get("class") or "").split()),
                              "hidden": "hidden" in a, "text": ""})
            self._div_depth = 1

    def handle_endtag(self, tag):
        if tag == "div" and self._div_depth:
            self._div_depth -= 1

    def handle_data(self, data):
        if self._div_depth:
            self.rows[-1]["text"] += data


def by_score_choice(res: Result) -> Candidate:
    """The default rule (select="score"), re-implemented: the first finished candidate with
    an answer and the highest score."""
    pool = [c for c in res.candidates if c.finished and c.answer is not None]
    best = max(c.score for c in pool)
    return next(c for c in pool if c.score == best)


def graph_path(res: Result, node_id: int) -> list[int]:
    graph = nx.DiGraph((n.parent.id, n.id) for n in res.tree.walk() if n.parent is not None)
    return nx.shortest_path(graph, res.tree.id, node_id)


def hand_result(*, chosen: int | None, texts=("a ", "b. ", "c. "), **extra) -> Result:
    """root -> a -> {b., c.}; candidates b. (answer 1, score .9) and c. (answer 2, score .4)."""
    root = Node(problem=extra.pop("problem", PROBLEM), prompt_ids=range(3))
    a = Node(parent=root, step=Step(texts[0], (1, 2), (-0.5, -0.25), "stop"))
    b = Node(parent=a, step=Step(texts[1], (3,), (-0.1,), "eos"))
    c = Node(parent=a, step=Step(texts[2], (4, 5, 6), (-1.0, -1.0, -1.0), "eos"))
    a.scores.reward = 0.5
    b.scores.reward, b.scores.extras["value"] = 0.9, -0.125
    c.scores.reward = 0.4
    cands = (Candidate(b.text, "1", 0.9, True, b.id), Candidate(c.text, "2", 0.4, True, c.id))
    pick = None if chosen is None else cands[chosen]
    res = Result(answer=pick.answer if pick else None, text=pick.text if pick else "",
                 score=pick.score if pick else -math.inf, candidates=cands, tree=root,
                 usage=Usage(generated_tokens=6, prefill_tokens=3, forward_passes=4,
                             scorer_calls=3, flops=123.5, seconds=0.25),
                 seed=11, algo="hand", status="ok" if pick else "no_answer", knobs={"n": 2})
    return replace(res, **extra)


# -- the page -----------------------------------------------------------------------------
def test_every_node_has_one_row_with_its_text_scores_and_tokens():
    res = beam_result()
    page = viewer.to_html(res)
    rows = Page(page).rows
    nodes = list(res.tree.walk())
    assert len(nodes) > 5 and [r["id"] for r in rows] == [n.id for n in nodes]
    graph = nx.DiGraph((n.parent.id, n.id) for n in nodes if n.parent is not None)
    for i, (row, node) in enumerate(zip(rows, nodes)):
        assert row["parent"] == (node.parent.id if node.parent else -1)
        # the subtree is the contiguous run of rows after this one (what folding relies on)
        below = {r["id"] for r in rows[i + 1:i + row["size"]]}
        assert below == nx.descendants(graph, node.id)
        if node.step is None:
            assert PROBLEM.prompt in row["text"]
            continue
        assert node.step.text in row["text"]
        assert html.escape(node.step.text) in page
        assert f"{len(node.step.token_ids)} tok (total {node.n_tokens})" in row["text"]
        assert node.step.stop_reason in row["text"]
        assert ("fin" in row["classes"]) == node.finished == ("finished" in row["text"])
        shown = dict(re.findall(r"(\w+)=(-?[\d.e+-]+)", row["text"]))
        assert set(shown) == set(node.scores.flat())
        for key, v in node.scores.flat().items():
            assert math.isclose(float(shown[key]), v, rel_tol=1e-3)


def test_exactly_the_chosen_path_is_marked():
    res = beam_result()
    assert res.status == "ok" and res.answer == "7"
    pick = by_score_choice(res)
    expected = graph_path(res, pick.node_id)
    rows = Page(viewer.to_html(res)).rows
    marked = [r["id"] for r in rows if "chosen" in r["classes"]]
    assert marked == expected  # root first, in tree order
    leaf = next(n for n in res.tree.walk() if n.id == pick.node_id)
    assert tuple(s.text for s in leaf.steps()) == RIGHT
    assert sum("chosen answer:" in r["text"] for r in rows) == 1
    # the four finished paths are all candidates; only the chosen one says so
    assert sum("cand" in r["classes"] for r in rows) == len({c.node_id for c in res.candidates})


@pytest.mark.parametrize("chosen", [0, 1, None])
def test_chosen_path_of_a_hand_built_result(chosen):
    res = hand_result(chosen=chosen)
    nodes = list(res.tree.walk())
    expected = [] if chosen is None else graph_path(res, res.candidates[chosen].node_id)
    rows = Page(viewer.to_html(res)).rows
    assert [r["id"] for r in rows if "chosen" in r["classes"]] == expected
    assert [n.id for n in viewer.chosen_path(res)] == expected
    assert len(rows) == len(nodes) == 4


def test_header_shows_problem_answer_status_knobs_and_exact_usage():
    res = beam_result()
    page = viewer.to_html(res)
    parsed = Page(page)
    usage = res.usage.as_dict()
    assert set(parsed.usage) == set(usage)
    for key, v in usage.items():
        assert float(parsed.usage[key]) == v  # data-value round-trips exactly
    assert f"<td>{res.usage.generated_tokens}</td>" in page
    assert f"<td>{res.usage.scorer_calls}</td>" in page
    for text in (PROBLEM.prompt, f"<td>{res.status}</td>", f"<td>{res.seed}</td>",
                 "n=4", "m=2", "<td>beam</td>", f"<td>{res.answer}</td>"):
        assert text in page
    nodes = list(res.tree.walk())
    assert f'<span id="nrows">{len(nodes)}</span>' in page


HOSTILE = ['</script><script>alert(1)</script> ', '<img src=x onerror="alert(2)"> ',
           "\"quoted\" & 'single' <!-- ", "The answer is 7."]


def hostile_tree(path):
    return [(HOSTILE[len(path)], 1.0)] if len(path) < len(HOSTILE) else []


def test_hostile_text_is_escaped_everywhere():
    problem = Problem(prompt='<b onmouseover="x()">What</b> is </title></style>?', id="<i>")
    res = beam_result(tree=hostile_tree, problem=problem)
    res = replace(res, knobs={"sel": "<svg onload=alert(3)>"}, stats={"note": "</script>"})
    page = viewer.to_html(res)
    for raw in HOSTILE[:3] + [problem.prompt, "<svg", "<img", "<b onmouse", "</title></style>"]:
        assert raw.strip() not in page
    assert page.count("<script") == 1 and page.count("</script>") == 1
    parsed = Page(page)
    assert "img" not in parsed.tags and "svg" not in parsed.tags and "b" not in parsed.tags
    assert parsed.tags["script"] == 1
    # the browser shows the text verbatim: parsing the page gives back the raw steps
    for row, node in zip(parsed.rows, res.tree.walk()):
        assert (node.step.text if node.step else problem.prompt) in row["text"]


def test_long_text_is_capped_with_the_full_text_unfoldable():
    long = "x" * 150 + "<&>" + "y" * 900
    res = hand_result(chosen=0, texts=("a ", long, "c. "))
    page = viewer.to_html(res)
    row = next(r for r in Page(page).rows if "<&>" in r["text"])
    assert row["text"].count(long) == 1  # once whole (in div.full), preview is shorter
    preview = html.escape(long[:viewer.TEXT_CAP])
    assert f"<summary>{preview}…</summary>" in page
    assert f'<div class="full">{html.escape(long)}</div>' in page


def test_root_only_and_missing_trees(tmp_path):
    root = Node(problem=PROBLEM, prompt_ids=range(5))
    empty = Result(answer=None, text="", score=-math.inf, candidates=(), tree=root,
                   usage=Usage(prefill_tokens=5), seed=0, algo="beam", status="budget_exhausted")
    rows = Page(viewer.to_html(empty)).rows
    assert [r["id"] for r in rows] == [root.id] and not rows[0]["classes"] & {"chosen", "cand"}
    graph = viewer.to_graphml(empty, tmp_path / "root.graphml")
    back = nx.read_graphml(tmp_path / "root.graphml", node_type=int)
    assert list(back.nodes) == [root.id] and back.number_of_edges() == 0 == graph.number_of_edges()
    assert back.graph["status"] == "budget_exhausted" and back.graph["chosen_node"] == -1

    no_tree = replace(empty, tree=None)  # e.g. a Result rebuilt from JSONL
    page = viewer.to_html(no_tree)
    assert Page(page).rows == [] and "No search tree" in page
    viewer.to_graphml(no_tree, tmp_path / "none.graphml")
    assert nx.read_graphml(tmp_path / "none.graphml").number_of_nodes() == 0


def test_large_and_deep_trees_render_flat():
    rng = random.Random(0)
    root = Node(problem=PROBLEM)
    pool = [root]
    for i in range(3000):  # a random tree ...
        pool.append(Node(parent=rng.choice(pool), step=Step(f"s{i} ", (i,), (-0.1,), "stop")))
    tip = root
    for i in range(2000):  # ... and a 2000-deep chain (the browser caps nesting; rows are flat)
        tip = Node(parent=tip, step=Step(f"c{i} ", (i,), (-0.1,), "stop"))
    res = Result(answer=None, text="", score=-math.inf, candidates=(), tree=root, usage=Usage(),
                 seed=0, algo="hand", status="unfinished")
    page = viewer.to_html(res)
    parsed = Page(page)
    # Page counts only top-level rows: a row nested in another would go uncounted
    assert len(parsed.rows) == 5001 and parsed.rows[0]["size"] == 5001
    assert max(int(p) for p in re.findall(r"padding-left:(\d+)px", page)) == viewer.INDENT_CAP * 14


def test_to_html_writes_the_file_and_rejects_non_results(tmp_path):
    res = hand_result(chosen=0)
    out = tmp_path / "page.html"
    assert viewer.to_html(res, out) == out.read_text(encoding="utf-8")
    with pytest.raises(TypeError, match="search.Result"):
        viewer.to_html("not a result")  # type: ignore[arg-type]


# -- GraphML ------------------------------------------------------------------------------
def test_graphml_reads_back_with_the_same_tree(tmp_path):
    res = hand_result(chosen=1, texts=("ctl\x00\x1b ", '<img src=x onerror="y"> ', "c & d. "))
    res.tree.children[0].scores.extras["value"] = 1  # an int among floats (b's value): one
    # GraphML type per key
    viewer.to_graphml(res, tmp_path / "t.graphml")
    back = nx.read_graphml(tmp_path / "t.graphml", node_type=int)
    nodes = list(res.tree.walk())
    assert set(back.nodes) == {n.id for n in nodes}
    assert set(back.edges) == {(n.parent.id, n.id) for n in nodes if n.parent is not None}
    on_path = set(graph_path(res, res.candidates[1].node_id))
    for node in nodes:
        attrs = back.nodes[node.id]
        want = node.step.text if node.step else ""
        assert attrs["text"] == want.replace("\x00", "\ufffd").replace("\x1b", "\ufffd")
        assert attrs["chosen"] is (node.id in on_path)
        assert attrs["depth"] == node.depth and attrs["n_tokens"] == node.n_tokens
        assert attrs["stop_reason"] == (node.step.stop_reason if node.step else "")
        for key, v in node.scores.flat().items():
            assert attrs[f"score_{key}"] == float(v) and isinstance(attrs[f"score_{key}"], float)
    assert back.graph["answer"] == "2" and back.graph["chosen_node"] == res.candidates[1].node_id
    for key, v in res.usage.as_dict().items():
        assert back.graph[f"usage_{key}"] == v


# -- command line -------------------------------------------------------------------------
def test_cli_solves_and_writes_page_and_graphml(tmp_path, monkeypatch, capsys):
    # a named engine already in solve's cache: the CLI resolves --model to it, no model loads
    monkeypatch.setitem(search.api._ENGINES, "scripted-toy",
                        ScriptedEngine(children, tokens_per_step=3))
    out, gml = tmp_path / "tree.html", tmp_path / "tree.graphml"
    rc = viewer.main(["toy?", "--algo", "beam", "--model", "scripted-toy", "--knob", "n=4",
                      "--knob", "m=2", "--tokens", "600", "--seed", "5", "--out", str(out),
                      "--graphml", str(gml)])
    assert rc == 0
    printed = capsys.readouterr().out
    rows = Page(out.read_text(encoding="utf-8")).rows
    back = nx.read_graphml(gml, node_type=int)
    assert [r["id"] for r in rows] and {r["id"] for r in rows} == set(back.nodes)
    assert f"{len(rows)} nodes" in printed and "usage: generated_tokens=" in printed
    assert back.graph["algo"] == "beam" and back.graph["seed"] == 5
    assert '"n": 4' in back.graph["knobs"]

    rc = viewer.main(["toy?", "--algo", "beam", "--model", "scripted-toy", "--knob", "widht=2",
                      "--out", str(tmp_path / "bad.html")])
    assert rc == 2 and "no knob 'widht'" in capsys.readouterr().err
    assert not (tmp_path / "bad.html").exists()


# -- headless Chromium (slow) -------------------------------------------------------------
def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("no chromium binary on PATH (Debian: apt-get install -y chromium)")


def browse(tmp_path: Path, url: str, *args: str) -> subprocess.CompletedProcess:
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--hide-scrollbars", f"--user-data-dir={tmp_path / 'profile'}", *args, url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True)


def artifacts(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("TTS_ARTIFACTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.mark.slow
def test_chromium_renders_runs_the_script_and_folds(tmp_path):
    problem = Problem(prompt="<img src=x onerror=alert(0)> toy", id="toy")
    res = beam_result(tree=hostile_tree, problem=problem)
    page = tmp_path / "hostile.html"
    viewer.to_html(res, page)
    dom = Page(browse(tmp_path, page.as_uri(), "--dump-dom").stdout)
    nodes = list(res.tree.walk())
    assert [r["id"] for r in dom.rows] == [n.id for n in nodes]
    assert dom.tags.get("img", 0) == 0 and dom.tags["script"] == 1  # nothing injected
    assert f'data-ready="{len(nodes)}"' in browse(tmp_path, page.as_uri(), "--dump-dom").stdout

    res = beam_result()  # a branching tree: "#path" folds every subtree off the chosen path
    page = tmp_path / "beam.html"
    viewer.to_html(res, page)
    dom = Page(browse(tmp_path, page.as_uri() + "#path", "--dump-dom").stdout)
    on_path = set(graph_path(res, by_score_choice(res).node_id))
    visible = {n.id for n in res.tree.walk() if n.parent is None or n.parent.id in on_path}
    assert {r["id"] for r in dom.rows if not r["hidden"]} == visible
    assert len(visible) < len(dom.rows)


@pytest.mark.slow
def test_cli_on_the_embedded_reasoner_screenshot(tmp_path):
    """End to end: the CLI on tiny-arith writes the page; Chromium renders it to a PNG."""
    out = artifacts(tmp_path)
    html_path, gml = out / "viewer_tiny_arith.html", out / "viewer_tiny_arith.graphml"
    done = subprocess.run([sys.executable, "-m", "reports.figures.viewer", "What is 2+3?",
                           "--algo", "beam", "--model", "tiny-arith", "--knob", "n=4", "--knob", "m=2",
                           "--tokens", "400", "--out", str(html_path), "--graphml", str(gml)],
                          capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    back = nx.read_graphml(gml, node_type=int)
    dom = browse(tmp_path, html_path.as_uri(), "--dump-dom").stdout
    assert len(Page(dom).rows) == back.number_of_nodes() > 1
    assert f'data-ready="{back.number_of_nodes()}"' in dom
    shot = out / "viewer_tiny_arith.png"
    browse(tmp_path, html_path.as_uri(), f"--screenshot={shot}", "--window-size=1280,900")
    assert png_size(shot) == (1280, 900) and shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")
