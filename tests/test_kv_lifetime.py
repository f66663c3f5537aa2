"""The engine owns its KV's lifetime: no algorithm, report or trainer frees KV by hand.

Node KV is a cache under a byte cap (search.runtime.kvstore.NodeStore, HFConfig.kv_cache):
past it, the least recently used segments no call reads are dropped, leaves first, and a
call that needs one computes it again, uncharged. So a search's tokens, answers and usage
are the same under any cap (its logprobs and scores to the rounding of a forward of another
shape), the KV held stays under the cap plus one call's batch, a tree nobody holds takes its
KV with it, and a solve's end drops its trees' KV while its prompt stays cached.
"""

from __future__ import annotations

import ast
import copy
import gc
import math
from pathlib import Path
from typing import Any

import pytest
import torch

import search
from search.runtime.kvpool import BLOCK, Segment
from search.runtime.kvstore import Gone, NodeStore
from search.types import Budget, Node, Problem

ROOT = Path(__file__).resolve().parent.parent
PROBLEM = Problem(prompt="12+34=", answer="46")
ALGOS = [("beam", {"n": 4, "m": 2}), ("best_of_n", {"n": 4}),
         ("astar", {"width": 2, "k": 2}), ("particle_filter", {"n": 4}),
         ("mcts", {"iterations": 6})]
RUN = dict(budget=Budget(tokens=160), step_tokens=6, max_depth=5, seed=3, progress=False)


def calls_retain(path: Path) -> bool:
    tree = ast.parse(path.read_text(), str(path))
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
               and n.func.attr == "retain" for n in ast.walk(tree))


def test_no_algorithm_report_or_trainer_frees_kv():
    files = [*(ROOT / "search").rglob("*.py"), *(ROOT / "reports").rglob("*.py"),
             *(ROOT / "training").rglob("*.py"), *(ROOT / "rewards").rglob("*.py")]
    assert any(p.parent.name == "algos" for p in files)
    assert [str(p.relative_to(ROOT)) for p in files if calls_retain(p)] == []


def test_no_engine_offers_retain():
    from search.engines.base import Engine
    from search.engines.fake import ScriptedEngine
    from search.engines.hf import HFEngine
    from search.engines.openai.engine import OpenAIEngine

    for cls in (Engine, HFEngine, ScriptedEngine, OpenAIEngine):
        assert not hasattr(cls, "retain"), cls


# -- the store's policy, by hand --------------------------------------------------------------
def seg(n: int = 4) -> Segment:
    return Segment(kv=torch.zeros(1, 2, 1, n, 1), n=n)  # 8 bytes a column: 32 bytes


def tree() -> tuple[Node, Node, Node]:
    from search.types import Step

    root = Node(problem=PROBLEM, prompt_ids=(1, 2, 3, 4))
    a, b = (Node(parent=root, step=Step(t, (5, 6, 7, 8), (0.0,) * 4, "stop")) for t in "ab")
    return root, a, b


def test_the_store_drops_leaves_first_least_recently_used_first():
    from search.types import Step

    store = NodeStore(cap=100)  # over 100 bytes: dropped down to 88
    root, a, b = tree()
    for node in (root, a, b):
        store.put(node, seg())
    with store.pinned([a]):  # a (and root) read by a call: now the most recently used
        pass
    c = Node(parent=root, step=Step("c", (9,), (0.0,), "stop"))
    store.put(c, seg())  # 128 bytes: b, then a go (leaves, least recently used first)
    assert [store.get(x) is not None for x in (root, a, b, c)] == [True, False, False, True]
    assert store.gone(a) == store.gone(b) == Gone(4, False) and store.gone(c) is None
    assert store.dropped == 2 and store.held_bytes == 64


