"""Model-free speculative decoding for the transformers engine: lossless, no draft model. It is
the drafting policy (`Drafting`) and the verification of drafts (`verify`) of the one decode
loop (search.engines.hf.decode.Decoder): a pass whose rows have no draft is a plain pass.

The paths of one search repeat one another (the prompt's numbers, a sibling's sentence, the
row's own earlier tokens); search.engines.hf.drafter turns that into drafts from two sources:
n-gram counts over every path of the trees being expanded (STAND: W. Song et al.,
"Accelerated Test-Time Scaling with Model-Free Speculative Sampling", arXiv:2506.04708) and
the model's top-k next tokens recycled from earlier forwards (Token Recycling: X. Luo et al.,
"Turning Trash into Treasure: Accelerating Inference of Large Language Models with Token
Recycling", ACL 2025, arXiv:2408.08696). A row's draft is, as both papers do, a TREE of up
to `tree` nodes grown best-first by estimated path probability, so that a rejected first
guess can be rescued by a sibling, or a chain (`tree = 0`: the tree of one child a node,
one guess per position). All rows verify theirs in ONE forward of q tokens each ([last
token, nodes in topological order, padding]): node i sits at position start + depth(i) and
attends to the row's cached columns and to its own ancestors in the tree (a [q, q] ancestry
block per row in the 4D mask).

Acceptance keeps the output distribution exactly the model's (drafter.greedy_path,
drafter.sampled_path), walking each row's tree from the root:
  greedy    follow the child holding the argmax while one does, then emit the argmax:
            token for token what plain decoding emits.
  sampling  the candidates are point masses, so multi-candidate speculative sampling
            (Leviathan et al., arXiv:2211.17192; Chen et al., arXiv:2302.01318; SpecInfer,
            arXiv:2305.09781) accepts child x1 with probability p(x1), else x2 with
            p(x2) / (1 - p(x1)), ..., and after rejecting them all draws from p without them;
            at the last accepted node, a bonus token from p. p is plain sampling's
            distribution (temperature, top-p); draws come from the call's generator in row
            order (a row's draws never depend on its cache slot).
Rows accept different paths: a row keeps the columns of its last token and accepted nodes,
the rest are masked out of its cache row (`valid`, and `bias` for eager attention), columns
every row rejected are rewound, `squeeze` compacts the holes when room runs out, and a child
takes exactly its row's columns. Keys carry their positions (RoPE), so holes and moved
columns change nothing. A step ends where plain decoding ends it (stop string, EOS,
max_tokens, context length); tokens after that point are dropped.

Chain lengths adapt per row (+2 after a fully accepted draft, -1 after a rejection, as
transformers' "heuristic" schedule); a tree adapts through its node threshold (`min_prob`).
Drafting gives way as the batch grows: a pass feeds at most `max_batch_tokens` tokens
(active rows x (1 + draft)), since a compute-bound forward pays for every extra token
(SpecDec++, K. Huang et al., arXiv:2405.19715, stops drafting by a trained acceptance
predictor; the batch size is the cheap signal used here).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from search.engines.hf.config import SpecConfig
from search.engines.hf.drafter import Drafter, DraftTree, greedy_path, sampled_path
from search.runtime.kv import SlabCache
from search.runtime.passes import Pass
from search.runtime.sampling import categorical, probs
from search.runtime.transfer import upload

if TYPE_CHECKING:
    from search.engines.hf.decode import Decoder

__all__ = ["Drafting", "SpecStats", "Speculation", "squeeze", "verify"]


@dataclass
class SpecStats:
    """Counters over an engine's speculative `expand` calls (engine.spec_stats)."""

    passes: int = 0  # decoder forwards (with or without drafts)
    widest: int = 0  # most tokens fed in one pass
    verified: int = 0  # row-passes that verified a draft of >= 1 token
    drafted: int = 0  # draft tokens (tree nodes) verified
    accepted: int = 0  # draft tokens accepted (the accepted paths' nodes)
    rescued: int = 0  # accepted paths through a node that is not its parent's first child
    emitted: int = 0  # step tokens kept
    squeezes: int = 0  # cache compactions (rejected columns reclaimed)

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def per_verification(self) -> float:
        """Tokens a row gains per verification: accepted drafts + the model's own token."""
        return (self.accepted + self.verified) / self.verified if self.verified else 0.0


