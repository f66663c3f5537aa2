"""HF PRM plumbing on tiny local models of both families (no download).

Reference: one plain forward over the whole formatted solution, read at every step tag;
the cached, batched, step-by-step scorer must agree within 1e-4.
"""

from __future__ import annotations

import pytest
import torch
from helpers import char_tokenizer

from rewards.prm import HFPRM, MATH_SHEPHERD, QWEN_PRM, detect_format
from search.session import Session
from search.types import Node, Problem, Step

ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789 +-*=.\nки<>|_/"
CHAT = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def shepherd_prm():
    from transformers import MistralConfig, MistralForCausalLM

    tok = char_tokenizer(ALPHABET)
    torch.manual_seed(0)
    cfg = MistralConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        max_position_embeddings=512, sliding_window=None)
    return HFPRM(MistralForCausalLM(cfg), tok, device="cpu")


def qwen_prm():
    from transformers import Qwen2Config, Qwen2ForTokenClassification

    tok = char_tokenizer(ALPHABET)
    tok.add_special_tokens({"additional_special_tokens": ["<extra_0>"]})
    tok.chat_template = CHAT
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=512)
    cfg.num_labels = 2
    return HFPRM(Qwen2ForTokenClassification(cfg), tok, device="cpu")


def tree():
    """Two paths sharing a first step, of different lengths."""
    root = Node(problem=Problem(prompt="what is 2+3*4"))

    def add(parent, text):
        return Node(parent=parent, step=Step(text, (0,), (0.0,), "stop"))

    s1 = add(root, "3*4=12")
    a = add(add(s1, "2+12=14"), "the answer is 14")
    b = add(s1, "so 14.")
    return root, a, b


def reference(prm: HFPRM, leaf: Node) -> list[float]:
    ids, tags = [], []
    for node in leaf.path():
        ids += prm._own(node)
        tags.append(len(ids) - 1)
    with torch.no_grad():
        out = prm.model(torch.tensor([ids])).logits[0].float()
    return [prm.reward(out[t]) for t in tags[1:]]


@pytest.mark.parametrize("make,fmt", [(shepherd_prm, MATH_SHEPHERD), (qwen_prm, QWEN_PRM)])
def test_cached_step_scores_match_one_plain_forward(make, fmt):
    prm = make()
    assert prm.fmt == fmt == detect_format(prm.model)
    root, a, b = tree()
    prm = prm.bind(Session())
    # score in search order: the shared first step, then both paths' later steps in one batch
    first = prm.score(root.problem, [a.path()[1]])
    later = prm.score(root.problem, a.path()[2:] + b.path()[2:])
    mine_a = first + later[:2]
    mine_b = first + later[2:]
    for mine, leaf in ((mine_a, a), (mine_b, b)):
        ref = reference(prm, leaf)
        assert all(0.0 <= v <= 1.0 for v in mine)
        assert max(abs(x - y) for x, y in zip(mine, ref)) < 1e-4
    assert prm.meter.scorer_calls == 4


def test_kv_reuse_runs_only_the_new_steps_tokens():
    prm = shepherd_prm()
    root, a, b = tree()
    prm = prm.bind(Session())
    path = a.path()
    prm.score(root.problem, path[1:3])
    before = prm.meter.scorer_tokens
    prm.score(root.problem, [a])
    assert prm.meter.scorer_tokens - before == len(prm._own(a))


def test_kv_cache_cap_bounds_the_kept_kv_and_scores_do_not_move():
    """A PRM kept under a 1-byte KV cap drops every segment no call reads, and recomputes
    what a later call needs (uncharged): the same scores and charges as the default cap."""
    roomy = shepherd_prm()
    tight = HFPRM(roomy.model, roomy.tokenizer, device="cpu", kv_cache=1)
    assert tight.kv.store.cap == 1 and roomy.kv.store.cap > 1 << 20
    got = []
    for prm in (roomy, tight):
        root, a, b = tree()
        prm = prm.bind(Session())
        scores = [prm.score(root.problem, nodes) for nodes in (a.path()[1:], [b], [a])]
        got.append((scores, prm.meter.scorer_tokens))
    assert got[0] == got[1]
    assert tight.kv.store.dropped > 0 and tight.kv.recomputed > 0
    assert roomy.kv.store.dropped == 0 and roomy.kv.recomputed == 0
    assert tight.kv.store.peak < roomy.kv.store.peak


