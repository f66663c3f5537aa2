"""The KV-sharing engine against plain full-prefix forwards and HF generate (fp32), on each
device (tests/devices.py): the references run on the CPU model."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from devices import host

from search.types import Node, Problem


@pytest.fixture
def tiny_engine(tiny_model, device):
    """conftest's tiny engine, on each device."""
    from search.engines.hf import HFEngine

    model, tok = tiny_model
    return HFEngine(copy.deepcopy(model), tok, chat=False, device=device)


def full_logprobs(model, ids: list[int], start: int) -> list[float]:
    """Reference: one plain forward over the whole sequence, no cache."""
    with torch.no_grad():
        lp = model(torch.tensor([ids])).logits[0].float().log_softmax(-1)
    return [lp[i - 1, ids[i]].item() for i in range(start, len(ids))]


def greedy_reference(model, ids: list[int], new: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids),
                             dtype=torch.long), max_new_tokens=new, do_sample=False,
                             pad_token_id=0)
    return out[0, len(ids):].tolist()


def greedy_path(engine, problem, steps=4, **kw):
    node = engine.root(problem)
    for _ in range(steps):
        if node.finished:
            break
        ((node,),) = engine.expand([node], 1, temperature=0, **kw)
    return node


def test_greedy_multistep_matches_generate_and_full_forward(tiny_engine, tiny_model):
    model, _ = tiny_model
    leaf = greedy_path(tiny_engine, Problem(prompt="12+34="), steps=5, stop=None, max_tokens=7)
    assert leaf.depth == 5 or leaf.finished
    ids, prompt = leaf.token_ids(), list(leaf.prompt_ids)
    assert greedy_reference(model, prompt, len(ids) - len(prompt)) == ids[len(prompt):]
    mine = [lp for s in leaf.steps() for lp in s.logprobs]
    ref = full_logprobs(model, ids, len(prompt))
    assert max(abs(a - b) for a, b in zip(mine, ref)) < 1e-4


def test_stop_string_ends_step_at_completing_token(tiny_engine):
    leaf = greedy_path(tiny_engine, Problem(prompt="1+1="), steps=6, stop=("5",), max_tokens=40)
    for step in leaf.steps()[:-1]:
        if step.stop_reason == "stop":
            assert "5" in step.text and "5" not in tiny_engine.decode(step.token_ids[:-1])
    assert all(s.stop_reason in {"stop", "eos", "max_tokens"} for s in leaf.steps())


def test_fixed_token_steps(tiny_engine):
    root = tiny_engine.root(Problem(prompt="a b"))
    kids = tiny_engine.expand([root], 3, stop=None, max_tokens=5, seed=3)[0]
    for k in kids:
        assert len(k.step.token_ids) == 5 or k.step.stop_reason == "eos"


def test_batched_rows_of_different_lengths_match_unbatched(tiny_engine, tiny_model):
    """Nodes of different depths and prompt lengths decoded in one batch, greedily, each
    equal token for token to its own plain generate, logprobs within 1e-4."""
    model, _ = tiny_model
    eng = tiny_engine
    a = eng.root(Problem(prompt="1+2="))
    b = eng.root(Problem(prompt="123*45-6789="))
    (a1,) = eng.extend([a], ["77"])
    ((a2,),) = eng.expand([a1], 1, stop=None, max_tokens=9, temperature=0)
    (b1,) = eng.extend([b], ["9 9 9 ab"])
    nodes = [a, a2, b1, b]
    kids = eng.expand(nodes, 1, stop=None, max_tokens=12, temperature=0)
    for node, (kid,) in zip(nodes, kids):
        ids = node.token_ids()
        assert greedy_reference(model, ids, len(kid.step.token_ids)) == list(kid.step.token_ids)
        ref = full_logprobs(model, kid.token_ids(), len(ids))
        assert max(abs(x - y) for x, y in zip(kid.step.logprobs, ref)) < 1e-4


def test_extend_and_topk_match_full_forward(tiny_engine, tiny_model):
    model, _ = tiny_model
    root = tiny_engine.root(Problem(prompt="7*8="))
    (child,) = tiny_engine.extend([root], ["56\n\nab"])
    ids = child.token_ids()
    ref = full_logprobs(model, ids, len(root.prompt_ids))
    assert max(abs(x - y) for x, y in zip(child.step.logprobs, ref)) < 1e-4
    (top,) = tiny_engine.topk_next([child], 3)
    with torch.no_grad():
        lp = model(torch.tensor([ids])).logits[0, -1].log_softmax(-1)
    vals, idx = lp.topk(3)
    assert [t for t, _ in top] == idx.tolist()
    assert all(abs(x - y) < 1e-4 for (_, x), y in zip(top, vals.tolist()))


