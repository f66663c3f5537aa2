"""A package from outside installed for one test, as pip would leave it: its module on
sys.path beside a dist-info whose entry_points.txt names what it adds, read by the project's
registries (search.plugins) and forgotten afterwards.

GREEDY_BRANCHES is a whole algorithm in such a package: one file, with its declarations on its
function (search.traits), and nothing edited in the project (tests/test_algos_contract.py
runs the whole contract on it; tests/test_algo_plugin.py reads its declarations back).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

from search import plugins

PLUGIN = "greedy_branches"
GREEDY_BRANCHES = '''
"""greedy_branches: n sampled first steps, each distinct one decoded greedily to its end;
the scorer's best path answers."""
from search.algos._run import finish
from search.fit import Width
from search.knobs import at_least, rules
from search.scoring import name, score_nodes
from search.select import Selection


@rules(at_least(1, "n", "max_depth"), width=Width(("n",)))
def greedy_branches(problem, engine, scorer, meter, *, seed=0, n=8, max_depth=8):
    root = engine.root(problem)
    firsts = engine.expand([root], n, seed=seed)[0]
    tips = list({kid.step.text: kid for kid in firsts}.values())  # one per distinct step
    for _ in range(max_depth - 1):
        live = [i for i, tip in enumerate(tips) if not tip.finished]
        if not live or meter.exhausted():
            break
        kids = engine.expand([tips[i] for i in live], 1, temperature=0.0, seed=seed)
        for i, (kid,) in zip(live, kids):
            tips[i] = kid
    scores = dict(zip([tip.id for tip in tips], score_nodes(scorer, problem, tips, meter=meter)))
    return finish(problem, root, tips, lambda tip: scores[tip.id], meter,
                  selection=Selection.of("score", name(scorer)))
'''
ENTRY_POINTS = f"[tts_search.algorithms]\n{PLUGIN} = branches_tts:{PLUGIN}\n"


@contextmanager
def installed(where: Path, monkeypatch: pytest.MonkeyPatch, module: str, source: str,
              entry_points: str) -> Iterator[Path]:
    """`module`.py holding `source`, in a distribution whose entry points are
    `entry_points` (entry_points.txt's text), on sys.path in `where` for the block."""
    (where / f"{module}.py").write_text(source)
    info = where / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)
    monkeypatch.syspath_prepend(str(where))
    plugins.rescan()
    try:
        yield where
    finally:
        monkeypatch.undo()
        plugins.rescan()
        sys.modules.pop(module, None)


def greedy_branches(where: Path, monkeypatch: pytest.MonkeyPatch
                    ) -> AbstractContextManager[Path]:
    """The package adding GREEDY_BRANCHES as algorithm PLUGIN, installed for a block."""
    return installed(where, monkeypatch, "branches_tts", GREEDY_BRANCHES, ENTRY_POINTS)