@dataclass(frozen=True)
class Speculation:
    """What speculation keeps across an engine's calls: its knobs, the drafter (n-gram table
    and recycled top-k, which grow with every call) and the counters."""

    config: SpecConfig
    drafter: Drafter
    stats: SpecStats


class Drafting:
    """Speculation's part of one `expand` call (the loop's `drafting`): each row's draft
    before a pass, and what the drafter learns from the pass. klen[r]: row r's chain length."""

    def __init__(self, spec: Speculation, dec: Decoder) -> None:
        self.cfg, self.drafter, self.stats, self.dec = spec.config, spec.drafter, spec.stats, dec
        self.klen = [self.cfg.first_draft] * len(dec.rows)
        # batch-cache columns beyond the step's room: one pass of rejected drafts (`squeeze`
        # reclaims older ones)
        self.slack = max(self.cfg.max_draft, self.cfg.tree) + 1

    def start(self, logits: torch.Tensor) -> None:
        """Count the rows' trees; recycle the top-k of their stored logits [B, V]."""
        rows = self.dec.rows
        self.drafter.add_trees(rows)
        # node id -> its path's last tokens (the drafter's context before its step)
        self.tails: dict[int, list[int]] = {n.id: n.token_ids()[-self.drafter.span:]
                                            for n in {n.id: n for n in rows}.values()}
        if self.cfg.recycle_k:
            self.drafter.recycle([self.tails[n.id][-1] for n in rows],
                                 logits.topk(min(self.cfg.recycle_k, logits.shape[-1])).indices.tolist())

    def context(self, r: int, upto: int) -> list[int]:
        """The drafter's context of row r after its first `upto` step tokens."""
        t, span = self.dec.toks[r], self.drafter.span
        return t[upto - span:upto] if upto >= span else \
            [*self.tails[self.dec.rows[r].id], *t[:upto]][-span:]

    def add(self, r: int, upto: int, tokens: list[int]) -> None:
        """Row r kept `tokens` after its first `upto` step tokens: count their n-grams."""
        self.drafter.add(self.context(r, upto), tokens)

    def drafts(self, active: list[int]) -> list[DraftTree]:
        """Per slot, its row's draft within what the batch affords (max_batch_tokens) and
        the step's room: a tree of up to cfg.tree nodes, or a chain (a tree of one child a
        node, no threshold) of up to klen tokens (empty: the row feeds its last token alone)."""
        cfg, none, dec = self.cfg, DraftTree.chain(()), self.dec
        min_prob, fan = (cfg.min_prob, None) if cfg.tree else (0.0, 1)
        afford = cfg.max_batch_tokens // len(active) - 1  # draft tokens per row the batch affords
        out = []
        for r in active:
            deep = min(cfg.max_draft, dec.left(r) - 1)  # a pass emits up to depth + 1 tokens
            k = min(cfg.tree or self.klen[r], afford)
            out.append(none if k <= 0 or deep <= 0 else self.drafter.tree(
                self.context(r, len(dec.toks[r])), k, deep, min_prob, fan))
        return out

    def observe(self, active: list[int], trees: list[DraftTree], emits: list[list[int]],
                paths: list[list[int]], logits: torch.Tensor) -> None:
        """After a pass (logits [A, q, V] after each fed token), before its tokens are
        appended: the model's top-k recycled, chain lengths adapted, the counters."""
        cfg, stats, A, q = self.cfg, self.stats, len(active), logits.shape[1]
        if cfg.recycle_k:  # the model's top-k after every fed token (padding aside), as
            # Token Recycling keeps them; then the accepted paths' again: their real context wins
            cands = logits.topk(min(cfg.recycle_k, logits.shape[-1])).indices.tolist()
            for b in sorted(range(A), key=active.__getitem__):
                last = self.dec.toks[active[b]][-1]  # the row's token fed first
                self.drafter.recycle([last, *trees[b].tokens], cands[b])
                self.drafter.recycle([last, *emits[b][:-1]], [cands[b][c] for c in paths[b]])
        for r, p, t in zip(active, paths, trees):
            if len(t) and not cfg.tree:  # a chain: every draft token accepted (p: root too)?
                k = self.klen[r]
                self.klen[r] = min(cfg.max_draft, k + 2) if len(p) - 1 == len(t) else max(1, k - 1)
        stats.passes += 1
        stats.widest = max(stats.widest, A * q)
        stats.verified += sum(1 for t in trees if len(t))
        stats.drafted += sum(len(t) for t in trees)
        stats.accepted += sum(len(p) - 1 for p in paths)
        stats.rescued += sum(1 for t, p in zip(trees, paths)  # a first child has no elder
                             if any(t.parents.index(t.parents[c - 1]) < c - 1 for c in p[1:]))