def test_same_seed_same_samples_different_seed_differs(tiny_engine):
    root = tiny_engine.root(Problem(prompt="3-1="))

    def texts(seed):
        return [k.step.text for k in tiny_engine.expand([root], 4, stop=None, max_tokens=8,
                                                        seed=seed)[0]]

    assert texts(5) == texts(5)
    assert texts(5) != texts(6)


def test_top_p_tiny_keeps_only_the_argmax(tiny_engine):
    root = tiny_engine.root(Problem(prompt="9+9="))
    greedy = tiny_engine.expand([root], 1, stop=None, max_tokens=6, temperature=0)[0][0]
    nucleus = tiny_engine.expand([root], 3, stop=None, max_tokens=6, top_p=1e-6, seed=1)[0]
    assert all(k.step.token_ids == greedy.step.token_ids for k in nucleus)


def test_children_never_reprefill_and_dropped_kv_comes_back_uncharged(tiny_engine, tiny_model):
    """A child's expand prefills nothing of its path. Under a 1-byte KV cap the engine drops
    every segment no call reads (kvstore.NodeStore) and computes each again when a call
    needs it: the same tokens and usage as with room for all (logprobs to the rounding of
    a forward of another shape), and a greedy step from a dropped node decodes what plain
    forwards over its whole path decode."""
    from search.engines.hf import HFEngine

    model, tok = tiny_model
    tight = HFEngine(copy.deepcopy(model), tok, chat=False, device=tiny_engine.device,
                     kv_cache=1)
    grown = []
    for eng in (tiny_engine, tight):
        eng.eos_ids = frozenset()  # no early EOS: keep two paths alive for four steps
        root = eng.root(Problem(prompt="12*3="))
        frontier, steps = [root], []
        for _ in range(4):
            kids = [k for ks in eng.expand(frontier, 2, stop=None, max_tokens=5, seed=1)
                    for k in ks]
            frontier = kids[:2]
            steps.append([(k.step.token_ids, torch.tensor(k.step.logprobs)) for k in kids])
        grown.append((frontier, steps, eng.meter.usage()))
    (_, steps, used), (frontier, tight_steps, tight_used) = grown
    assert used.prefill_tokens == len(root.prompt_ids)
    for step, tight_step in zip(steps, tight_steps, strict=True):
        assert [t for t, _ in tight_step] == [t for t, _ in step]
        for (_, lp), (_, tight_lp) in zip(step, tight_step):
            torch.testing.assert_close(tight_lp, lp, rtol=1e-5, atol=1e-5)
    assert dataclasses.replace(tight_used, seconds=0) == dataclasses.replace(used, seconds=0)
    assert tiny_engine.kv.recomputed == 0 and tiny_engine.kv.store.dropped == 0
    assert tight.kv.store.dropped > 0 and tight.kv.recomputed > 0
    dropped = frontier[1]
    assert tight.kv.get(dropped) is None
    ((kid,),) = tight.expand([dropped], 1, stop=None, max_tokens=4, temperature=0)
    assert tight.meter.prefill_tokens == used.prefill_tokens  # recomputing is not charged
    ref = greedy_reference(model, dropped.token_ids(), len(kid.step.token_ids))
    assert ref == list(kid.step.token_ids)


def test_segments_hold_only_own_tokens(tiny_engine):
    root = tiny_engine.root(Problem(prompt="5+5="))
    ((kid,),) = tiny_engine.expand([root], 1, stop=None, max_tokens=6, temperature=0)
    seg = tiny_engine.kv.get(kid)
    assert seg is not None and seg.columns.shape[3] == len(kid.step.token_ids) - 1


def test_bad_expand_arguments(tiny_engine):
    root = tiny_engine.root(Problem(prompt="1="))
    for kw in ({"n": 0}, {"max_tokens": 0}, {"temperature": -1.0}, {"top_p": 0.0}):
        n = kw.pop("n", 1)
        with pytest.raises(ValueError):
            tiny_engine.expand([root], n, **kw)
    ((kid,),) = tiny_engine.extend([root], [[tiny_engine.tokenizer.eos_token_id]]),
    assert kid.finished
    with pytest.raises(ValueError, match="finished"):
        tiny_engine.expand([kid], 1)
    bare = tiny_engine.session.kv.add(Node(problem=Problem(prompt="1="), prompt_ids=()))
    with pytest.raises(ValueError, match="root without prompt token ids"):
        tiny_engine.expand([bare], 1)


def test_token_ids_outside_the_vocabulary_are_refused(tiny_engine):
    """extend and next_logprobs refuse a token id the model has no row for (a negative one
    would index its logits from the end: a wrong number, silently); topk_next refuses k < 0
    and gives the whole vocabulary for a k past it."""
    root = tiny_engine.root(Problem(prompt="1="))
    vocab = tiny_engine.model.get_input_embeddings().weight.shape[0]
    for bad in (-1, vocab):
        with pytest.raises(ValueError, match=f"token id {bad} is outside"):
            tiny_engine.next_logprobs([root], [0, bad])
        with pytest.raises(ValueError, match=f"token id {bad} is outside"):
            tiny_engine.extend([root], [[1, bad]])
    with pytest.raises(ValueError, match="k must be"):
        tiny_engine.topk_next([root], -1)
    [everything] = tiny_engine.topk_next([root], vocab + 5)
    assert sorted(t for t, _ in everything) == list(range(vocab))
    [[lp]] = tiny_engine.next_logprobs([root], [vocab - 1])
    assert lp == pytest.approx(dict(everything)[vocab - 1])


