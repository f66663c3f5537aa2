"""Model-free speculative decoding for the transformers engine: lossless, no draft model.

The paths of one search repeat one another (the prompt's numbers, a sibling's sentence, the
row's own earlier tokens); two model-free sources turn that into drafts:
  n-grams   counts of (n tokens -> next token) over every path of the trees being expanded
            (prompt, siblings, cousins) and the rows' own tokens as they grow. STAND: W. Song
            et al., "Accelerated Test-Time Scaling with Model-Free Speculative Sampling"
            (2025, arXiv:2506.04708).
  recycled  (recycle_k > 0) for every token fed, the model's top-k next tokens from that
            forward, kept per token and drafted from where no n-gram of length >= 2 matches.
            Token Recycling: X. Luo et al., "Turning Trash into Treasure: Accelerating
            Inference of Large Language Models with Token Recycling" (ACL 2025,
            arXiv:2408.08696).
Both papers draft trees; here a draft is one chain of up to k tokens per row (longest-suffix
match, then follow the chain), and all rows verify theirs in ONE forward of q = k + 1 tokens
each ([last token, draft...]) through the engine's slab cache (kv.SlabCache).

Acceptance keeps the output distribution exactly the model's:
  greedy    drafts are accepted while they equal the argmax, then the argmax is emitted:
            token for token what plain decoding emits.
  sampling  the draft is a point mass at x, so speculative sampling (Leviathan et al.,
            arXiv:2211.17192; Chen et al., arXiv:2302.01318) accepts x with probability
            p(x), else draws from p without x (renormalised); after the whole draft, a bonus
            token from p. p is plain sampling's distribution (temperature, top-p); draws
            come from the call's generator, in row order.
Rows accept different counts: a row's rejected columns are masked out of its cache row
(`valid`, and `bias` for eager attention), columns every row rejected are rewound, and a
child takes exactly its row's valid columns. Keys carry their positions (RoPE), so holes and
moved columns change nothing. A step ends where plain decoding ends it (stop string, EOS,
max_tokens, context length); tokens after that point are dropped.

Draft lengths adapt per row (+2 after a fully accepted draft, -1 after a rejection, as
transformers' "heuristic" schedule), and drafting gives way as the batch grows: a pass feeds
at most `max_batch_tokens` tokens (active rows x (k + 1)), since a compute-bound forward pays
for every extra token (SpecDec++, K. Huang et al., arXiv:2405.19715, stops drafting by a
trained acceptance predictor; the batch size is the cheap signal used here).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from search.engines.kv import Segment, SlabCache
from search.engines.sampling import categorical, probs, sample
from search.types import Node, Step

if TYPE_CHECKING:
    from search.engines.hf import HFEngine


@dataclass(frozen=True)
class SpecConfig:
    """Knobs of speculative decoding: `HFEngine(..., speculate=SpecConfig(...))`."""

    max_draft: int = 8  # most draft tokens per row and verification
    first_draft: int = 8  # a row's draft length when its step starts (then adapted)
    # context lengths matched, longest first. Bigrams (1) and recycling draft almost
    # everywhere, but on SmolLM2-135M / GSM8K those extra drafts were mostly rejected:
    # greedy batch 1 x1.13 with (4, 3, 2), x1.01 with (4, 3, 2, 1) and recycle_k = 8
    ngram: tuple[int, ...] = (4, 3, 2)
    recycle_k: int = 0  # the model's top-k next tokens kept per token (0: no recycling)
    # draft only while active rows * (k + 1) <= this. Measured (reports/bench_spec.py, 1
    # torch thread on a busy 2-core AVX2 CPU, SmolLM2-135M fp32): against q = 1 a pass
    # costs x1.5 at q = 2 and x1.8 at q = 8 for 1 row, x1.8 at q = 2 for 16 rows, where
    # drafting lost (x0.77 at 1.45 tokens per verification)
    max_batch_tokens: int = 16
    table_limit: int = 1 << 20  # n-gram contexts held before the table starts afresh

    def __post_init__(self) -> None:
        if self.max_draft < 1 or not 1 <= self.first_draft <= self.max_draft:
            raise ValueError(f"need 1 <= first_draft <= max_draft, got {self.first_draft}, "
                             f"{self.max_draft}")
        if not self.ngram or min(self.ngram) < 1:
            raise ValueError(f"ngram must list context lengths >= 1, got {self.ngram!r}")
        if self.recycle_k < 0 or self.max_batch_tokens < 0 or self.table_limit < 1:
            raise ValueError("recycle_k, max_batch_tokens must be >= 0, table_limit >= 1")


@dataclass
class SpecStats:
    """Counters over an engine's speculative `expand` calls (engine.spec_stats)."""

    passes: int = 0  # decoder forwards (with or without drafts)
    fed: int = 0  # tokens through those forwards: rows x q, rejected drafts and padding included
    widest: int = 0  # most tokens fed in one pass
    verified: int = 0  # row-passes that verified a draft of >= 1 token
    drafted: int = 0  # draft tokens verified
    accepted: int = 0  # draft tokens accepted
    emitted: int = 0  # step tokens kept
    squeezes: int = 0  # cache compactions (rejected columns reclaimed)

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def per_verification(self) -> float:
        """Tokens a row gains per verification: accepted drafts + the model's own token."""
        return (self.accepted + self.verified) / self.verified if self.verified else 0.0


