"""Sessions (search.session): each search's meter, budget and KV scope travel with it to the
engine and scorer it uses, whichever thread runs it.

The reference for every figure is a plain sequential run: each search solved alone, one after
the other, on its own fresh engine and scorer."""

from __future__ import annotations

import copy
import threading
from typing import Any

import pytest

import search
from rewards.self_eval import SelfEvalScorer
from search.budget import Meter
from search.engines.fake import ScriptedEngine, ScriptedScorer
from search.engines.hf import HFEngine
from search.runtime.sched import Interrupted
from search.scoring import score_nodes
from search.session import Bindable, KVScope, Session, bind
from search.types import Budget, Node, Problem, Step, Usage

PROBLEMS = [Problem(prompt=p) for p in ("1+2=", "9-8+7=")]
KNOBS: dict[str, Any] = dict(n=3, m=1, step_tokens=5, max_depth=2)
COUNTS = ("generated_tokens", "prefill_tokens", "forward_passes", "scorer_calls",
          "scorer_tokens", "flops")


def counts(usage: Usage) -> tuple[Any, ...]:
    return tuple(getattr(usage, k) for k in COUNTS)


def engine_of(tiny_model: Any) -> HFEngine:
    model, tok = tiny_model
    return HFEngine(copy.deepcopy(model), tok, chat=False, device="cpu")


def alone(tiny_model: Any) -> list[Usage]:
    """Each search alone, one after the other, each on a fresh engine and scorer."""
    out = []
    for i, p in enumerate(PROBLEMS):
        eng = engine_of(tiny_model)
        out.append(search.solve(p, "beam", engine=eng, scorer=SelfEvalScorer(eng), seed=i,
                                progress=False, **KNOBS).usage)
    return out


@pytest.mark.parametrize("serving", [False, True], ids=["inline", "batched"])
def test_two_concurrent_sessions_on_one_engine_and_scorer_charge_disjoint_meters(
        tiny_model, serving):
    """Two searches in two threads share one HF engine and one model scorer (self_eval runs
    the engine's forwards): each Result's usage is what that search costs alone, and together
    they are what the sequential run costs; the shared objects' own meters are untouched."""
    reference = alone(tiny_model)
    eng = engine_of(tiny_model)
    scorer = SelfEvalScorer(eng)
    results: dict[int, Any] = {}
    gate = threading.Barrier(2)

    def run(i: int) -> None:
        gate.wait()  # both searches in flight at once
        results[i] = search.solve(PROBLEMS[i], "beam", engine=eng, scorer=scorer, seed=i,
                                  progress=False, **KNOBS)

    with eng.scheduler.serving() if serving else _nothing():
        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    got = [results[i].usage for i in range(2)]
    assert [counts(u) for u in got] == [counts(u) for u in reference]
    assert all(u.generated_tokens > 0 and u.scorer_tokens == 0 for u in got)
    total = [sum(x) for x in zip(*(counts(u) for u in got))]
    assert total == [sum(x) for x in zip(*(counts(u) for u in reference))]
    assert counts(eng.meter.usage()) == counts(Meter().usage())  # the shared ones: untouched
    assert counts(scorer.meter.usage()) == counts(Meter().usage())
    assert eng.cached_tokens == 0  # each session freed its own trees


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def test_solve_many_with_a_shared_scorer_matches_the_sequential_run(tiny_model):
    reference = alone(tiny_model)
    eng = engine_of(tiny_model)
    scorer = SelfEvalScorer(eng)
    many = [r for i, p in enumerate(PROBLEMS)
            for r in search.solve_many([p], "beam", engine=eng, scorer=scorer, seeds=(i,),
                                       concurrency=2, **KNOBS)]
    assert [counts(r.usage) for r in many] == [counts(u) for u in reference]


def test_a_sessions_kv_entries_are_its_own(tiny_model):
    """KV entries join the KV scope of the session that cached them; closing a scope (its
    search's end) drops that scope's trees only, and leaves another session's alone."""
    eng = engine_of(tiny_model)
    a, b = Session(), Session()
    ea, eb = eng.bind(a), eng.bind(b)
    ra, rb = ea.root(PROBLEMS[0]), eb.root(PROBLEMS[1])
    kids_a = ea.expand([ra], 2, stop=None, max_tokens=3)[0]
    kids_b = eb.expand([rb], 2, stop=None, max_tokens=3)[0]
    assert set(a.kv.roots) == {ra} and set(b.kv.roots) == {rb}
    assert a.meter.generated_tokens == b.meter.generated_tokens == 6
    KVScope().close()  # a scope that cached nothing drops nothing
    assert all(eng.kv.get(n) is not None for n in [ra, rb, *kids_a, *kids_b])
    a.kv.close()
    assert all(eng.kv.get(n) is None for n in [ra, *kids_a])
    assert all(eng.kv.get(n) is not None for n in [rb, *kids_b])
    assert eng.cached_tokens == sum(eng.kv.get(n).n for n in [rb, *kids_b])  # type: ignore[union-attr]
    b.kv.close()
    assert eng.cached_tokens == 0