def tree_mask(cache: SlabCache, trees: list[DraftTree], q: int) -> torch.Tensor:
    """[A, 1, q, n + q] (bool, or additive for eager attention): each row's valid cached
    columns, then a [q, q] ancestry block: the row's last token (column 0) and each node
    attend to their ancestors and themselves, padding columns only to themselves."""
    A, n = len(trees), cache.length
    tree = upload([t.ancestry(q) for t in trees], cache.buf.device, torch.bool)[:, None]  # [A, 1, q, q]
    if cache.mask_kind == "bool":
        return torch.cat([cache.valid[:A, None, None, :n].expand(A, 1, q, n), tree], -1)
    bias = cache.bias[:A, None, None, :n].expand(A, 1, q, n)
    block = torch.zeros(tree.shape, dtype=bias.dtype, device=bias.device)
    return torch.cat([bias, block.masked_fill_(~tree, torch.finfo(bias.dtype).min)], -1)


def verify(dec: Decoder, active: list[int], trees: list[DraftTree], q: int
           ) -> Generator[Pass, Any, tuple[list[list[int]], list[list[float]], list[list[int]],
                                           Any, torch.Tensor | None]]:
    """One forward of [last token, draft nodes..., padding] per row (q tokens), then the
    acceptance walks: per slot the tokens it emits, their logprobs, its accepted columns
    (0, its last token, first), the forward's output, and (keep_hidden) the states the
    emitted tokens were predicted from [A, m, h]."""
    eng, cache, dev = dec.eng, dec.cache, dec.eng.device
    A, n = len(active), cache.length
    last = [dec.toks[r][-1] for r in active]
    pad = [q - 1 - len(t) for t in trees]
    # [A, q]: padding repeats the last token, never accepted
    ids = upload([[x, *t.tokens, *[x] * k] for x, t, k in zip(last, trees, pad)], dev)
    depth = upload([[0, *t.depth, *[0] * k] for t, k in zip(trees, pad)], dev)
    res = yield eng.kv.pass_for(ids, dec.at + depth, cache, tree_mask(cache, trees, q), q,
                                dec.hidden)
    eng.meter.charge_model(flops=2.0 * eng.n_params * A * q)
    logits = res.logits.float()  # [A, q, V]
    paths, final = _accept(dec, logits, trees, ids, active)
    # emitted: the accepted nodes' tokens, then the model's token after the last one
    emits = [[*(t.tokens[c - 1] for c in p[1:]), f] for t, p, f in zip(trees, paths, final)]
    m = max(len(p) for p in paths)
    cols = upload([[*p, *[0] * (m - len(p))] for p in paths], dev)  # [A, m]
    on_path = logits.gather(1, cols[..., None].expand(-1, -1, logits.shape[-1]))  # [A, m, V]
    emit = upload([[*x, *[x[-1]] * (m - len(x))] for x in emits], dev)
    lps = on_path.log_softmax(-1).gather(-1, emit[..., None]).squeeze(-1).tolist()
    # cache: a row keeps its last token's column n and its accepted nodes' columns
    top = n + max(max(p) for p in paths) + 1
    cache.valid[:A, n:n + q] = torch.zeros(A, q, dtype=torch.bool, device=dev).scatter_(
        1, cols, True)
    cache.valid[:A, top:n + q] = True  # rewound: the next pass writes these columns
    cache.sync_bias(A, n)
    cache.rewind(top)
    hid = None
    if dec.hidden:  # hid[b, j]: the state emitted token j was predicted from
        h = res.hidden_states[-1].float()  # [A, q, h]
        hid = h.gather(1, cols[..., None].expand(-1, -1, h.shape[-1]))
    return emits, [lp[:len(p)] for lp, p in zip(lps, paths)], paths, res, hid


