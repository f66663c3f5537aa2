"""Many searches on one engine (search.solve_many, search.runtime.sched): every Result, row
and meter is exactly what each search gives alone, whatever the concurrency and whatever else
shares its forwards; errors, frees and memory stay with their own search; each engine owns
its scheduler, and no module holds one."""

from __future__ import annotations

import copy
import json
import threading
import time
from typing import Any

import pytest
import torch
from devices import exact
from helpers import dump, written

import search
from search import registry
from search.budget import Meter
from search.engines.hf import HFEngine
from search.many import SolveManyError, concurrently
from search.runtime import sched
from search.runtime.kv import KVLayout, SlabCache, batch_cache
from search.runtime.paged import PagedCache
from search.runtime.passes import Job, Pass, cache_arg, call, run_passes
from search.runtime.sched import SchedStats, Scheduler
from search.session import Bindable, Session
from search.types import Budget, Node, Problem


@pytest.fixture(scope="module")
def arith_engine(device):
    return search.get_engine("tiny-arith", device=device, **exact(device))


def arith_problems(n: int = 4) -> list[Problem]:
    from problems import arith

    return arith.generate(n, seed=7, difficulty=4)


GRID = [("greedy", {}), ("best_of_n", {"n": 6, "select": "weighted_vote", "agg": "min"}),
        ("beam", {"n": 8, "m": 2, "agg": "min"}), ("particle_filter", {"n": 6}),
        ("astar", {"width": 2, "k": 2}), ("mcts", {"iterations": 6})]


@pytest.mark.parametrize("algo,knobs", GRID, ids=[a for a, _ in GRID])
def test_results_identical_at_any_concurrency(arith_engine, algo, knobs):
    """The same problems x seeds alone (solve), then 4 and 16 at once (solve_many): the
    same answers, candidates, scores, trees, token counts and forward passes."""
    probs = arith_problems()
    scorer = "steps" if registry.uses_scorer(algo, knobs) else None
    alone = [dump(search.solve(p, algo, engine=arith_engine, scorer=scorer, seed=s, **knobs))
             for p in probs for s in (0, 1)]
    for c in (4, 16):
        many = search.solve_many(probs, algo, engine=arith_engine, scorer=scorer,
                                 seeds=(0, 1), concurrency=c, **knobs)
        assert [dump(r) for r in many] == alone, c


def test_value_head_and_token_budget_identical_at_any_concurrency(arith_engine):
    """The value head reads hidden states the engine records during merged forwards; a
    token budget stops each search where it stops alone."""
    probs = arith_problems(3)
    budget = Budget(tokens=120)
    alone = [dump(search.solve(p, "beam", budget, engine=arith_engine, scorer="value", seed=s,
                               n=8, m=2)) for p in probs for s in (0, 1)]
    many = search.solve_many(probs, "beam", budget, engine=arith_engine, scorer="value",
                             seeds=(0, 1), concurrency=6, n=8, m=2)
    assert [dump(r) for r in many] == alone
    assert all(r.usage.generated_tokens <= 120 + 8 * 256 for r in many)


def test_extend_and_next_logprobs_identical_at_any_concurrency(tiny_model, device):
    """self_eval forces a question after every step (extend, next_logprobs): the scorer's
    forwards are merged across searches too."""
    model, tok = tiny_model
    eng = HFEngine(copy.deepcopy(model), tok, chat=False, device=device, **exact(device))
    probs = [Problem(prompt=p) for p in ("1+2=", "3*4-5=", "9-8+7=", "2*2*2=")]
    kw: dict[str, Any] = dict(n=4, m=2, step_tokens=6, max_depth=3)
    alone = [dump(search.solve(p, "beam", engine=eng, scorer="self_eval", seed=1, **kw))
             for p in probs]
    many = search.solve_many(probs, "beam", engine=eng, scorer="self_eval", seeds=(1,),
                             concurrency=4, **kw)
    assert [dump(r) for r in many] == alone