def test_a_parent_goes_after_its_leaf_and_a_pinned_path_stays():
    from search.types import Step

    store = NodeStore(cap=100)
    root, a, b = tree()
    for node in (root, a, b):
        store.put(node, seg())
    a1 = Node(parent=a, step=Step("d", (9,), (0.0,), "stop"))
    with store.pinned([b]):
        store.put(a1, seg())  # 128: a is no leaf; a1 goes, then a, its parent, a leaf now
    assert [store.get(x) is not None for x in (root, a, b, a1)] == [True, False, True, False]
    assert store.gone(a1) == store.gone(a) == Gone(4, False)

    store = NodeStore(cap=40)
    root, a, b = tree()
    with store.pinned([b]):  # a call reads root and b: they stay, over the cap
        store.put(root, seg())
        store.put(b, seg())
        store.put(a, seg())  # 96: a alone may go
        assert store.get(a) is None and store.held_bytes == 64 and store.peak == 64
    store.put(a, seg())  # nothing pinned: down to 7/8 of the cap, b before a (least recent)
    assert [store.get(x) is not None for x in (root, a, b)] == [True, False, False]
    assert NodeStore(cap=0).cap == 0
    with pytest.raises(ValueError, match="cap"):
        NodeStore(cap=-1)


# -- searches under any cap -------------------------------------------------------------------
def facts(result: Any) -> tuple[Any, ...]:
    """What must not depend on the cap: the tree's shape and tokens, the answers and the
    usage (seconds aside); with the floats (logprobs, scores) apart, compared to rounding."""
    nodes = list(result.tree.walk())
    index = {n.id: i for i, n in enumerate(nodes)}
    shape = [(index.get(n.parent.id) if n.parent else None,
              None if n.step is None else (n.step.token_ids, n.step.stop_reason),
              sorted(k for k in n.scores.flat())) for n in nodes]
    floats = [x for n in nodes for x in (n.step.logprobs if n.step else ())]
    floats += [float(v) for n in nodes for k, v in sorted(n.scores.flat().items())
               if k != "merged_into"]
    floats += [c.score for c in result.candidates]
    usage = {k: v for k, v in result.usage.as_dict().items() if k != "seconds"}
    cands = [(c.text, c.answer, c.finished, index.get(c.node_id)) for c in result.candidates]
    return (result.answer, result.status, shape, usage, cands), floats


def same(a: Any, b: Any) -> None:
    (fa, xa), (fb, xb) = facts(a), facts(b)
    assert fa == fb
    assert len(xa) == len(xb) and all(
        (math.isnan(x) and math.isnan(y)) or math.isclose(x, y, rel_tol=1e-4, abs_tol=1e-5)
        for x, y in zip(xa, xb)), (xa, xb)


def hf_engine(tiny_model: Any, **options: Any) -> Any:
    from search.engines.hf import HFEngine

    model, tok = tiny_model
    return HFEngine(copy.deepcopy(model), tok, chat=False, device="cpu", **options)