def test_a_view_shares_the_parts_state_and_keeps_its_session():
    eng = ScriptedEngine(lambda path: [("a", 1.0)] if len(path) < 3 else [],
                         tokens_per_step=2)
    s = Session(Meter(Budget(tokens=10)))
    view = eng.bind(s)
    assert isinstance(view, ScriptedEngine) and view.session is s and view.meter is s.meter
    root = view.root(Problem(prompt="q"))
    view.expand([root], 2)
    assert eng.expand_calls == view.expand_calls == 1  # counters are the engine's own
    assert s.meter.generated_tokens == 4 and eng.meter.generated_tokens == 0
    assert s.budget == Budget(tokens=10)
    plain = object()
    assert bind(plain, s) is plain


def test_the_reserve_charges_a_submeter_through_views_of_the_same_search():
    """Session.within(budget) is the same search (KV scope, cancel event) on a sub-meter;
    what its views spent lands on the search's meter when the block ends."""
    part = ScriptedScorer(lambda path: 0.5)
    s = Session(Meter(Budget(tokens=100)))
    view = part.bind(s)
    with s.within(Budget(tokens=5)) as sub:
        inner = bind(view, sub)
        assert inner.meter is sub.meter and inner.meter.budget == Budget(tokens=5)
        assert inner.session.kv is s.kv and inner.session.cancel is s.cancel
        inner.score(Problem(prompt="q"), [])
        inner.meter.charge_scorer(calls=2)
        assert s.meter.scorer_calls == 0
    assert s.meter.scorer_calls == 2 and part.meter.scorer_calls == 0


def test_a_cancel_event_ends_a_solve():
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Interrupted):  # at the engine's first call
        search.solve("1+1=", "greedy", engine="tiny-arith", cancel=cancel, progress=False)


def test_a_used_part_copies_and_pickles_without_its_session():
    import pickle

    eng = ScriptedEngine(_one_step)
    eng.expand([eng.root(Problem(prompt="q"))], 1)
    assert eng.meter.generated_tokens > 0
    for other in (pickle.loads(pickle.dumps(eng)), copy.copy(eng)):
        assert isinstance(other, ScriptedEngine) and other.expand_calls == 1
        assert other.session is not eng.session and other.meter.generated_tokens == 0


def _one_step(path: Any) -> list[tuple[str, float]]:
    return [("a", 1.0)] if len(path) < 2 else []


def test_scorer_calls_are_charged_one_way_per_scorer():
    """score_nodes charges a plain scorer one call per node it scores; a Bindable scorer's
    view charges its own calls and nothing is added to them, whatever it charged (here one
    call a batch, or none): the core infers nothing from the meter's counts."""

    class Plain:
        def score(self, problem, nodes):
            return [0.5] * len(nodes)

    class Batched(Bindable):
        def __init__(self, calls: int) -> None:
            self.calls = calls

        def score(self, problem, nodes):
            self.meter.charge_scorer(calls=self.calls)
            return [0.5] * len(nodes)

    root = Node(problem=Problem(prompt="q"), prompt_ids=(0,))
    for scorer, want in ((Plain(), 3), (Batched(1), 1), (Batched(0), 0)):
        s = Session()
        kids = [Node(parent=root, step=Step(t, (1,), (0.0,), "stop")) for t in "abc"]
        assert score_nodes(bind(scorer, s), Problem(prompt="q"), kids,
                           meter=s.meter) == [0.5] * 3
        assert s.meter.scorer_calls == want


def test_a_view_reads_the_part_and_sets_nothing_of_its_own():
    """A view's instance dict is the part's own dict: it reads the part's attributes, set
    before or after it was made, as plain attributes (no __getattribute__ of its own);
    setting one through a view is refused (what every search should see is set on
    view.part); its session is its own; a view of the same session is itself."""

    class Part(Bindable):
        name = "by class"

        def __init__(self) -> None:
            self.x, self.seen, self.name = 0, [], "its own"

    part = Part()
    s = Session()
    view, other = part.bind(s), part.bind(Session())
    part.x = 1
    view.seen.append("a")  # a shared container: the part's own
    assert (view.x, other.x, other.seen) == (1, 1, ["a"])
    assert view.name == part.name == "its own"  # the part's attribute, not the class's
    assert vars(view) is vars(part) and "__getattribute__" not in vars(Bindable)
    assert view.session is s and other.session is not s and part.session is not s
    with pytest.raises(AttributeError, match="view.part.y|self.part.y"):
        view.y = 2
    assert not hasattr(part, "y") and not hasattr(other, "y")
    view.part.x = 3
    assert (part.x, other.x) == (3, 3)
    assert view.part is part and part.part is part and view.bind(s) is view
    assert bind(view, other.session).session is other.session
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = view.nothing