# -- the merged forward against each Pass alone -----------------------------------------------
def _passes(eng: HFEngine, twins: list[Pass] | None = None) -> list[Pass]:
    """Passes of every kind the engine makes: decode rows of different path lengths, a shared
    prefix, a prefill of several tokens with every position's logits, one row. twins: gets
    each Pass again over a batch cache with the rows' paths copied in (kv.batch_cache: what
    transformers' forward reads), for a reference."""
    roots = [eng.root(Problem(prompt=p)) for p in ("12345678+" * 3, "9-8=" * 5, "1+1=", "77*6=")]
    eng.kv.ensure(roots, eng.session)
    kids = eng.expand(roots[:2], 3, stop=None, max_tokens=4, seed=2)
    rows = [k for ks in kids for k in ks]
    eng.kv.ensure(rows, eng.session)
    kv = eng.kv
    out = []

    def made(nodes: list[Node], room: int, ids: torch.Tensor, pos: torch.Tensor, keep: int,
             hidden: bool) -> Pass:
        paths = [kv.path_parts(n) for n in nodes]
        copied = [[seg.columns for seg in path] for path in paths]
        with torch.inference_mode():  # (a copied path is written into the pool as the engine does)
            paged = kv.batch(paths, room)
        for cache in (paged, batch_cache(copied, room, kv.layout, share_prefix=4)):
            p = kv.pass_for(ids, pos, cache, cache.attention_mask(ids.shape[1]), keep, False)
            p.hidden = hidden
            if twins is None:
                return p
            twins.append(p)
        return twins.pop(-2)

    def decode(nodes: list[Node], hidden: bool) -> Pass:
        ids = torch.tensor([[5 + i] for i in range(len(nodes))], device=kv.device)
        pos = torch.tensor([[n.n_tokens] for n in nodes], device=kv.device)
        return made(nodes, 3, ids, pos, 1, hidden)

    out.append(decode(rows, True))  # 6 rows, two trees: no common prefix
    out.append(decode(kids[0], False))  # 3 rows of one root: the prompt shared (cascade)
    out.append(decode(roots[2:3], True))  # a lone row
    ids = torch.tensor([[5, 6, 7, 8, 9], [10, 11, 12, 13, 14]], device=kv.device)
    pos = torch.tensor([[n.n_tokens] for n in roots[2:]], device=kv.device) + torch.arange(
        5, device=kv.device)
    out.append(made(roots[2:], 5, ids, pos, 0, False))  # 2 rows x 5 tokens each
    return out


def _clone(p: Pass) -> Pass:
    c = p.cache
    if isinstance(c, PagedCache):  # (a fresh one: nothing of its rows' own written yet)
        assert c.length == 0 and c.pool is not None and c.table is not None
        L, _, _, KV, _, d = c.buf.shape
        cache: SlabCache = PagedCache(
            [[(g, f) for g, f in row if g >= 0] for row in c.table.tolist()], c.room,
            KVLayout(L, KV, d, c.buf.dtype, c.buf.device, c.mask_kind, True), c.pool, c.holds)
    else:
        cache = SlabCache(c.buf.clone(), c.valid.clone(), c.length, c.mask_kind, c.parts,
                          c.row_parts)
    return Pass(p.forward, p.input_ids, p.position_ids, cache, cache.attention_mask(
        p.input_ids.shape[1]), p.keep, p.hidden)


@pytest.mark.parametrize("tree", [False, True], ids=["copied", "tree"])
def test_merged_forward_equals_each_pass_alone_bit_for_bit(tiny_model, tree):
    model, tok = tiny_model
    eng = HFEngine(copy.deepcopy(model), tok, chat=False, device="cpu", share_prefix=4,
                   tree_attention=tree)
    twins: list[Pass] = []
    passes = _passes(eng, twins)
    # the twins read at most one prefix common to all rows where it lives (transformers'
    # forward attends nothing else)
    assert len(twins) == len(passes) and all(len(t.cache.parts) == (t.cache.prefix is not None)
                                             for t in twins)
    if tree:  # rows read their paths where they live, through block tables on the CPU
        # kernel: kids[0]'s rows the prompt's blocks, then each its step's own
        table = passes[1].cache.table
        assert table is not None and not passes[1].cache.parts
        assert table.shape[0] == 3 and (table[:, 0] == table[0, 0]).all()
        assert len({tuple(r) for r in table[:, :, 0].tolist()}) == 3
    else:  # the paths copied whole, each row's into blocks of its own
        for p in passes:
            assert p.cache.table is not None and not p.cache.parts
            ids = [{g for g, _ in row if g >= 0} for row in p.cache.table.tolist()]
            assert sum(map(len, ids)) == len(set().union(*ids))
    assert eng.forward.row_invariant  # packed linears: the Passes share one forward
    alone = [_clone(p) for p in passes]
    together = [_clone(p) for p in passes]
    with torch.inference_mode():
        outs_alone = [p.alone() for p in alone]
        outs = run_passes(together)
    for a, b, pa, pb in zip(outs_alone, outs, alone, together):
        assert torch.equal(a.logits, b.logits)
        assert (a.hidden_states is None) == (b.hidden_states is None)
        if a.hidden_states is not None:
            assert torch.equal(a.hidden_states[-1], b.hidden_states[-1])
        assert pa.cache.length == pb.cache.length and torch.equal(written(pa.cache), written(pb.cache))
    # and the merged forward computes what transformers' forward computes over the same
    # rows' paths copied into its cache
    ref = [_clone(p) for p in twins]
    with torch.no_grad():
        for p, o in zip(ref, outs):
            r = eng.model(input_ids=p.input_ids, attention_mask=p.mask, position_ids=p.position_ids,
                      use_cache=True, logits_to_keep=p.keep, **{cache_arg(type(eng.model)): p.cache})
            assert torch.allclose(r.logits, o.logits, atol=1e-4)