def _accept(dec: Decoder, logits: torch.Tensor, trees: list[DraftTree], ids: torch.Tensor,
            active: list[int]) -> tuple[list[list[int]], list[int]]:
    """logits [A, q, V], ids [A, q] (the fed tokens) -> per slot the accepted columns
    (0, the last token, first) and the model's token after them."""
    A, q, _ = logits.shape
    dev = logits.device
    if dec.temperature == 0:
        best = logits.argmax(-1).tolist()  # [A][q]
        paths = [greedy_path(t, bb) for t, bb in zip(trees, best)]
        return paths, [bb[p[-1]] for bb, p in zip(best, paths)]
    p = probs(logits, dec.temperature, dec.top_p)  # [A, q, V]
    # draws in row order: a row's randomness must not depend on its cache slot
    order = sorted(range(A), key=active.__getitem__)
    # one uniform per node, then the walks
    parents = upload([[*t.parents, *[0] * (q - 1 - len(t))] for t in trees], dev)
    # px[b][i]: p(node i's token) after its parent
    px = p[torch.arange(A, device=dev)[:, None], parents, ids[:, 1:]].tolist()
    sizes = [len(trees[b]) for b in order]
    u = torch.rand(sum(sizes), generator=dec.gen, dtype=torch.float64, device=dev).tolist()
    paths, at = [[0] for _ in trees], 0
    for b, k in zip(order, sizes):
        paths[b] = sampled_path(trees[b], px[b], u[at:at + k])
        at += k
    ends = upload([pa[-1] for pa in paths], dev)
    dist = p[torch.arange(A, device=dev), ends]  # [A, V]: p at the last accepted node
    for b, (t, pa) in enumerate(zip(trees, paths)):
        tried = [t.tokens[c - 1] for c in t.children()[pa[-1]]]
        if tried:  # every child was rejected: the residual draws without them
            dist[b, tried] = 0.0
    perm = upload(order, dev)
    out = torch.empty(A, dtype=torch.long, device=dev)
    out[perm] = categorical(dist[perm], dec.gen)  # x[i] belongs to slot perm[i]
    return paths, out.tolist()


def squeeze(dec: Decoder, active: list[int]) -> None:
    """Move each row's fed step columns next to its path, reclaiming rejected ones."""
    cache, P = dec.cache, dec.P
    top = P + max(len(dec.cols[r]) for r in active)
    for b, r in enumerate(active):
        c = len(dec.cols[r])
        if dec.cols[r] != list(range(P, P + c)):
            cache.move(b, dec.cols[r], P)
            dec.cols[r] = list(range(P, P + c))
        cache.valid[b, P:P + c] = True
        cache.valid[b, P + c:top] = False
    cache.valid[:len(active), top:] = True
    cache.sync_bias(len(active), P)
    cache.rewind(top)
    if dec.drafting:
        dec.drafting.stats.squeezes += 1