class Drafter:
    """Draft source: n-gram counts over token sequences and the model's recycled top-k."""

    def __init__(self, config: SpecConfig) -> None:
        self.cfg = config
        self.sizes = tuple(sorted(set(config.ngram), reverse=True))
        self.span = self.sizes[0]
        self.table: dict[tuple[int, ...], dict[int, int]] = {}  # n tokens -> {next: count}
        self.recycled: dict[int, tuple[int, ...]] = {}  # token -> model's top-k after it
        self.seen: set[int] = set()  # ids of the nodes already counted

    def add(self, context: Sequence[int], tokens: Sequence[int]) -> None:
        """Count the n-grams that end in `tokens` (context: the tokens before them)."""
        seq = [*context[-self.span:], *tokens]
        table = self.table
        for i in range(len(seq) - len(tokens), len(seq)):
            nxt = seq[i]
            for n in self.sizes:
                if n <= i:
                    counts = table.setdefault(tuple(seq[i - n:i]), {})
                    counts[nxt] = counts.get(nxt, 0) + 1

    def add_trees(self, nodes: Iterable[Node]) -> None:
        """Count every node not counted yet in the trees of `nodes` (the whole tree under
        each root: siblings and cousins too)."""
        if len(self.table) > self.cfg.table_limit:
            self.table.clear()
            self.seen.clear()
        stack: list[tuple[Node, tuple[int, ...]]] = [
            (root, ()) for root in {n.root.id: n.root for n in nodes}.values()]
        while stack:
            node, before = stack.pop()
            own = node.prompt_ids if node.step is None else node.step.token_ids
            if node.id not in self.seen:
                self.seen.add(node.id)
                self.add(before, own)
            tail = (before + tuple(own))[-self.span:]
            stack.extend((child, tail) for child in node.children)

    def recycle(self, fed: Sequence[int], candidates: Sequence[Sequence[int]]) -> None:
        for token, cands in zip(fed, candidates):
            self.recycled[token] = tuple(cands)

    def _next(self, ctx: list[int]) -> int | None:
        last = ctx[-1] if ctx else None
        recycled = self.recycled.get(last) if last is not None else None
        for n in self.sizes:
            if n == 1 and recycled:  # the model's own guess beats a bigram count
                return recycled[0]
            counts = self.table.get(tuple(ctx[-n:])) if n <= len(ctx) else None
            if counts:
                if len(counts) == 1:
                    return next(iter(counts))
                # most seen; ties go to the model's recycled ranking after the last token
                rank = {t: -i for i, t in enumerate(recycled or ())}
                return max(counts, key=lambda t: (counts[t], rank.get(t, -len(rank))))
        return recycled[0] if recycled else None

    def draft(self, context: Sequence[int], k: int) -> list[int]:
        """Up to k tokens to follow `context` (a chain: each drafted token extends it)."""
        ctx = list(context[-self.span:])
        out: list[int] = []
        while len(out) < k and (token := self._next(ctx)) is not None:
            out.append(token)
            ctx = [*ctx[1 - self.span:], token] if self.span > 1 else [token]
        return out