@pytest.mark.parametrize("kw", [{"pack": False}, {"dtype": "int8"}], ids=["unpacked", "int8"])
def test_linears_that_are_not_row_invariant_run_each_pass_alone(tiny_model, kw):
    """MKL's F.linear (unpacked) computes a lone row apart, int8 scales activations per call:
    such engines run every Pass alone, so results still do not depend on the batch."""
    model, tok = tiny_model
    eng = HFEngine(copy.deepcopy(model), tok, chat=False, device="cpu", **kw)
    assert not getattr(eng.forward, "row_invariant", False)
    probs = [Problem(prompt=p) for p in ("1+2=", "3*4-5=", "9-8+7=")]
    kn: dict[str, Any] = dict(n=3, step_tokens=5, max_depth=2)
    alone = [dump(search.solve(p, "best_of_n", engine=eng, seed=2, **kn)) for p in probs]
    many = search.solve_many(probs, "best_of_n", engine=eng, seeds=(2,), concurrency=3, **kn)
    assert [dump(r) for r in many] == alone


def test_a_failing_pass_fails_alone(tiny_model):
    """A merged forward that raises is rewound and re-run Pass by Pass: the others get their
    outputs (the same as alone), the failing one its exception."""
    model, tok = tiny_model
    eng = HFEngine(copy.deepcopy(model), tok, chat=False, device="cpu")
    passes = [_clone(p) for p in _passes(eng)]
    ok = [_clone(p) for p in passes]
    bad = passes[2]
    bad.input_ids = torch.tensor([[10 ** 6]])  # no such token: the embedding raises
    with torch.inference_mode():
        outs = run_passes(passes)
        want = [p.alone() for p in ok]
    assert isinstance(outs[2], Exception)
    for i in (0, 1, 3):
        assert torch.equal(outs[i].logits, want[i].logits)
        assert torch.equal(written(passes[i].cache), written(ok[i].cache))


# -- scheduling ---------------------------------------------------------------------------------
def test_one_search_error_fails_only_its_run(arith_engine):
    probs = arith_problems(3)
    long = Problem(prompt="one two " * 2000, id="too-long")  # longer than the model's context
    with pytest.raises(SolveManyError) as info:
        search.solve_many([probs[0], long, *probs[1:]], "best_of_n", engine=arith_engine,
                          scorer="steps", seeds=(0,), concurrency=4, n=4,
                          select="weighted_vote")
    err = info.value
    assert [e is not None for e in err.errors] == [False, True, False, False]
    assert "max_length" in str(err.errors[1])
    alone = [dump(search.solve(p, "best_of_n", engine=arith_engine, scorer="steps", n=4,
                               select="weighted_vote"))
             for p in probs]
    assert [dump(r) for r in err.results if r is not None] == alone