def test_extend_ends_where_the_context_is_full(tiny_model):
    """A continuation past the engine's max_length is cut where the context is full, its
    child's step ended by "length" (finished, as expand's), its logprobs those of the tokens
    kept; one that just fills it ends by "length" too; a node that fills it is refused, and
    one past it (another engine's, of a longer context) by expand and topk_next too."""
    from search.engines.hf import HFEngine

    model, tok = tiny_model
    eng = HFEngine(copy.deepcopy(model), tok, chat=False, max_length=12)
    root = eng.root(Problem(prompt="1+2="))
    n = root.n_tokens
    (whole,) = eng.extend([root], [[5] * (11 - n)])
    (cut,) = eng.extend([root], [[5] * 30])
    (fills,) = eng.extend([root], [[5] * (12 - n)])
    assert whole.step.stop_reason == "forced" and not whole.finished
    assert cut.step.stop_reason == fills.step.stop_reason == "length" and cut.finished
    assert cut.n_tokens == fills.n_tokens == 12
    assert cut.step.logprobs[:11 - n] == pytest.approx(whole.step.logprobs, abs=1e-5)
    with pytest.raises(ValueError, match="leaves no room in the engine's context"):
        eng.extend([cut], [[5]])
    past = Node(problem=Problem(prompt="x"), prompt_ids=[5] * 13)
    with pytest.raises(ValueError, match="expand: a node of 13 tokens leaves no room"):
        eng.expand([past], 1)
    with pytest.raises(ValueError, match="a node of 13 tokens is past the engine's context"):
        eng.topk_next([past], 2)
    assert len(eng.topk_next([cut], 2)[0]) == 2  # (a full context's next token: computed)


def test_a_node_of_another_tokenizers_ids_is_refused(tiny_engine):
    """A root whose prompt ids the model has no row for (made by hand, or by an engine of
    another vocabulary) is refused with a clear error, not an IndexError from the
    embedding (nor, for a negative id, the embedding of a token counted from the end)."""
    for bad in (-2, 10_000):
        root = Node(problem=Problem(prompt="x"), prompt_ids=[3, bad, 4])
        with pytest.raises(ValueError, match=f"token id {bad} is outside the model's vocab"):
            tiny_engine.expand([root], 1, max_tokens=2)


@pytest.mark.parametrize("broken", ["nan", "overflow"])
def test_logits_that_are_not_finite_are_refused_not_sampled(tiny_model, device, broken):
    """A model whose logits hold NaN or inf (weights overflowing, or broken): expand raises a
    clear error, greedy and sampled alike, instead of children whose tokens are wherever the
    draw fell and whose logprobs are NaN."""
    from search.engines.hf import HFEngine

    model, tok = tiny_model
    bad = copy.deepcopy(model)
    with torch.no_grad():
        if broken == "nan":
            bad.lm_head.weight[3, 0] = float("nan")
        else:  # the final norm's output past float32: logits +-inf, their log-softmax NaN
            bad.model.norm.weight.fill_(3e38)
    eng = HFEngine(bad, tok, chat=False, device=device)
    root = eng.root(Problem(prompt="1+1="))
    for temperature in (0.0, 1.0):
        with pytest.raises(FloatingPointError, match="not finite"):
            eng.expand([root], 2, temperature=temperature)


def test_step_features_are_the_hidden_state_that_predicted_the_last_token(tiny_model, device):
    """keep_hidden: each child's feature equals the final hidden state (from a plain full
    forward) at the position that predicted the step's last token."""
    from search.engines.hf import HFEngine

    model, tok = tiny_model
    eng = HFEngine(copy.deepcopy(model), tok, chat=False, device=device, keep_hidden=True)
    root = eng.root(Problem(prompt="4*4="))
    kids = eng.expand([root], 6, stop=None, max_tokens=5, seed=2)[0]
    live = [k for k in kids if not k.finished][:2]  # a sampled EOS ends a path
    assert len(live) == 2
    grand = eng.expand(live, 1, stop=None, max_tokens=1, seed=3)  # 1-token steps too
    for kid in kids + [g[0] for g in grand]:
        ids = kid.token_ids()
        with torch.no_grad():
            h = model(torch.tensor([ids]), output_hidden_states=True).hidden_states[-1][0]
        assert torch.allclose(host(eng.step_features[kid]), h[len(ids) - 2], atol=1e-4)