class SpecDecoder:
    """One `expand` call decoded speculatively (hf._StepDecoder's contract, k+1 tokens a pass).

    Per row r: toks[r] the step so far; cols[r] the cache columns of its fed step tokens
    (all but the latest, which is fed first in the next pass); klen[r] its draft length.
    """

    def __init__(self, engine: HFEngine, rows: list[Node], stop: tuple[str, ...],
                 max_tokens: int, temperature: float, top_p: float, seed: int) -> None:
        assert engine.spec is not None and engine.drafter is not None
        self.e, self.rows, self.stop = engine, rows, stop
        self.cfg, self.drafter, self.stats = engine.spec, engine.drafter, engine.spec_stats
        self.max_tokens, self.temperature, self.top_p = max_tokens, temperature, top_p
        self.gen = torch.Generator(device=engine.device).manual_seed(seed)
        self.stop_span = max((len(s) for s in stop), default=0) + 2
        backend = getattr(engine.tokenizer, "backend_tokenizer", None)
        self._decode_batch = getattr(backend, "decode_batch", None)
        self.toks: list[list[int]] = [[] for _ in rows]
        self.lps: list[list[float]] = [[] for _ in rows]
        self.cols: list[list[int]] = [[] for _ in rows]
        self.klen = [self.cfg.first_draft] * len(rows)

    @torch.inference_mode()
    def run(self) -> list[Node]:
        e, rows = self.e, self.rows
        self.drafter.add_trees(rows)
        uniq = list({n.id: n for n in rows}.values())
        parts = {n.id: e.kv.path_parts(n) for n in uniq}
        self.tails = {n.id: n.token_ids()[-self.drafter.span:] for n in uniq}
        room = max(1, max(min(self.max_tokens, e.max_length - n.n_tokens) for n in rows))
        # the slack takes one pass of rejected columns; _squeeze reclaims older ones
        cache = e.kv.batch([parts[n.id] for n in rows], room + self.cfg.max_draft + 1)
        assert isinstance(cache, SlabCache)
        self.cache, self.P = cache, cache.length
        segs = [e.kv.get(n) for n in rows]
        logits = torch.stack([s.logits for s in segs])  # type: ignore[union-attr]  # [B, V]
        # [B, new, hidden]: the state each new token was predicted from (value features)
        hid = (torch.stack([s.hidden for s in segs])[:, None]  # type: ignore[union-attr,misc]
               if e.kv.keep_hidden else None)
        if self.cfg.recycle_k:
            self.drafter.recycle([self.tails[n.id][-1] for n in rows],
                                 logits.topk(min(self.cfg.recycle_k, logits.shape[-1])).indices.tolist())
        # the first token: plain decoding's own draw from the nodes' stored logits
        tok, lp = sample(logits, temperature=self.temperature, top_p=self.top_p,
                         generator=self.gen)
        new, new_lp = [[t] for t in tok.tolist()], [[x] for x in lp.tolist()]
        out: list[Node | None] = [None] * len(rows)
        active = list(range(len(rows)))  # cache slot -> row
        while True:
            ends = self._extend(active, new, new_lp)
            keep = [b for b, (_, why) in enumerate(ends) if why is None]
            for b, (m, why) in enumerate(ends):
                if why is not None:
                    r = active[b]
                    child = out[r] = self._child(b, r, why)
                    if hid is not None:
                        e.step_features[child] = hid[b, m - 1].clone()
            if not keep:
                break
            if len(keep) < len(active):
                active = [active[b] for b in cache.keep(keep)]
            new, new_lp, hid = self._verify(active)
        return [c for c in out if c is not None]

    def _context(self, r: int) -> list[int]:
        t = self.toks[r]
        span = self.drafter.span
        return t[-span:] if len(t) >= span else [*self.tails[self.rows[r].id], *t][-span:]

    def _extend(self, active: list[int], new: list[list[int]], new_lp: list[list[float]]
                ) -> list[tuple[int, str | None]]:
        """Append each row's new tokens up to the first that ends its step, checked one by
        one as plain decoding checks them: per slot (tokens kept, why it ends or None)."""
        e = self.e
        texts: list[str] = []
        if self.stop:
            span = self.stop_span
            windows = [(self.toks[r][-span:] + new[b][:j + 1])[-span:]
                       for b, r in enumerate(active) for j in range(len(new[b]))]
            texts = (self._decode_batch(windows, skip_special_tokens=False)
                     if self._decode_batch is not None else
                     [e.decode(w, skip_special=False) for w in windows])
        out: list[tuple[int, str | None]] = []
        at = kept = 0
        for b, r in enumerate(active):
            t, n0 = self.toks[r], self.rows[r].n_tokens
            why: str | None = None
            m = len(new[b])
            for j, token in enumerate(new[b]):
                size = len(t) + j + 1
                if token in e.eos_ids:
                    why = "eos"
                elif texts and any(s in texts[at + j] for s in self.stop):
                    why = "stop"
                elif n0 + size >= e.max_length:
                    why = "length"
                elif size >= self.max_tokens:
                    why = "max_tokens"
                if why is not None:
                    m = j + 1
                    break
            at += len(new[b])
            self.drafter.add(self._context(r), new[b][:m])
            t.extend(new[b][:m])
            self.lps[r].extend(new_lp[b][:m])
            kept += m
            out.append((m, why))
        e.meter.charge_model(generated=kept, passes=0)
        self.stats.emitted += kept
        return out

    def _verify(self, active: list[int]) -> tuple[list[list[int]], list[list[float]],
                                                  torch.Tensor | None]:
        """One forward of [last token, draft...] per row; per slot the tokens it emits, their
        logprobs, and (keep_hidden) the hidden states they were predicted from [A, q, h]."""
        e, cfg, cache, stats, dev = self.e, self.cfg, self.cache, self.stats, self.e.device
        A = len(active)
        afford = cfg.max_batch_tokens // A - 1  # draft tokens per row the batch affords
        drafts = []
        for r in active:
            left = min(self.max_tokens, self.e.max_length - self.rows[r].n_tokens) - len(self.toks[r])
            k = min(self.klen[r], afford, left - 1)  # a pass emits up to k + 1 tokens
            drafts.append(self.drafter.draft(self._context(r), k) if k > 0 else [])
        q = 1 + max(len(d) for d in drafts)
        if cache.length + q > cache.capacity:
            self._squeeze(active)
            q = min(q, cache.capacity - cache.length)
            drafts = [d[:q - 1] for d in drafts]
        n = cache.length
        last = [self.toks[r][-1] for r in active]
        ids = torch.tensor([[t, *d, *[t] * (q - 1 - len(d))] for t, d in zip(last, drafts)],
                           device=dev)  # [A, q], short drafts padded (never accepted)
        start = torch.tensor([self.rows[r].n_tokens + len(self.toks[r]) - 1 for r in active],
                             device=dev)
        res = e.model(input_ids=ids, attention_mask=cache.attention_mask(q),
                      position_ids=start[:, None] + torch.arange(q, device=dev),
                      past_key_values=cache, use_cache=True, logits_to_keep=q,
                      output_hidden_states=e.kv.keep_hidden)
        e.meter.charge_model(processed=A * q, flops=2.0 * e.n_params * A * q)
        logits = res.logits.float()  # [A, q, V]
        k = torch.tensor([len(d) for d in drafts], device=dev)
        acc, final = self._accept(logits, ids[:, 1:], k, active)
        # emitted: the accepted drafts, then the model's token at position acc
        emit = torch.cat([ids[:, 1:], final[:, None]], 1).scatter_(1, acc[:, None], final[:, None])
        emit_lp = torch.log_softmax(logits, -1).gather(-1, emit[..., None]).squeeze(-1)
        # cache: a row keeps columns n .. n + acc (its last token and accepted drafts)
        used = acc + 1
        top = n + int(used.max())
        ok = torch.arange(q, device=dev)[None] < used[:, None]
        cache.valid[:A, n:n + q] = ok
        cache.valid[:A, top:n + q] = True  # rewound: the next pass writes these columns
        cache.sync_bias(A, n)
        cache.rewind(top)
        accl, emits, lps = acc.tolist(), emit.tolist(), emit_lp.tolist()
        if cfg.recycle_k:
            cands = logits.topk(min(cfg.recycle_k, logits.shape[-1])).indices.tolist()
            fed = [t for b, d in enumerate(drafts) for t in ids[b, :len(d) + 1].tolist()]
            self.drafter.recycle(fed, [c for b, d in enumerate(drafts) for c in cands[b][:len(d) + 1]])
        for b, r in enumerate(active):
            a, kb = accl[b], len(drafts[b])
            self.cols[r].extend(range(n, n + a + 1))
            if kb:
                self.klen[r] = min(cfg.max_draft, self.klen[r] + 2) if a == kb else max(1, self.klen[r] - 1)
        stats.passes += 1
        stats.fed += A * q
        stats.widest = max(stats.widest, A * q)
        stats.verified += sum(1 for d in drafts if d)
        stats.drafted += sum(len(d) for d in drafts)
        stats.accepted += sum(accl)
        hid = res.hidden_states[-1].float() if e.kv.keep_hidden else None
        return ([emits[b][:a + 1] for b, a in enumerate(accl)],
                [lps[b][:a + 1] for b, a in enumerate(accl)], hid)

    def _accept(self, logits: torch.Tensor, drafts: torch.Tensor, k: torch.Tensor,
                active: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """logits [A, q, V], drafts [A, q-1] (row b's first k[b] are real) -> (accepted
        count [A], the model's token after them [A])."""
        A, q, _ = logits.shape
        live = torch.arange(q - 1, device=logits.device)[None] < k[:, None]  # [A, q-1]
        if self.temperature == 0:
            best = logits.argmax(-1)  # [A, q]
            acc = ((drafts == best[:, :-1]) & live).long().cumprod(-1).sum(-1)
            return acc, best.gather(1, acc[:, None]).squeeze(1)
        p = probs(logits, self.temperature, self.top_p)  # [A, q, V]
        # draws in row order: a row's randomness must not depend on its cache slot
        order = torch.tensor(sorted(range(A), key=active.__getitem__), device=logits.device)
        acc = torch.zeros(A, dtype=torch.long, device=logits.device)
        if q > 1:
            u = _unsort(torch.rand(A, q - 1, generator=self.gen, device=logits.device), order)
            px = p[:, :-1].gather(-1, drafts[..., None]).squeeze(-1)  # [A, q-1]
            acc = ((u < px) & live).long().cumprod(-1).sum(-1)
        dist = p[torch.arange(A, device=p.device), acc]  # [A, V]: p at the first unaccepted
        if q > 1:  # a rejected draft token leaves the distribution (the residual)
            x = drafts.gather(1, acc.clamp(max=q - 2)[:, None])
            rejected = (acc < k)[:, None]
            dist.scatter_(1, x, dist.gather(1, x).masked_fill(rejected, 0.0))
        final = categorical(dist[order], self.gen)
        return acc, _unsort(final, order)

    def _squeeze(self, active: list[int]) -> None:
        """Move each row's fed step columns next to its path, reclaiming rejected ones."""
        cache, P = self.cache, self.P
        top = P + max(len(self.cols[r]) for r in active)
        for b, r in enumerate(active):
            c = len(self.cols[r])
            if self.cols[r] != list(range(P, P + c)):
                idx = torch.tensor(self.cols[r], device=self.e.device)
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
        idx = torch.tensor(self.cols[r][:len(toks) - 1], dtype=torch.long, device=self.e.device)
        kv = self.cache.buf[:, :, b].index_select(3, idx)  # [L, 2, H, len - 1, D]
        child = Node(parent=self.rows[r], step=Step(self.e.decode(toks), tuple(toks),
                                                    tuple(self.lps[r]), reason))
        self.e.kv.put(child, Segment(kv=kv, n=len(toks) - 1))  # last token fed on expansion
        self.drafter.seen.add(child.id)  # its tokens were counted as they came
        return child


def _unsort(x: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """x[i] belongs to slot order[i] -> the same values by slot."""
    out = torch.empty_like(x)
    out[order] = x
    return out