@pytest.mark.parametrize("algo,knobs", ALGOS, ids=[a for a, _ in ALGOS])
def test_a_search_is_the_same_under_any_kv_cap(tiny_model, algo, knobs):
    """A random Llama, the logprob scorer: with room for everything nothing is dropped; at a
    quarter of that run's peak and at 1 byte (every segment no call reads goes at once),
    the same Result, the drops made good by uncharged recomputation."""
    roomy = hf_engine(tiny_model)
    ref = search.solve(PROBLEM, algo, engine=roomy, **RUN, **knobs)
    assert roomy.kv.store.dropped == roomy.kv.recomputed == 0
    assert ref.usage.generated_tokens > 0
    for cap in (roomy.kv.store.peak // 4, 1):
        tight = hf_engine(tiny_model, kv_cache=cap)
        same(search.solve(PROBLEM, algo, engine=tight, **RUN, **knobs), ref)
        assert tight.kv.store.dropped > 0 and tight.kv.recomputed > 0
        assert tight.cached_tokens == 0  # the solve's end dropped its trees' KV


@pytest.mark.parametrize("algo,knobs", [("beam", {"n": 4, "m": 2}), ("mcts", {"iterations": 6})],
                         ids=["beam", "mcts"])
def test_a_prm_search_is_the_same_under_any_kv_cap(algo, knobs):
    """The trained tiny-arith reasoner scored by its PRM (a second KV tree, the PRM's):
    both caps at 1 byte give the Result both give with room for everything."""
    from problems import arith
    from rewards.prm import load_prm
    from search.engines.hf import HFEngine

    problem = arith.generate(1, seed=7, difficulty=4)[0]
    results, trees = [], []
    for cap in (None, 1):
        options: dict[str, Any] = {} if cap is None else {"kv_cache": cap}
        engine = HFEngine.load("tiny-arith", device="cpu", **options)
        prm = load_prm("tiny-arith-prm", device="cpu")
        if cap is not None:
            prm.kv.store.cap = cap
        results.append(search.solve(problem, algo, engine=engine, scorer=prm,
                                    budget=Budget(tokens=200), seed=1, progress=False,
                                    **knobs))
        trees.append((engine.kv, prm.kv))
    same(results[1], results[0])
    assert all(kv.store.dropped == 0 for kv in trees[0])
    (engine_kv, prm_kv) = trees[1]
    assert engine_kv.store.dropped > 0 and engine_kv.recomputed > 0
    if algo == "beam":  # the PRM KV of pruned beams goes (MCTS scores along one path)
        assert prm_kv.store.dropped > 0


def test_a_long_search_holds_at_most_the_cap_and_one_batch(tiny_model, monkeypatch):
    """Node KV held (each segment's n columns, in a pool whole blocks of them, measured after
    every store write) stays under the cap plus the largest call's batch (its rows' paths and
    the children it writes, each node's columns in whole blocks where the KV is in a pool),
    where the search's whole tree is several times that."""
    from search.engines.hf import HFEngine

    cap = 8 << 10
    eng = hf_engine(tiny_model, kv_cache=cap)
    eng.eos_ids = frozenset()  # no early EOS: the beams run to the budget
    column = eng.kv.column_bytes
    held, batch = [0], [0]

    def blocks(n: int) -> int:  # the columns n tokens take
        return -(-n // BLOCK) * BLOCK if eng.kv.pool is not None else n

    put, expand = NodeStore.put, HFEngine.expand

    def measured_put(self: NodeStore, node: Node, s: Segment) -> None:
        put(self, node, s)
        held[0] = max(held[0], sum(x.nbytes for _, x in self.items()))

    def measured_expand(self: Any, nodes: Any, n: int = 1, **kw: Any) -> Any:
        paths = {a.id: a for node in nodes for a in node.path()}
        tokens = sum(blocks(a.n_tokens - (a.parent.n_tokens if a.parent else 0))
                     for a in paths.values())
        batch[0] = max(batch[0], (tokens + len(nodes) * n * blocks(kw["max_tokens"])) * column)
        return expand(self, nodes, n, **kw)

    monkeypatch.setattr(NodeStore, "put", measured_put)
    monkeypatch.setattr(HFEngine, "expand", measured_expand)
    res = search.solve(PROBLEM, "beam", engine=eng, budget=Budget(tokens=2000), step_tokens=6,
                       max_depth=60, seed=0, n=4, m=2, progress=False)
    tree = sum(blocks(n.n_tokens - (n.parent.n_tokens if n.parent else 0))
               for n in res.tree.walk())
    assert tree * column > 3 * (cap + batch[0])  # the whole tree would not fit the bound
    assert eng.kv.store.dropped > 0
    assert 0 < held[0] <= cap + batch[0], (held[0], cap, batch[0])


def test_a_tree_nobody_holds_takes_its_kv_with_it(tiny_engine):
    root = tiny_engine.root(PROBLEM)
    kids = tiny_engine.expand([root], 3, stop=None, max_tokens=4)[0]
    assert tiny_engine.cached_tokens == len(root.prompt_ids) + 3 * 3
    del root, kids
    gc.collect()  # a tree is a reference cycle (parent <-> children)
    assert tiny_engine.cached_tokens == 0


def test_a_solves_end_drops_its_kv_and_keeps_its_prompt(tiny_engine):
    """The Result keeps its tree; the engine keeps none of its node KV, but the prompt's stays
    in the prompt cache, so the next seed prefills none of it."""
    r = search.solve(PROBLEM, "best_of_n", engine=tiny_engine, budget=Budget(tokens=40), n=2,
                     seed=0, progress=False)
    assert tiny_engine.cached_tokens == 0 and r.tree.children
    assert tiny_engine.kv.prompts.unheld_bytes > 0
    before = tiny_engine.kv.prefilled
    again = search.solve(PROBLEM, "best_of_n", engine=tiny_engine, budget=Budget(tokens=40),
                         n=2, seed=1, progress=False)
    assert tiny_engine.kv.prefilled == before  # a child's last token is fed by no expand here
    assert again.usage.prefill_tokens == len(r.tree.prompt_ids)  # charged as the forward saved
