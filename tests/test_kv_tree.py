"""The engine's KV where it lives: rows read their paths' segments in place (no path copied
into a batch cache, KV bytes moved per forward flat in the context length), and prompts
cached by token ids (a second search on a prompt prefills none of it; LRU eviction of
unheld prompts under a byte cap)."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import dump

import search
from search.runtime.kvpool import Segment
from search.runtime.kvstore import PromptCache
from search.types import Budget, Node, Problem


@pytest.fixture
def engine(tiny_model):
    from search.engines.hf import HFEngine

    model, tok = tiny_model
    return HFEngine(copy.deepcopy(model), tok, chat=False)


def test_kv_bytes_moved_per_forward_do_not_grow_with_the_context():
    """Counted by reports.bench.kvbytes' dispatch-mode counter on a random Llama (the
    kernel's write counted with the copies): on the CPU kernel, where every path is read
    where it lives (a KV pool's blocks) and the new columns are written into the rows' own
    blocks, which their children keep, an expand of 16 rows a prompt moves 1x the new KV
    per forward, and an expand of their children 7/6 (their pending last tokens written,
    then copied into their nodes' blocks: one column of six more), each step after the first
    1x, at L=32 and L=96 alike; off the kernel at most 4x. Copying every row's path in
    (share_prefix=0) moves more, and grows with L."""
    from reports.bench.kvbytes import measure
    from search.runtime import kernel

    small = measure(16, 32, 6, vocab=64, hidden=64, layers=2, heads=4)
    large = measure(16, 96, 6, vocab=64, hidden=64, layers=2, heads=4)
    for figures in (small, large):
        assert all(0 < v <= 4.0 for v in figures.values()), figures
        if kernel.available():
            assert figures == {"prompts_expand": 1.0, "prompts_step": 1.0,
                               "children_expand": pytest.approx(7 / 6), "children_step": 1.0}
    assert small == large
    copied = measure(16, 96, 6, vocab=64, hidden=64, layers=2, heads=4, share_prefix=0)
    assert copied["children_expand"] > 2 * large["children_expand"]


@pytest.mark.skipif("not __import__('search.runtime.kernel').runtime.kernel.available()")
def test_kv_bytes_moved_per_forward_do_not_grow_along_a_chain_of_expands():
    """Each row's child expanded again, three times over: every expand moves 6/5 the new KV
    (its ancestors' steps are read where they live, none copied per call; a step's five
    columns are written once each, its last when its child is expanded, then copied into its
    node's block)."""
    from reports.bench.kvbytes import KVBytes, engine, random_roots

    eng = engine(vocab=64, hidden=64, layers=2, heads=4)
    roots = random_roots(eng, 1, 40)
    mode = KVBytes(eng.kv.layout.layers, eng.kv.layout.head_dim)
    with mode:
        eng.kv.ensure(roots, eng.session)
    level = [k for ks in eng.expand(roots, 8, stop=None, max_tokens=5, seed=3) for k in ks]
    for depth in range(1, 4):
        mode.moved = 0
        with mode:
            level = [k for ks in eng.expand(level, 1, stop=None, max_tokens=5, seed=3 + depth)
                     for k in ks]
        assert mode.moved == (5 + 1) * len(level) * eng.kv.column_bytes, depth


def test_a_second_search_on_a_prompt_prefills_none_of_it(tiny_model, engine):
    """Another seed on the same prompt reuses the prompt's KV: the model computes none of it
    (KVTree.prefilled), and the Result is the one a fresh engine gives (the cached KV is the
    one a prefill computes; the hit is charged as the forward it saves)."""
    from search.engines.hf import HFEngine

    problem = Problem(prompt="12+34=", answer="46")
    budget = Budget(tokens=60)
    prompt = len(engine.prompt_ids(problem))
    search.solve(problem, "best_of_n", budget, engine=engine, seed=0, n=4)
    first = engine.kv.prefilled
    assert first >= prompt
    second = search.solve(problem, "best_of_n", budget, engine=engine, seed=1, n=4)
    assert engine.kv.prefilled - first == first - prompt  # all but the prompt
    model, tok = tiny_model
    fresh = HFEngine(copy.deepcopy(model), tok, chat=False)
    cold = search.solve(problem, "best_of_n", budget, seed=1, n=4, engine=fresh)
    assert fresh.kv.prefilled == first
    assert dump(cold) == dump(second)


def test_solve_many_prefills_a_prompt_once(engine):
    """16 searches of one prompt at concurrency 16: the prompt is computed once, before them
    (HFEngine.prefill); each run is charged it, as alone."""
    problem = Problem(prompt="7*8=", answer="56")
    prompt = len(engine.prompt_ids(problem))
    results = search.solve_many([problem], "best_of_n", Budget(tokens=24), engine=engine,
                                seeds=range(16), concurrency=16, n=2)
    assert engine.kv.prefilled == prompt and engine.kv.prompts.hits == 16
    assert len(results) == 16 and all(r.usage.prefill_tokens == prompt for r in results)


HEAD = "1+2=3 4+5=9 7+1=8 2+2=4 "  # 24 tokens (one a character): a block and 8 more


def same(a, b) -> bool:
    """dump()s equal but for best_partial, a stat holding a node id (ids count every node the
    process made)."""
    import re

    return re.sub(r'"best_partial": "\d+"', "", dump(a)) == re.sub(r'"best_partial": "\d+"', "",
                                                                   dump(b))


def test_a_prompt_that_begins_with_a_cached_prompts_blocks_computes_only_the_rest(tiny_model):
    """Where the forward computes a token's KV and logits the same whatever it is fed with
    (the CPU kernel on packed GEMMs), a prompt that begins as a cached prompt does (a whole
    16-token block at least) computes only the tokens after those they share, and its
    Result is the one a fresh engine gives (what it reuses is charged as the forward it
    saves). transformers' forward reuses whole prompts only."""
    from search.engines.hf import HFEngine
    from search.runtime import kernel

    model, tok = tiny_model
    first, second = Problem(prompt=HEAD + "12+34=", answer="46"), Problem(prompt=HEAD + "5+6=")
    budget = Budget(tokens=40)
    for lean in (True, False):
        eng = HFEngine(copy.deepcopy(model), tok, chat=False, lean=lean)
        n = len(eng.prompt_ids(second))
        assert len(eng.prompt_ids(first)) > 16 and n == 29
        assert eng.kv.partial_prompts == (lean and kernel.available())
        search.solve(first, "best_of_n", budget, engine=eng, seed=0, n=2)
        before = eng.kv.prefilled
        warm = search.solve(second, "best_of_n", budget, engine=eng, seed=1, n=2)
        fresh = HFEngine(copy.deepcopy(model), tok, chat=False, lean=lean)
        cold = search.solve(second, "best_of_n", budget, engine=fresh, seed=1, n=2)
        assert fresh.kv.prefilled == n
        assert eng.kv.prefilled - before == n - (len(HEAD) if eng.kv.partial_prompts else 0)
        assert same(warm, cold) and warm.usage.prefill_tokens == n


def test_solve_many_prefills_a_shared_prefix_once(tiny_model):
    """Eight prompts that share their first 25 tokens: solve_many's prefill computes one
    whole, then each other's tokens after those 25, and every run's Result is the one an
    engine without a prompt cache gives."""
    from search.engines.hf import HFEngine
    from search.runtime import kernel

    if not kernel.available():
        pytest.skip("prompts begin with cached blocks on the CPU kernel only")
    model, tok = tiny_model
    problems = [Problem(prompt=HEAD + f"{i}+{i + 1}=", answer=str(2 * i + 1))
                for i in range(10, 18)]
    runs = {}
    for cache in (1 << 30, 0):
        eng = HFEngine(copy.deepcopy(model), tok, chat=False, prompt_cache=cache)
        runs[cache] = search.solve_many(problems, "best_of_n", Budget(tokens=24), engine=eng,
                                        seeds=range(2), concurrency=4, n=2)
        if cache:
            assert eng.kv.prefilled == 31 + 7 * (31 - 25)
    assert all(same(a, b) for a, b in zip(runs[1 << 30], runs[0], strict=True))


def test_prompt_cache_finds_the_longest_cached_run_of_whole_blocks(monkeypatch):
    """PromptCache.longest: the entry that shares the most whole 16-token blocks with a
    prompt, and the tokens they share from the start, always short of the prompt's last
    token; the tokens compared (a hash shared by other tokens is no hit); less than a block
    shared is no hit; nothing found once the entry is evicted."""
    from search.runtime import kvstore

    cache = PromptCache(0)
    seg = Segment(kv=torch.zeros(1, 2, 1, 40, 2), n=40, logits=torch.zeros(3))
    held = Node(problem=Problem(prompt="h"), prompt_ids=list(range(40)))
    cache.add(held, list(range(40)), seg)

    def shared(c: PromptCache, ids: list[int]) -> int | None:
        found = c.longest(ids)
        return None if found is None else found[1]

    assert cache.longest(list(range(40)) + [7]) == (seg, 40)
    assert shared(cache, list(range(20)) + [99] * 20) == 20
    assert shared(cache, list(range(32))) == 31  # (its last token is computed)
    assert cache.longest(list(range(16))) is None and cache.longest([99] * 40) is None
    assert cache.longest(list(range(15)) + [99] * 20) is None
    with monkeypatch.context() as patch:  # every block hashed alike: the tokens tell
        patch.setattr(kvstore, "chain", lambda ids: [1] * (len(ids) // 16))
        alike = PromptCache(0)
        alike.add(held, list(range(40)), seg)
        assert alike.longest([99] * 40) is None and shared(alike, list(range(33))) == 32
    del held
    import gc

    gc.collect()
    cache.evict()
    assert len(cache) == 0 and cache.longest(list(range(40)) + [7]) is None


def test_a_prompt_claimed_by_another_thread_is_waited_for_not_computed():
    """PromptCache.claim: a thread gets the prompts no other claims, and leaves once the
    others' claimers release theirs; two claimers waiting on each other both go on."""
    import threading

    cache = PromptCache(0)
    p, q = (1, 2, 3), (4, 5)
    first_in, let_go, got, left = threading.Event(), threading.Event(), {}, []

    def first() -> None:
        with cache.claim([p]) as mine:
            got["first"] = mine
            first_in.set()
            let_go.wait(5)
        left.append("first")

    def second() -> None:
        first_in.wait(5)
        with cache.claim([p, q]) as mine:
            got["second"] = mine
        left.append("second")

    threads = [threading.Thread(target=f) for f in (first, second)]
    for t in threads:
        t.start()
    threads[1].join(0.3)
    assert got == {"first": [p], "second": [q]} and threads[1].is_alive()  # waits for p
    let_go.set()
    for t in threads:
        t.join(5)
    assert sorted(left) == ["first", "second"]
    with cache.claim([p, q]) as mine:  # released: free to claim again
        assert mine == [p, q]


def test_prefill_computes_nothing_where_no_prompt_cache_would_keep_it(tiny_model):
    """prompt_cache=0 keeps no prompt no search holds: prefilling first would only compute
    each prompt twice, so HFEngine.prefill computes none."""
    from search.engines.hf import HFEngine

    model, tok = tiny_model
    eng = HFEngine(copy.deepcopy(model), tok, chat=False, prompt_cache=0)
    assert eng.prefill([Problem(prompt="7*8="), Problem(prompt="1+2=")]) == 0
    assert eng.kv.prefilled == 0


def test_prompt_cache_evicts_the_least_recently_used_unheld_prompt():
    """Entries no live root holds are kept while their bytes fit the cap, least recently
    used out first; a held entry is never evicted and costs the cap nothing."""
    import gc

    def seg() -> Segment:
        return Segment(kv=torch.zeros(1, 2, 1, 4, 2), n=4, logits=torch.zeros(3))

    size = seg().nbytes
    cache = PromptCache(2 * size)
    held = Node(problem=Problem(prompt="h"), prompt_ids=[3])
    cache.add(held, [3], seg())
    for i in range(3):  # each root dies as soon as it is added
        cache.add(Node(problem=Problem(prompt=str(i)), prompt_ids=[i]), [i], seg())
    gc.collect()
    cache.evict()
    assert len(cache) == 3 and cache.unheld_bytes == 2 * size  # 0 went: the oldest unheld
    probe = Node(problem=Problem(prompt="p"), prompt_ids=[0])
    assert cache.get(probe, [0], False) is None
    assert cache.get(probe, [1], False) is not None  # 1 used again: now the newest, and held
    cache.add(Node(problem=Problem(prompt="5"), prompt_ids=[5]), [5], seg())
    gc.collect()
    cache.evict()
    assert len(cache) == 4  # unheld: 2 and 5, which fit
    del probe
    gc.collect()
    cache.evict()  # unheld: 2, 1, 5 by age of use: 2 goes
    other = Node(problem=Problem(prompt="q"), prompt_ids=[2])
    assert cache.get(other, [2], False) is None and cache.get(other, [1], False) is not None
    assert cache.get(other, [3], False) is not None and cache.get(other, [5], False) is not None