# -- one driver of many searches (search.many) ---------------------------------------------------
def test_solve_many_loads_a_prm_path_once_and_shares_it(tiny_model, tmp_path, monkeypatch):
    """A PRM named by path loads once for all of solve_many's runs (it was loaded per run),
    each run scoring through its own view: the same figures as each run alone."""
    from test_prm import shepherd_prm

    from rewards.prm import HFPRM

    prm = shepherd_prm()
    loads: list[str] = []

    def load(cls: type, path: str, **kw: Any) -> HFPRM:
        loads.append(path)
        return prm

    (tmp_path / "config.json").write_text("{}")  # a model folder, as far as the checks go
    monkeypatch.setattr(HFPRM, "load", classmethod(load))
    eng = engine_of(tiny_model)
    kw: dict[str, Any] = dict(n=2, m=1, step_tokens=5, max_depth=2)
    many = search.solve_many(PROBLEMS, "beam", engine=eng, scorer=f"prm:{tmp_path}",
                             seeds=(0, 1), concurrency=4, **kw)
    assert loads == [str(tmp_path)]
    alone = [search.solve(p, "beam", engine=engine_of(tiny_model), scorer=shepherd_prm(),
                          seed=s, progress=False, **kw) for p in PROBLEMS for s in (0, 1)]
    assert [counts(r.usage) for r in many] == [counts(r.usage) for r in alone]
    assert all(r.usage.scorer_tokens > 0 for r in many)
    assert counts(prm.meter.usage()) == counts(Meter().usage())  # each run charged its own


def test_the_driver_gives_each_run_its_scorer():
    from search.many import Driver, Scorers

    eng = ScriptedEngine(lambda path: [("a", 1.0)] if len(path) < 2 else [])
    shared = ScriptedScorer(lambda path: 0.5)
    assert Scorers.of(None, eng)() is None
    assert Scorers.of("steps", eng)() == "steps"  # a registered name: solve builds one per run
    assert Scorers.of(shared, eng)() is shared
    driver = Driver.load(eng, shared, concurrency=1)
    assert driver.engine is eng and driver.scorers.shared is shared
    scored = driver.solve(Problem(prompt="q"), "beam", Budget(tokens=50), n=2, m=1)
    assert scored.scorer == "ScriptedScorer"
    unscored = driver.solve(Problem(prompt="q"), "greedy", Budget(tokens=50))
    assert unscored.scorer == ""  # greedy consults none: the driver gives it none
    with pytest.raises(ValueError, match="concurrency"):
        Driver.load(eng, shared, concurrency=0)


def test_the_budget_reaches_the_engine_through_solve():
    """Following a budget from solve to the engine: every engine call of the search is made
    by a view whose session holds that budget's meter (the reserve's completion: a sub-meter
    of the same session), and the Result's usage is what those views charged."""

    class Watching(ScriptedEngine):
        seen: list[Session]

        def expand(self, nodes: Any, n: int = 1, **kw: Any) -> Any:
            self.seen.append(self.session)
            return super().expand(nodes, n, **kw)

    eng = Watching(lambda path: [("a", 0.6), ("b", 0.4)] if len(path) < 6 else [("end", 1.0)],
                   tokens_per_step=3)
    eng.seen = []
    budget = Budget(tokens=20, reserve=0.5)
    result = search.solve(Problem(prompt="q"), "beam", budget, engine=eng,
                          scorer=ScriptedScorer(lambda path: 0.5), n=2, m=1, progress=False)
    main = [s for s in eng.seen if s.budget == budget]
    subs = [s for s in eng.seen if s.budget != budget]
    assert main and len({id(s.meter) for s in main}) == 1  # one session, one meter
    assert all(s.kv is main[0].kv and s.cancel is main[0].cancel for s in eng.seen)
    # two beam steps of 2 x 3 tokens pass the stopping point (10); the reserve's completion
    # gets the 20 - 12 = 8 tokens left, on a sub-meter of the same session
    assert subs and all(s.budget == Budget(tokens=8, reserve=0.0) for s in subs)
    assert result.stats["reserve"]["tokens"] == 8
    assert result.usage.generated_tokens == main[0].meter.generated_tokens == 20
    assert eng.meter.generated_tokens == 0  # the engine's own meter: nothing