@pytest.mark.skipif("not __import__('search.runtime.kernel').runtime.kernel.available()")
def test_scoring_reads_the_paths_where_they_live():
    """A PRM on the lean forward reads its paths' KV as the engine does (KVTree.attend_in_place):
    a scoring call deeper in the tree moves only the new steps' KV (their columns written, into
    their nodes' pool blocks), 1x at every depth, where copying each path into the call's
    batch cache grows with the depth; the scores are the same bits either way."""
    from reports.bench.kvbytes import KVBytes

    got = {}
    for tree in (True, False):
        prm = shepherd_prm()
        assert prm.kv.tree and prm.kv.partial_prompts
        if not tree:  # (each row's path copied into blocks of its own: KVTree.batch)
            prm.kv.attend_in_place(tree=False)
            assert not prm.kv.tree and prm.kv.pool is not None
        bound = prm.bind(Session())
        root = Node(problem=Problem(prompt="what is 2+3*4 " * 4))
        leaves, moved, scores = [root] * 4, [], []
        for depth in range(4):
            leaves = [Node(parent=leaf, step=Step(f"step {depth}: 3*4=12 so {i}", (0,), (0.0,),
                                                  "stop")) for i, leaf in enumerate(leaves)]
            mode = KVBytes(prm.kv.layout.layers, prm.kv.layout.head_dim)
            with mode:
                scores.append(bound.score(root.problem, leaves))
            moved.append(mode.moved / (sum(len(prm._own(leaf)) for leaf in leaves)
                                       * prm.kv.column_bytes))
        got[tree] = moved, scores
    assert got[True][0][1:] == [1.0] * 3 and got[True][1] == got[False][1]
    assert got[False][0][-1] > got[False][0][1] > 2


@pytest.mark.parametrize("bad", [-1, 1.5, "4GB"])
def test_kv_cache_must_be_bytes(bad):
    prm = shepherd_prm()
    with pytest.raises(ValueError, match="kv_cache"):
        HFPRM(prm.model, prm.tokenizer, device="cpu", kv_cache=bad)


def test_labels_must_be_single_tokens():
    from transformers import MistralConfig, MistralForCausalLM

    from rewards.prm import PRMFormat

    tok = char_tokenizer(ALPHABET)
    cfg = MistralConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32,
                        num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
    with pytest.raises(ValueError, match="not a single token"):
        HFPRM(MistralForCausalLM(cfg), tok, PRMFormat("x", " ки\n", good="++", bad="-"))


def test_root_is_not_scored():
    prm = shepherd_prm()
    root, _, _ = tree()
    with pytest.raises(ValueError, match="root"):
        prm.score(root.problem, [root])


def test_step_check_and_oracle_rewards():
    from rewards.verifier import OracleScorer, StepCheckScorer

    p = Problem(prompt="q", answer="14")
    root = Node(problem=p)
    good = Node(parent=root, step=Step("2 + 12 = 14.", (1,), (0.0,), "stop"))
    bad = Node(parent=root, step=Step("2 + 12 = 15.", (1,), (0.0,), "stop"))
    none = Node(parent=root, step=Step("Let us think.", (1,), (0.0,), "stop"))
    assert StepCheckScorer().score(p, [good, bad, none]) == [1.0, 0.0, 0.5]
    done = Node(parent=good, step=Step(" The answer is 14.", (2,), (0.0,), "eos"))
    wrong = Node(parent=bad, step=Step(" The answer is 15.", (2,), (0.0,), "eos"))
    unfinished = Node(parent=good, step=Step(" The answer is 14.", (2,), (0.0,), "stop"))
    assert OracleScorer().score(p, [done, wrong, unfinished]) == [1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="gold answer"):
        OracleScorer().score(Problem(prompt="q"), [done])


def test_self_eval_is_p_yes_from_a_full_forward(tiny_engine):
    """P(Yes)/(P(Yes)+P(No)) after path + question, against a plain forward; the question
    leaves no node in the tree."""
    from rewards.self_eval import SelfEvalScorer

    eng = tiny_engine
    sc = SelfEvalScorer(eng, question="\n\nab", yes="1", no="0")
    root = eng.root(Problem(prompt="2+2="))
    (kid,) = eng.extend([root], ["4\n\n"])
    (value,) = sc.score(root.problem, [kid])
    ids = kid.token_ids() + eng.tokenizer("\n\nab", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        lp = eng.model(torch.tensor([ids])).logits[0, -1].log_softmax(-1)
    y, n = lp[sc.yes].item(), lp[sc.no].item()
    assert value == pytest.approx(1 / (1 + torch.exp(torch.tensor(n - y)).item()), abs=1e-5)
    assert kid.children == []
