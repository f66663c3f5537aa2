"""Search-tree viewer: a Result's tree as one self-contained HTML page, or as GraphML
(reports.figures.tree_export).

    to_html(result, "tree.html")        # open in any browser; inline CSS/JS, no network
    to_graphml(result, "tree.graphml")  # for networkx, Gephi, yEd

    python -m reports.figures.viewer "What is 2+3?" --algo beam --model tiny-arith --out tree.html \
        [--graphml tree.graphml] [--knob n=8] [--tokens 2000] [--scorer steps] [--seed 0]

The page lists every node in depth-first order as one flat row (indented by depth), so trees
of any depth render (the browser's HTML parser caps element nesting; flat rows never nest).
A row shows the step text, its scores, token counts, log-probability and stop reason; rows on
the chosen path (root to the chosen candidate's node) carry the class "chosen". Subtrees fold
with a click: in depth-first order a subtree is a contiguous run of rows, so each row records
its subtree size and folding is one linear pass. Every string from the run is HTML-escaped.
"""

from __future__ import annotations

import argparse
import html
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from problems import datasets
from reports.figures.tree_export import chosen_node_id, chosen_path, to_graphml, to_networkx
from search.cli import add_solve_arguments, solve_args, usage_line
from search.types import Candidate, Node, Problem, Result

if TYPE_CHECKING:
    pass

TEXT_CAP = 240  # characters of a step shown in its row; the full text unfolds below it
INDENT_CAP = 48  # deeper rows stop moving right (the depth is printed on every row)
# the tree as data lives in reports.figures.tree_export; these are part of the viewer's API too
__all__ = ["chosen_node_id", "chosen_path", "main", "to_graphml", "to_html", "to_networkx"]


# -- formatting -------------------------------------------------------------------------------
def _esc(value: Any) -> str:
    return html.escape(value if isinstance(value, str) else str(value), quote=True)