@pytest.mark.parametrize("lanes", [1, 2])
def test_short_calls_do_not_wait_for_long_ones(tiny_model, lanes, device):
    """Continuous batching: a 2-token expansion started beside a 60-token one returns after a
    few shared forwards (one lane), or beside them (two: each call in its own lane), while the
    long one is still decoding."""
    model, tok = tiny_model
    eng = HFEngine(copy.deepcopy(model), tok, chat=False, device=device)
    eng.eos_ids = frozenset()
    roots = [eng.root(Problem(prompt="1+2=")), eng.root(Problem(prompt="3+4="))]
    finished: dict[str, float] = {}
    sch = eng.scheduler

    def run(name: str, root: Node, tokens: int) -> None:
        eng.expand([root], 2, stop=None, max_tokens=tokens, seed=0)
        finished[name] = time.perf_counter()

    with sch.serving(lanes=lanes):
        long = threading.Thread(target=run, args=("long", roots[0], 60))
        long.start()
        while sch.stats.ticks < 3:  # the long call is decoding
            time.sleep(0.001)
        run("short", roots[1], 2)
        ticks_at_short = sch.stats.ticks
        long.join()
    assert finished["short"] < finished["long"]
    assert sch.stats.lanes == lanes
    assert sch.stats.widest == 3 - lanes  # one lane merged their forwards; two ran them apart
    assert ticks_at_short < 20 < sch.stats.ticks


def test_kv_cap_bounds_the_calls_in_flight(arith_engine):
    probs = arith_problems(4)
    sch = arith_engine.scheduler
    sch.stats = SchedStats()
    ref = [dump(r) for r in search.solve_many(probs, "best_of_n", engine=arith_engine,
                                              scorer="steps", seeds=(0,), concurrency=4, n=4,
                                              select="weighted_vote")]
    assert sch.stats.peak_kv_bytes > sch.stats.largest  # several calls held KV at once
    sch.stats = SchedStats()
    capped = search.solve_many(probs, "best_of_n", engine=arith_engine, scorer="steps",
                               seeds=(0,), concurrency=4, max_kv_bytes=1, n=4,
                               select="weighted_vote")
    # one call holding KV at a time (calls that hold none still go beside it)
    assert sch.stats.peak_kv_bytes == sch.stats.largest > 0
    assert [dump(r) for r in capped] == ref


def test_a_sessions_end_drops_only_its_own_trees(tiny_engine):
    """KV entries belong to the session that cached them, not to a thread: closing a
    session's KV scope (its search's end) drops its own trees' KV only, from any thread."""
    mine, theirs = tiny_engine.bind(Session()), tiny_engine.bind(Session())
    root = mine.root(Problem(prompt="1+1="))
    mine.kv.ensure([root], mine.session)
    other_root = theirs.root(Problem(prompt="2+2="))
    their_nodes = [*theirs.expand([other_root], 2, stop=None, max_tokens=3)[0], other_root]
    assert set(mine.session.kv.roots) == {root} and set(theirs.session.kv.roots) == {other_root}
    t = threading.Thread(target=mine.session.kv.close)  # another thread, mine all the same
    t.start()
    t.join()
    assert mine.kv.get(root) is None
    assert len(their_nodes) == 3 and all(theirs.kv.get(n) is not None for n in their_nodes)
    theirs.session.kv.close()
    assert all(theirs.kv.get(n) is None for n in their_nodes)


def test_views_charge_their_own_session_from_any_thread():
    """A Bindable's views read every attribute of the part but their session: each charges its own
    meter whichever thread calls it, and a job a view hands the scheduler charges that view's
    meter although the scheduler's thread runs it."""

    class Part(Bindable):
        def __init__(self) -> None:
            self.calls = 0

        def job(self) -> Job[None]:
            self.part.calls += 1
            self.meter.charge_model(generated=1)
            return
            yield

    part = Part()
    a, b = Session(), Session()
    view_a, view_b = part.bind(a), part.bind(b)
    assert (view_a.meter, view_b.meter) == (a.meter, b.meter)
    assert part.meter is not a.meter and part.meter is not b.meter
    assert isinstance(view_a, Part) and view_a.bind(b).meter is b.meter
    sch = Scheduler()
    with sch.serving():
        t = threading.Thread(target=lambda: sch.run(view_b.job(), cancel=b.cancel))
        t.start()
        t.join()
        sch.run(view_a.job(), cancel=a.cancel)
        sch.run(view_a.job(), cancel=a.cancel)
    part.meter.charge_model(generated=5)
    assert (a.meter.generated_tokens, b.meter.generated_tokens) == (2, 1)
    assert part.calls == 3 and view_b.calls == 3  # one shared state, set on the part
    assert part.meter.generated_tokens == 5


