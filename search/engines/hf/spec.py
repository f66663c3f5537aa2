"""Model-free speculative decoding for the transformers engine: lossless, no draft model.

The paths of one search repeat one another (the prompt's numbers, a sibling's sentence, the
row's own earlier tokens); search.engines.hf.drafter turns that into drafts from two sources:
n-gram counts over every path of the trees being expanded (STAND: W. Song et al.,
"Accelerated Test-Time Scaling with Model-Free Speculative Sampling", arXiv:2506.04708) and
the model's top-k next tokens recycled from earlier forwards (Token Recycling: X. Luo et al.,
"Turning Trash into Treasure: Accelerating Inference of Large Language Models with Token
Recycling", ACL 2025, arXiv:2408.08696). A row's draft is a chain (`tree = 0`: one guess per
position) or, as both papers do, a TREE of up to `tree` nodes grown best-first by estimated
path probability, so that a rejected first guess can be rescued by a sibling. All rows
verify theirs in ONE forward of q tokens each ([last token, nodes in topological order,
padding]): node i sits at position start + depth(i) and attends to the row's cached columns
and to its own ancestors in the tree (a [q, q] ancestry block per row in the 4D mask).

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
every row rejected are rewound, `_squeeze` compacts the holes when room runs out, and a child
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
from typing import Any

import torch

from search.engines.hf.config import SpecConfig
from search.engines.hf.decode import Decoder, DecodeState, unique
from search.engines.hf.drafter import Drafter, DraftTree, greedy_path, sampled_path
from search.runtime.kv import SlabCache
from search.runtime.passes import Job, Pass
from search.runtime.sampling import categorical, probs, sample
from search.runtime.transfer import upload
from search.types import Node

__all__ = ["SpecDecoder", "SpecStats", "Speculation"]


@dataclass
class SpecStats:
    """Counters over an engine's speculative `expand` calls (engine.spec_stats)."""

    passes: int = 0  # decoder forwards (with or without drafts)
    fed: int = 0  # tokens through those forwards: rows x q, rejected drafts and padding included
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