def _num(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return str(value)
    return f"{value:.4g}"


def _short(value: Any, cap: int = 400) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= cap else text[:cap] + "…"


def _text_cell(text: str, cls: str) -> str:
    """A step's text: whole when short, else its first TEXT_CAP characters that unfold."""
    if len(text) <= TEXT_CAP:
        return f'<span class="{cls}">{_esc(text)}</span>'
    return (f'<details class="{cls}"><summary>{_esc(text[:TEXT_CAP])}…</summary>'
            f'<div class="full">{_esc(text)}</div></details>')


def _subtree_sizes(order: list[Node]) -> dict[int, int]:
    """{node id: nodes in its subtree, itself included}; children follow parents in `order`."""
    size = {node.id: 1 for node in order}
    for node in reversed(order):
        if node.parent is not None and node.parent.id in size:
            size[node.parent.id] += size[node.id]
    return size


def _row(node: Node, size: int, on_path: bool, cand: Candidate | None, chosen_id: int | None
         ) -> str:
    classes = ["n"]
    if on_path:
        classes.append("chosen")
    if node.finished:
        classes.append("fin")
    if cand is not None:
        classes.append("cand")
    parent = node.parent.id if node.parent is not None else -1
    pad = min(node.depth, INDENT_CAP) * 14
    toggle = '<span class="tg">▾</span>' if node.children else '<span class="tg leaf"></span>'
    if node.step is None:
        body = _text_cell(node.problem.prompt or "(chat messages)", "t root")
        meta = f"root · prompt {len(node.prompt_ids)} tok"
    else:
        body = _text_cell(node.step.text, "t")
        meta = (f"{len(node.step.token_ids)} tok (total {node.n_tokens}) · "
                f"lp {node.step.logprob:.3f} (cum {node.cum_logprob:.3f}) · "
                f"{_esc(node.step.stop_reason)}{' · finished' if node.finished else ''}")
    scores = " ".join(f'<span class="s">{_esc(k)}={_esc(_num(v))}</span>'
                      for k, v in node.scores.flat().items())
    badge = ""
    if cand is not None:
        tag = "chosen answer" if node.id == chosen_id else "candidate"
        answer = "(none)" if cand.answer is None else _short(cand.answer, 80)
        badge = (f'<span class="badge">{tag}: {_esc(answer)} '
                 f'(score {_esc(_num(cand.score))})</span>')
    return (f'<div class="{" ".join(classes)}" id="n{node.id}" data-id="{node.id}" '
            f'data-parent="{parent}" data-size="{size}" style="padding-left:{pad}px">'
            f'{toggle}<span class="id">#{node.id} d{node.depth}</span>{body}'
            f'<span class="meta">{meta}</span>{scores}{badge}</div>')


def _table(rows: list[tuple[str, str]], attrs: list[str] | None = None) -> str:
    attrs = attrs or [""] * len(rows)
    return "<table>" + "".join(f"<tr{a}><th>{_esc(k)}</th><td>{v}</td></tr>"
                               for (k, v), a in zip(rows, attrs)) + "</table>"


def _header(result: Result, order: list[Node], chosen_id: int | None, path: list[Node]) -> str:
    problem = result.tree.problem if result.tree is not None else None
    rows: list[tuple[str, str]] = []
    if problem is not None:
        prompt = problem.prompt or "\n".join(f"{m.get('role', '')}: {m.get('content', '')}"
                                             for m in problem.messages)
        rows += [("problem", f'<pre class="prob">{_esc(prompt)}</pre>'),
                 ("problem id", _esc(problem.id))]
        if problem.answer is not None:
            rows.append(("reference answer", _esc(problem.answer)))
    rows += [("answer", _esc("(none)" if result.answer is None else result.answer)),
             ("status", _esc(result.status)), ("score", _esc(_num(result.score))),
             ("algo", _esc(result.algo)), ("model", _esc(result.model or "(not recorded)")),
             ("scorer", _esc(result.scorer or "(none consulted)")),
             ("chosen by", _esc(result.selected_by or "(not recorded)")), ("seed", _esc(result.seed)),
             ("knobs", _esc(", ".join(f"{k}={_short(v)}" for k, v in result.knobs.items())
                            or "(defaults)"))]
    if result.stats:
        rows.append(("stats", _esc(", ".join(f"{k}={_short(v)}" for k, v in result.stats.items()))))
    where = "no answer chosen"
    if chosen_id is not None:
        where = (f"node #{chosen_id}, depth {len(path) - 1}" if path
                 else f"node #{chosen_id} is not in the tree")
    rows += [("tree", f'<span id="nrows">{len(order)}</span> nodes · '
                      f"{sum(n.finished for n in order)} finished · "
                      f"max depth {max((n.depth for n in order), default=0)} · "
                      f"{len(result.candidates)} candidates"),
             ("chosen path", _esc(where))]
    usage = result.usage.as_dict()
    labels = {"generated_tokens": "generated tokens", "prefill_tokens": "prefilled tokens",
              "forward_passes": "forward passes", "scorer_calls": "scorer calls",
              "scorer_tokens": "scorer tokens", "flops": "FLOPs", "seconds": "seconds"}
    shown = [(labels.get(k, k), _esc(f"{v:.4g}" if isinstance(v, float) else v))
             for k, v in usage.items()]
    # data-value holds the exact number (repr round-trips floats) for scripts and tests
    usage_attrs = [f' data-usage="{_esc(k)}" data-value="{_esc(repr(v))}"' for k, v in usage.items()]
    return (f"<h1>Search tree · {_esc(_title(result))}</h1><div class=\"cols\">{_table(rows)}"
            f"<div><h2>usage</h2>{_table(shown, usage_attrs)}</div></div>")


def _title(result: Result) -> str:
    """"beam · tiny-arith · scorer steps": what produced the tree."""
    return " · ".join([result.algo] + ([result.model] if result.model else [])
                      + ([f"scorer {result.scorer}"] if result.scorer else []))


def _candidates(result: Result, chosen_id: int | None) -> str:
    if not result.candidates:
        return "<p>No candidates.</p>"
    rows = "".join(
        f'<tr{" class=chosen" if c.node_id == chosen_id else ""}>'
        f'<td><a href="#n{c.node_id}">#{c.node_id}</a></td><td>{_esc(_num(c.score))}</td>'
        f"<td>{_esc('(none)' if c.answer is None else _short(c.answer, 120))}</td>"
        f"<td>{'yes' if c.finished else 'no'}</td></tr>" for c in result.candidates)
    return ("<table class=\"cands\"><tr><th>node</th><th>score</th><th>answer</th>"
            f"<th>finished</th></tr>{rows}</table>")


_CSS = """
body{font:13px/1.45 system-ui,sans-serif;margin:16px;color:#222}
h1{font-size:18px;margin:0 0 8px}h2{font-size:14px;margin:0 0 4px}
.cols{display:flex;gap:32px;align-items:flex-start;flex-wrap:wrap}
table{border-collapse:collapse}th,td{text-align:left;padding:2px 8px;vertical-align:top}
th{color:#555;font-weight:600}pre.prob{margin:0;white-space:pre-wrap;max-width:70ch}
.controls{margin:12px 0}.controls button{margin-right:6px}
#tree{font-family:ui-monospace,monospace;font-size:12px;border-top:1px solid #ddd}
.n{display:flex;flex-wrap:wrap;gap:0 8px;align-items:baseline;padding:2px 4px;border-bottom:1px solid #f0f0f0}
.n[hidden]{display:none}.n:target{outline:2px solid #f90}
.n.chosen{background:#e3f6e3}.n.chosen .t{font-weight:600}
.tg{cursor:pointer;width:1em;flex:none;color:#888;user-select:none}.tg.leaf{cursor:default}
.id{color:#999;flex:none}
.t{white-space:pre-wrap;max-width:80ch;overflow-wrap:anywhere}
.t.root{color:#555;font-style:italic}details.t summary{cursor:pointer}
.meta{color:#777;flex:none}.s{background:#eef;border-radius:3px;padding:0 4px;flex:none}
.fin .meta{color:#a40}.badge{background:#fde68a;border-radius:3px;padding:0 4px;flex:none}
.chosen .badge{background:#86efac}table.cands tr.chosen{background:#e3f6e3}
"""

# Rows are in depth-first order, so row i's subtree is rows i .. i+size-1. show() makes one
# pass, skipping over folded subtrees: O(rows) per click, whatever the tree's shape.
_JS = """
(function(){
  var rows=document.querySelectorAll('#tree .n'),n=rows.length,size=[],fold=[],at={};
  for(var i=0;i<n;i++){size.push(+rows[i].dataset.size);fold.push(0);at[rows[i].dataset.id]=i;}
  function show(){
    var i=0;
    while(i<n){
      rows[i].hidden=false;
      rows[i].firstChild.textContent=size[i]>1?(fold[i]?'\\u25b8':'\\u25be'):'';
      if(fold[i]){for(var j=i+1;j<i+size[i];j++)rows[j].hidden=true;i+=size[i];}else i++;
    }
  }
  function reveal(id){
    var i=at[id];
    while(i!==undefined){fold[i]=0;i=at[rows[i].dataset.parent];}
  }
  document.getElementById('tree').addEventListener('click',function(e){
    var t=e.target;
    if(t.classList&&t.classList.contains('tg')){var i=at[t.parentNode.dataset.id];
      if(size[i]>1){fold[i]^=1;show();}}
  });
  document.getElementById('do-expand').onclick=function(){
    for(var i=0;i<n;i++)fold[i]=0;
    show();
  };
  function collapse(){for(var i=0;i<n;i++)fold[i]=(i>0&&size[i]>1)?1:0;show();}
  function pathOnly(){
    for(var i=0;i<n;i++)fold[i]=(size[i]>1&&!rows[i].classList.contains('chosen'))?1:0;
    show();
  }
  document.getElementById('do-collapse').onclick=collapse;
  document.getElementById('do-path').onclick=pathOnly;
  // page.html#path and #collapse open folded; #n<id> unfolds the way to that node
  function jump(){
    var h=location.hash,id=h.slice(2);
    if(h==='#path')pathOnly();else if(h==='#collapse')collapse();
    else if(at[id]!==undefined){reveal(id);show();}
  }
  window.addEventListener('hashchange',jump);
  show();jump();
  document.body.setAttribute('data-ready',String(n));
})();
"""


def to_html(result: Result, path: str | Path | None = None) -> str:
    """The page for `result` (and written to `path`, UTF-8, when given)."""
    if not isinstance(result, Result):
        raise TypeError(f"to_html needs a search.Result, got {type(result).__name__}")
    order = list(result.tree.walk()) if result.tree is not None else []
    sizes = _subtree_sizes(order)
    chosen_id = chosen_node_id(result)
    path_nodes = chosen_path(result)
    on_path = {node.id for node in path_nodes}
    cands = {c.node_id: c for c in reversed(result.candidates)}  # the first wins on duplicates
    parts = ["<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
             f"<title>{_esc(_title(result))} search tree</title><style>{_CSS}</style>"
             "</head><body>",
             _header(result, order, chosen_id, path_nodes),
             '<div class="controls"><button id="do-expand">expand all</button>'
             '<button id="do-collapse">collapse all</button>'
             '<button id="do-path">chosen path only</button></div>']
    if not order:
        parts.append('<p class="empty">No search tree was recorded for this result.</p>')
    parts.append('<div id="tree">')
    parts += [_row(node, sizes[node.id], node.id in on_path, cands.get(node.id), chosen_id)
              for node in order]
    parts += ["</div><h2>candidates</h2>", _candidates(result, chosen_id),
              f"<script>{_JS}</script></body></html>"]
    page = "".join(parts)
    try:
        page.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates from a byte-level decode: keep the page valid
        page = page.encode("utf-8", "replace").decode("utf-8")
    if path is not None:
        Path(path).write_text(page, encoding="utf-8")
    return page


# -- command line -----------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m reports.figures.viewer",
                                 description="Solve one problem and write its search tree.")
    ap.add_argument("problem", nargs="?", default=None,
                    help="the question text (or --dataset and --index)")
    ap.add_argument("--dataset", default=None, help="take the problem from a dataset instead "
                    "(arith, codegen, gsm8k, math500, ..., a hub id, file or saved folder; see "
                    "reports.eval)")
    ap.add_argument("--index", type=int, default=0, help="which problem of --dataset (from 0)")
    ap.add_argument("--difficulty", type=int, default=None, help="--dataset level")
    ap.add_argument("--data", default=None, help="--dataset file or folder (benchmarks)")
    ap.add_argument("--data-seed", type=int, default=0, help="generator seed (arith, codegen)")
    datasets.add_arguments(ap)
    ap.add_argument("--out", default="tree.html", help="HTML page to write (default tree.html)")
    ap.add_argument("--graphml", default=None, help="also write the tree as GraphML here")
    add_solve_arguments(ap)
    args = ap.parse_args(argv)
    try:
        args.problem = _problem(args)
        result = solve_args(args)
    except (ValueError, TypeError, OSError, KeyError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    to_html(result, args.out)
    nodes = sum(1 for _ in result.tree.walk()) if result.tree is not None else 0
    gold = "" if args.problem.answer is None else f", reference {args.problem.answer}"
    print(f"answer: {result.answer} ({result.status}{gold}); {nodes} nodes -> {args.out}")
    print(f"by: {_title(result)}")
    if args.graphml:
        to_graphml(result, args.graphml)
        print(f"graphml -> {args.graphml}")
    print(usage_line(result.usage))
    return 0


def _problem(args: argparse.Namespace) -> Problem:
    """The question text as a Problem, or problem --index of --dataset."""
    if (args.problem is None) == (args.dataset is None):
        raise ValueError("give the question text or --dataset (with --index), not both")
    if args.dataset is None:
        return Problem.of(args.problem)
    from reports.eval.sweep import load_problems

    found = load_problems(args.dataset, path=args.data, data_seed=args.data_seed,
                          limit=args.index + 1, **datasets.options(args),
                          difficulty=None if args.difficulty is None else [args.difficulty])
    if args.index < 0 or args.index >= len(found):
        raise ValueError(f"--index {args.index}: {args.dataset} has {len(found)} problems here")
    return found[args.index]


if __name__ == "__main__":
    raise SystemExit(main())