def test_a_stopped_session_ends_its_own_jobs_only():
    a, b = Session(), Session()
    ran: list[str] = []

    def job(name: str) -> Job[None]:
        ran.append(name)
        return
        yield

    sch = Scheduler()
    sch.interrupt([a.cancel])
    with pytest.raises(sched.Interrupted):
        sch.run(job("a"), cancel=a.cancel)
    sch.run(job("b"), cancel=b.cancel)
    assert ran == ["b"]


def test_concurrently_yields_every_item_and_its_error():
    def f(x: int, cancel: threading.Event) -> int:
        assert not cancel.is_set()
        if x == 3:
            raise ValueError("three")
        time.sleep(0.01 * (x % 3))
        return x * x

    got = dict(concurrently(f, range(8), concurrency=4))
    assert sorted(got) == list(range(8))
    assert isinstance(got[3], ValueError)
    assert all(got[i] == i * i for i in range(8) if i != 3)


def test_concurrency_needs_a_scorer_with_views(arith_engine):
    class Plain:
        def __init__(self) -> None:
            self.meter = Meter()

        def score(self, problem, nodes):
            return [0.0] * len(nodes)

    with pytest.raises(ValueError, match="Bindable"):
        search.solve_many(arith_problems(2), "best_of_n", engine=arith_engine, scorer=Plain(),
                          concurrency=2, n=2, select="weighted_vote")
    with pytest.raises(ValueError, match="concurrency"):
        search.solve_many(arith_problems(2), engine=arith_engine, concurrency=0)
    # one at a time, any scorer works
    assert len(search.solve_many(arith_problems(2), "best_of_n", engine=arith_engine,
                                 scorer=Plain(), concurrency=1, n=2,
                                 select="weighted_vote")) == 2


def test_eval_rows_identical_at_concurrency_1_4_16(arith_engine, tmp_path):
    """The same grid through reports.eval at --concurrency 1, 4 and 16
    gives the same rows, byte for byte once the timing fields are dropped (the file's order
    is the order runs finished)."""
    from reports.eval.grid import Grid
    from reports.eval.sweep import run_grid

    grid = Grid(arith_problems(4), ["best_of_n", "beam", "particle_filter"], [4], [0, 1],
                dataset="arith")

    def rows(c: int) -> dict[str, str]:
        run = run_grid(grid, out=tmp_path / f"c{c}.jsonl", engine=arith_engine, scorer="steps",
                       model="tiny-arith", quiet=True, concurrency=c)
        assert run.ran == 24 and run.errors == 0
        lines = (tmp_path / f"c{c}.jsonl").read_text().splitlines()
        out = {}
        for line in lines:
            row = json.loads(line)
            row.pop("time")
            row["usage"].pop("seconds")
            out[row["key"]] = json.dumps(row, allow_nan=False)
        assert len(out) == len(lines) == 24
        return out

    one = rows(1)
    assert rows(4) == one
    assert rows(16) == one


@pytest.mark.parametrize("family", ["math_shepherd", "qwen_prm"])
def test_prm_scores_identical_at_any_concurrency(tiny_model, family):
    """A PRM shared by concurrent searches: its scoring forwards join the scheduler's ticks
    (merged for a Llama-family causal LM: Math-Shepherd's Mistral; one by one for a reward
    head), each search's scores and PRM tokens what they are alone."""
    from test_prm import qwen_prm, shepherd_prm

    prm = shepherd_prm() if family == "math_shepherd" else qwen_prm()
    assert getattr(prm.kv.forward, "row_invariant", False) == (family == "math_shepherd")
    model, tok = tiny_model
    eng = HFEngine(copy.deepcopy(model), tok, chat=False, device="cpu")
    probs = [Problem(prompt=p) for p in ("1+2=", "3*4-5=", "9-8+7=", "2*2*2=")]
    kw: dict[str, Any] = dict(n=4, m=2, step_tokens=6, max_depth=3)
    alone = [dump(search.solve(p, "beam", engine=eng, scorer=prm, seed=3, **kw)) for p in probs]
    assert prm.scheduler is not eng.scheduler  # built on its own: its own scheduler
    many = search.solve_many(probs, "beam", engine=eng, scorer=prm, seeds=(3,), concurrency=4,
                             **kw)
    assert [dump(r) for r in many] == alone
    assert all(r.usage.scorer_tokens > 0 for r in many)
    assert prm.scheduler.stats.jobs > 0  # its lanes ran the scoring jobs, while serving