class SpecDecoder(Decoder):
    """One `expand` call decoded speculatively (decode.StepDecoder's contract, k+1 tokens a pass).

    Per row r: toks[r] the step so far; cols[r] the cache columns of its fed step tokens
    (all but the latest, which is fed first in the next pass); klen[r] its draft length.
    """

    def __init__(self, state: DecodeState, spec: Speculation, rows: list[Node],
                 stop: tuple[str, ...], max_tokens: int, temperature: float, top_p: float,
                 seed: int) -> None:
        super().__init__(state, rows, stop, max_tokens, temperature, top_p, seed)
        self.cfg, self.drafter, self.stats = spec.config, spec.drafter, spec.stats
        self.toks: list[list[int]] = [[] for _ in rows]
        self.lps: list[list[float]] = [[] for _ in rows]
        self.cols: list[list[int]] = [[] for _ in rows]
        self.klen = [self.cfg.first_draft] * len(rows)

    @torch.inference_mode()
    def run(self) -> Job[list[Node]]:
        s, rows = self.s, self.rows
        self.drafter.add_trees(rows)
        uniq = unique(rows)
        parts = {n.id: s.kv.path_parts(n) for n in uniq}
        self.tails = {n.id: n.token_ids()[-self.drafter.span:] for n in uniq}
        # the slack takes one pass of rejected columns; _squeeze reclaims older ones
        cache = s.kv.batch([parts[n.id] for n in rows],
                           self.room() + max(self.cfg.max_draft, self.cfg.tree) + 1)
        assert isinstance(cache, SlabCache)
        self.cache, self.P = cache, cache.length
        segs = [s.kv.get(n) for n in rows]
        logits = torch.stack([g.logits for g in segs])  # type: ignore[union-attr]  # [B, V]
        # [B, new, hidden]: the state each new token was predicted from (value features)
        self.hidden = s.kv.keep_hidden and all(g.hidden is not None for g in segs)  # type: ignore[union-attr]
        hid = (torch.stack([g.hidden for g in segs])[:, None]  # type: ignore[union-attr,misc]
               if self.hidden else None)
        if self.cfg.recycle_k:
            self.drafter.recycle([self.tails[n.id][-1] for n in rows],
                                 logits.topk(min(self.cfg.recycle_k, logits.shape[-1])).indices.tolist())
        # the first token: plain decoding's own draw from the nodes' stored logits
        tok, lp = sample(logits, temperature=self.temperature, top_p=self.top_p,
                         generator=self.gen)
        new, new_lp = [[t] for t in tok.tolist()], [[x] for x in lp.tolist()]
        out: list[Node | None] = [None] * len(rows)
        active = list(range(len(rows)))  # cache slot -> row
        last: dict[int, torch.Tensor] = {}  # row -> the state its latest token came from
        while True:
            ends = self._extend(active, new, new_lp)
            keep = [b for b, (_, why) in enumerate(ends) if why is None]
            for b, (m, why) in enumerate(ends):
                r = active[b]
                if hid is not None and m:
                    last[r] = hid[b, m - 1]
                if why == "budget" and not self.toks[r]:  # no token of this step fit
                    out[r] = self.cut(rows[r], [], [], self.cache.buf[:, :, b, :, :0], None,
                                      segs[r])
                elif why is not None:
                    child = out[r] = self._child(b, r, why)
                    if r in last:
                        s.features[child] = last[r].clone()
            if not keep:
                break
            if len(keep) < len(active):
                active = [active[b] for b in cache.keep(keep)]
            if s.meter.refuse_forward(2.0 * s.n_params * len(active)):  # FLOPs or seconds: stop here
                for b, r in enumerate(active):
                    child = out[r] = self._child(b, r, "budget")
                    if r in last:
                        s.features[child] = last[r].clone()
                break
            new, new_lp, hid = yield from self._verify(active)
        return [c for c in out if c is not None]

    def _context(self, r: int) -> list[int]:
        t = self.toks[r]
        span = self.drafter.span
        return t[-span:] if len(t) >= span else [*self.tails[self.rows[r].id], *t][-span:]

    def _extend(self, active: list[int], new: list[list[int]], new_lp: list[list[float]]
                ) -> list[tuple[int, str | None]]:
        """Append each row's new tokens up to the first that ends its step, checked one by
        one as plain decoding checks them: per slot (tokens kept, why it ends or None)."""
        span, ends = self.rule.span, []
        for b, r in enumerate(active):
            t, n0 = self.toks[r], self.rows[r].n_tokens
            why: str | None = None
            m = len(new[b])
            for j in range(m):
                window = t[-span:] + new[b][:j + 1]  # the step's latest tokens
                why = self.reason(window, n0, len(t) + j + 1)
                if why is not None:
                    m = j + 1
                    break
            ends.append((m, why))
        want = sum(m for m, _ in ends)
        room = self.s.meter.token_room(want)
        if room < want:  # the budget ends in this pass: the first rows (row order) keep theirs
            for b in sorted(range(len(active)), key=active.__getitem__):
                m = min(ends[b][0], room)
                room -= m
                ends[b] = (m, "budget")
        out, kept = [], 0
        for b, r in enumerate(active):
            t, (m, why) = self.toks[r], ends[b]
            self.drafter.add(self._context(r), new[b][:m])
            t.extend(new[b][:m])
            self.lps[r].extend(new_lp[b][:m])
            kept += m
            out.append((m, why))
        self.s.meter.charge_model(generated=kept, passes=0)
        self.stats.emitted += kept
        return out

    def _drafts(self, active: list[int]) -> list[DraftTree]:
        """Per slot, its row's draft within what the batch affords (max_batch_tokens) and
        the step's room: a tree of up to cfg.tree nodes, or a chain of up to klen tokens."""
        cfg, none = self.cfg, DraftTree.chain(())
        afford = cfg.max_batch_tokens // len(active) - 1  # draft tokens per row the batch affords
        out = []
        for r in active:
            left = min(self.max_tokens, self.s.max_length - self.rows[r].n_tokens) - len(self.toks[r])
            deep = min(cfg.max_draft, left - 1)  # a pass emits up to depth + 1 tokens
            k = min(cfg.tree, afford) if cfg.tree else min(self.klen[r], afford, deep)
            if k <= 0 or deep <= 0:
                out.append(none)
            elif cfg.tree:
                out.append(self.drafter.tree(self._context(r), k, deep, cfg.min_prob))
            else:
                out.append(DraftTree.chain(self.drafter.draft(self._context(r), k)))
        return out

    def _mask(self, trees: list[DraftTree], q: int) -> torch.Tensor:
        """[A, 1, q, n + q] (bool, or additive for eager attention): each row's valid cached
        columns, then a [q, q] ancestry block: the row's last token (column 0) and each node
        attend to their ancestors and themselves, padding columns only to themselves."""
        cache, A, n = self.cache, len(trees), self.cache.length
        if q == 1:
            return cache.attention_mask(1)  # a view
        tree = upload([t.ancestry(q) for t in trees], self.s.device,
                      torch.bool)[:, None]  # [A, 1, q, q]
        if cache.mask_kind == "bool":
            return torch.cat([cache.valid[:A, None, None, :n].expand(A, 1, q, n), tree], -1)
        bias = cache.bias[:A, None, None, :n].expand(A, 1, q, n)
        block = torch.zeros(tree.shape, dtype=bias.dtype, device=bias.device)
        return torch.cat([bias, block.masked_fill_(~tree, torch.finfo(bias.dtype).min)], -1)

    def _verify(self, active: list[int]) -> Generator[Pass, Any, tuple[
            list[list[int]], list[list[float]], torch.Tensor | None]]:
        """One forward of [last token, draft nodes..., padding] per row; per slot the tokens
        it emits, their logprobs, and (keep_hidden) the hidden states they were predicted
        from [A, m, h]."""
        s, cfg, cache, stats, dev = self.s, self.cfg, self.cache, self.stats, self.s.device
        A = len(active)
        trees = self._drafts(active)
        q = 1 + max(len(t) for t in trees)
        if cache.length + q > cache.capacity:
            self._squeeze(active)
            q = min(q, cache.capacity - cache.length)
            trees = [t.head(q - 1) for t in trees]
        n = cache.length
        last = [self.toks[r][-1] for r in active]
        pad = [q - 1 - len(t) for t in trees]
        # [A, q]: padding repeats the last token, never accepted
        ids = upload([[x, *t.tokens, *[x] * k] for x, t, k in zip(last, trees, pad)], dev)
        depth = upload([[0, *t.depth, *[0] * k] for t, k in zip(trees, pad)], dev)
        start = upload([self.rows[r].n_tokens + len(self.toks[r]) - 1 for r in active], dev)
        res = yield s.kv.pass_for(ids, start[:, None] + depth, cache, self._mask(trees, q), q,
                                  self.hidden)
        s.meter.charge_model(flops=2.0 * s.n_params * A * q)
        logits = res.logits.float()  # [A, q, V]
        paths, final = self._accept(logits, trees, ids, active)
        # emitted: the accepted nodes' tokens, then the model's token after the last one
        emits = [[*(t.tokens[c - 1] for c in p[1:]), f] for t, p, f in zip(trees, paths, final)]
        m = max(len(p) for p in paths)
        cols = upload([[*p, *[0] * (m - len(p))] for p in paths], dev)  # [A, m]
        on_path = logits[:, :1] if m == 1 else logits.gather(  # [A, m, V]
            1, cols[..., None].expand(-1, -1, logits.shape[-1]))
        emit = upload([[*x, *[x[-1]] * (m - len(x))] for x in emits], dev)
        lps = on_path.log_softmax(-1).gather(-1, emit[..., None]).squeeze(-1).tolist()
        # cache: a row keeps its last token's column n and its accepted nodes' columns
        top = n + max(max(p) for p in paths) + 1
        cache.valid[:A, n:n + q] = torch.zeros(A, q, dtype=torch.bool, device=dev).scatter_(
            1, cols, True)
        cache.valid[:A, top:n + q] = True  # rewound: the next pass writes these columns
        cache.sync_bias(A, n)
        cache.rewind(top)
        if cfg.recycle_k:  # the model's top-k after every fed token (padding aside), as
            # Token Recycling keeps them; then the accepted paths' again: their real context wins
            cands = logits.topk(min(cfg.recycle_k, logits.shape[-1])).indices.tolist()
            for b in sorted(range(A), key=active.__getitem__):
                self.drafter.recycle([last[b], *trees[b].tokens], cands[b])
                self.drafter.recycle([last[b], *emits[b][:-1]], [cands[b][c] for c in paths[b]])
        for b, r in enumerate(active):
            p, t = paths[b], trees[b]
            self.cols[r].extend(n + c for c in p)
            if len(t) and not cfg.tree:
                a = len(p) - 1
                self.klen[r] = min(cfg.max_draft, self.klen[r] + 2) if a == len(t) else max(1, self.klen[r] - 1)
        stats.passes += 1
        stats.fed += A * q
        stats.widest = max(stats.widest, A * q)
        stats.verified += sum(1 for t in trees if len(t))
        stats.drafted += sum(len(t) for t in trees)
        stats.accepted += sum(len(p) - 1 for p in paths)
        stats.rescued += sum(1 for t, p in zip(trees, paths)  # a first child has no elder
                             if any(t.parents.index(t.parents[c - 1]) < c - 1 for c in p[1:]))
        hid = None
        if self.hidden:  # hid[b, j]: the state emitted token j was predicted from
            h = res.hidden_states[-1].float()  # [A, q, h]
            hid = h.gather(1, cols[..., None].expand(-1, -1, h.shape[-1]))
        return emits, [lp[:len(p)] for lp, p in zip(lps, paths)], hid

    def _accept(self, logits: torch.Tensor, trees: list[DraftTree], ids: torch.Tensor,
                active: list[int]) -> tuple[list[list[int]], list[int]]:
        """logits [A, q, V], ids [A, q] (the fed tokens) -> per slot the accepted columns
        (0, the last token, first) and the model's token after them."""
        A, q, _ = logits.shape
        dev = logits.device
        if self.temperature == 0:
            best = logits.argmax(-1).tolist()  # [A][q]
            paths = [greedy_path(t, bb) for t, bb in zip(trees, best)]
            return paths, [bb[p[-1]] for bb, p in zip(best, paths)]
        p = probs(logits, self.temperature, self.top_p)  # [A, q, V]
        # draws in row order: a row's randomness must not depend on its cache slot
        order = sorted(range(A), key=active.__getitem__)
        paths = [[0] for _ in trees]
        if q > 1:  # one uniform per node, then the walks
            parents = upload([[*t.parents, *[0] * (q - 1 - len(t))] for t in trees], dev)
            # px[b][i]: p(node i's token) after its parent
            px = p[torch.arange(A, device=dev)[:, None], parents, ids[:, 1:]].tolist()
            sizes = [len(trees[b]) for b in order]
            u = torch.rand(sum(sizes), generator=self.gen, dtype=torch.float64,
                           device=dev).tolist()
            at = 0
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
        return paths, _unsort(categorical(dist[perm], self.gen), perm).tolist()

    def _squeeze(self, active: list[int]) -> None:
        """Move each row's fed step columns next to its path, reclaiming rejected ones."""
        cache, P = self.cache, self.P
        top = P + max(len(self.cols[r]) for r in active)
        for b, r in enumerate(active):
            c = len(self.cols[r])
            if self.cols[r] != list(range(P, P + c)):
                idx = upload(self.cols[r], self.s.device)
                cache.buf[:, :, b, :, P:P + c] = cache.buf[:, :, b].index_select(3, idx)
                self.cols[r] = list(range(P, P + c))
            cache.valid[b, P:P + c] = True
            cache.valid[b, P + c:top] = False
        cache.valid[:len(active), top:] = True
        cache.sync_bias(len(active), P)
        cache.rewind(top)
        self.stats.squeezes += 1

    def _child(self, b: int, r: int, reason: str) -> Node:
        toks = self.toks[r]
        idx = upload(self.cols[r][:len(toks) - 1], self.s.device)
        kv = self.cache.buf[:, :, b].index_select(3, idx)  # [L, 2, H, len - 1, D]
        child = self.child(self.rows[r], toks, self.lps[r], reason, kv)
        self.drafter.seen.add(child.id)  # its tokens were counted as they came
        return child


def _unsort(x: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """x[i] belongs to slot order[i] -> the same values by slot."""
    out = torch.empty_like(x)
    out[order] = x
    return out