def test_a_serving_blocks_close_waits_for_its_lanes():
    """Once the last serving block closes, no lane is left running: a process whose
    interpreter exits while a lane is still inside torch aborts ("terminate called without
    an active exception"). Nested blocks: only the outermost close waits."""
    s = Scheduler()
    with s.serving(lanes=2):
        with s.serving():
            assert s.run(call(lambda: 7)) == 7
        lanes = s.owners
        assert len(lanes) == 2 and all(t.is_alive() for t in lanes)  # the outer block serves on
    assert not any(t.is_alive() for t in lanes) and s.owners == []


# -- ownership: each engine its own scheduler, none at module level --------------------------
def test_no_module_holds_a_scheduler():
    """Every module of search/ and rewards/ that imports here: no attribute of it is a
    Scheduler (a scheduler belongs to an engine or a PRM, never to the process)."""
    import importlib
    import pkgutil

    import rewards

    seen = 0
    for pkg in (search, rewards):
        for info in pkgutil.walk_packages(pkg.__path__, prefix=f"{pkg.__name__}."):
            try:
                module = importlib.import_module(info.name)
            except ImportError:  # an optional dependency this venv lacks (vllm, ray, ...)
                continue
            seen += 1
            held = [k for k, v in vars(module).items() if isinstance(v, Scheduler)]
            assert not held, f"{info.name} holds a scheduler: {held}"
    assert seen > 40 and hasattr(sched, "Scheduler") and not hasattr(sched, "SCHED")


def test_two_engines_have_independent_schedulers(tiny_model):
    """Engine A's scheduler, serving, is busy with a call that does not return yet (it holds
    A's lock); engine B expands inline and while serving all the same, with what it computes
    alone; A's views share A's scheduler."""
    model, tok = tiny_model
    a = HFEngine(copy.deepcopy(model), tok, chat=False, device="cpu")
    b = HFEngine(copy.deepcopy(model), tok, chat=False, device="cpu")
    assert a.scheduler is not b.scheduler and a.kv.scheduler is a.scheduler
    assert a.bind(Session()).scheduler is a.scheduler
    root = b.root(Problem(prompt="1+2="))
    want = [k.step.token_ids for k in b.expand([root], 3, stop=None, max_tokens=5, seed=4)[0]]
    release, entered = threading.Event(), threading.Event()

    def stuck() -> bool:
        entered.set()
        return release.wait(timeout=120)

    got: list[Any] = []
    with a.scheduler.serving(lanes=1):
        t = threading.Thread(target=lambda: got.append(a.scheduler.call(stuck)))
        t.start()
        try:
            assert entered.wait(timeout=120)  # A's lane is inside the call, under A's lock
            kids = b.expand([root], 3, stop=None, max_tokens=5, seed=4)[0]  # B inline
            with b.scheduler.serving(lanes=1):
                served = b.expand([root], 3, stop=None, max_tokens=5, seed=4)[0]
            assert not release.is_set() and t.is_alive()  # A was busy all along
        finally:
            release.set()
            t.join()
    assert got == [True]
    assert [k.step.token_ids for k in kids] == want == [k.step.token_ids for k in served]


def test_a_lane_starts_its_own_waiting_call_once_its_last_one_retires(arith_engine):
    """One lane, a cap that admits one call at a time: a call that arrived while the lane's
    running call held the cap starts when that call retires (the lane admits it itself; no
    other lane is there to wake it). Run on a thread so a stuck lane fails, not hangs."""
    probs = arith_problems(3)
    sch = arith_engine.scheduler
    ref = [dump(r) for r in search.solve_many(probs, "best_of_n", engine=arith_engine,
                                              scorer="steps", seeds=(0,), concurrency=1, n=2)]
    out: list[Any] = []
    before, sch.lanes = sch.lanes, 1
    try:
        worker = threading.Thread(target=lambda: out.extend(search.solve_many(
            probs, "best_of_n", engine=arith_engine, scorer="steps", seeds=(0,),
            concurrency=3, max_kv_bytes=1, n=2)), daemon=True)
        worker.start()
        worker.join(timeout=300)
        assert not worker.is_alive(), "a call waited for a wake that never came"
    finally:
        sch.lanes = before
    assert sch.stats.lanes >= 1 and [dump(r) for r in out] == ref
