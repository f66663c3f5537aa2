"""One `expand` call's decoding for the transformers engine (search.engines.hf.engine): the
one rule that ends a step (`StopRule`), and the one loop (`Decoder`), which reads the engine
(the calling search's view of it: its KV tree, meter, tokenizer and limits). Each pass of
the loop picks the active rows, gets each row's draft (none without speculation, or where it
gives way), runs one forward over the rows' last token and their drafts, accepts tokens
(plain sampling accepts no draft token, only the model's own next token: the bonus), appends
them and retires the rows whose step stopped.
Speculation (search.engines.hf.spec) is the drafting policy and the verification of drafts.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from search.engines.base import budget_child
from search.engines.hf.spec import Drafting, Speculation, squeeze, verify
from search.runtime.kv import SlabCache
from search.runtime.kvpool import Segment
from search.runtime.passes import Job, Pass
from search.runtime.sampling import Draw, draw
from search.runtime.transfer import readback, upload
from search.types import Node, Step

if TYPE_CHECKING:
    from search.engines.hf.engine import HFEngine


def unique(nodes: Sequence[Node]) -> list[Node]:
    """The nodes without repeats (by id), in first-seen order."""
    return list({node.id: node for node in nodes}.values())


@dataclass(frozen=True)
class StopRule:
    """Why a step ends after its latest token: the one rule of the loop (with or without
    drafts), checked token by token in this order: EOS, a stop string in the decoded tail,
    the context length, max_tokens."""

    eos_ids: frozenset[int]
    stop: tuple[str, ...]
    max_tokens: int
    max_length: int
    text: Callable[[Sequence[int]], str]  # token ids -> text, special tokens kept
    # stop-string windows seen -> whether a stop string is in their text (rows repeat them)
    seen: dict[tuple[int, ...], bool] = field(default_factory=dict, compare=False, repr=False)

    @functools.cached_property
    def span(self) -> int:
        """Step tokens decoded for the stop-string check: the longest string fits in them
        even where a token holds several characters (or half of one). (Read per row and
        token: computed once.)"""
        return max((len(s) for s in self.stop), default=0) + 2

    def reason(self, window: list[int], start: int, size: int) -> str | None:
        """window: the step's tokens up to its latest, window[-1] (at least its last `span`);
        start: the tokens before the step (its parent's n_tokens); size: the step's tokens
        so far -> "eos", "stop", "length", "max_tokens", or None (the step goes on)."""
        if window[-1] in self.eos_ids:
            return "eos"
        if self.stop:
            key = tuple(window[-self.span:])
            if key not in self.seen:  # (each window decoded once a call)
                self.seen[key] = any(map(self.text(key).__contains__, self.stop))
            if self.seen[key]:
                return "stop"
        if start + size >= self.max_length:
            return "length"
        if size >= self.max_tokens:
            return "max_tokens"
        return None


class Decoder:
    """One `expand` call over rows (nodes, a node once per sample), decoded by one loop.

    Rows live in the slots of one batch cache (kv.SlabCache: K/V written in place). Per row
    r: toks[r] the step so far, lps[r] their logprobs, cols[r] the cache columns of its fed
    step tokens (all but the latest, fed first in the next pass; in order, with holes where
    drafts were rejected; kept with drafts only, else P, P + 1, ...). Per slot, on the
    device: tok [B, 1] the row's latest token, at [B, 1] its position, last (keep_hidden)
    the final state that predicted it. A row that stops leaves
    its child the KV of the tokens this step added, and the survivors are compacted into the
    first slots.

    Without drafts a pass feeds one token a row, under the cache's own one-token mask (a
    view), and the bonus token is drawn with the forward (Pass.draw): the host reads the
    device once per pass, whatever the rows, for every Pass of the tick at once
    (Sampled.emits: transfer.readback in sampling.sample_many); sampling, top-p and the
    forward's inputs stay on the device, and the stop rule and the budget run on the host
    values. Index tensors go up asynchronously (transfer.upload).
    """

    def __init__(self, eng: HFEngine, rows: list[Node], stop: tuple[str, ...],
                 max_tokens: int, temperature: float, top_p: float, seed: int,
                 spec: Speculation | None = None) -> None:
        self.eng, self.rows = eng, rows  # eng: the calling search's view of the engine
        # stop strings are sought in text with special tokens kept: a fast tokenizer's own
        # decode (one call per row: `decode_batch` hands rows to a thread pool, whose
        # start-up costs more than a stop window's decode, and whose threads take cores from
        # the model's), else the engine's, told to keep special tokens
        backend = getattr(eng.tokenizer, "backend_tokenizer", None)
        self.rule = StopRule(eng.eos_ids, stop, max_tokens, eng.max_length,
                             (lambda ids: eng.decode(ids, skip_special=False)) if backend is None
                             else lambda ids: backend.decode(ids, skip_special_tokens=False))
        self.max_tokens, self.temperature, self.top_p = max_tokens, temperature, top_p
        self.gen = torch.Generator(device=eng.device).manual_seed(seed)
        self.toks: list[list[int]] = [[] for _ in rows]
        self.lps: list[list[float]] = [[] for _ in rows]
        self.cols: list[list[int]] = [[] for _ in rows]
        self.drafting = Drafting(spec, self) if spec is not None else None

    def left(self, r: int) -> int:
        """Tokens row r may still sample in this step."""
        return min(self.max_tokens, self.eng.max_length - self.rows[r].n_tokens) - len(self.toks[r])

    def run(self) -> Job[list[Node]]:
        # (a job: its scheduler runs every step of it in inference mode, inline and in
        # its lanes; a decorator would enter and leave it again at every token)
        eng, rows = self.eng, self.rows
        parts = {n.id: eng.kv.path_parts(n) for n in unique(rows)}
        room = max(1, *map(self.left, range(len(rows))))  # (no token sampled yet)
        slack = self.drafting.slack if self.drafting else 0  # one pass of rejected drafts
        self.cache: SlabCache = eng.kv.batch([parts[n.id] for n in rows], room + slack)
        self.P = self.cache.length
        self.segs: list[Any] = [eng.kv.get(n) for n in rows]  # complete: ensured by the caller
        logits = torch.stack([g.logits for g in self.segs])  # [B, V]
        # (read once: another search may turn keep_hidden on meanwhile, see KVTree.pass_for)
        hidden = [g.hidden for g in self.segs]
        self.hidden = eng.kv.keep_hidden and None not in hidden
        self.last = torch.stack(hidden) if self.hidden else None  # [B, hidden]
        self.at = upload([[n.n_tokens] for n in rows], eng.device)  # the first token's position
        if self.drafting:
            self.drafting.start(logits)
        out: list[Node | None] = [None] * len(rows)
        active = list(range(len(rows)))  # cache slot -> row
        # the first token: drawn from the nodes' stored logits
        self.tok, lp = draw(logits, self._draw(active))
        (new, new_lp), hid = readback(self.tok, lp), None  # [[token]], [[logprob]] per slot
        while True:
            ends = self._append(active, new, new_lp)
            if hid is not None:
                self.last = self._latest(hid, [m for m, _ in ends])
            keep = [b for b, (_, why) in enumerate(ends) if why is None]
            for b, (_, why) in enumerate(ends):
                if why is not None:
                    out[active[b]] = self._retire(b, active[b], why)
            if not keep:
                break
            if len(keep) < len(active):
                active = self._compact(active, keep)
            # FLOPs or seconds: stop here
            if eng.meter.refuse_forward(2.0 * eng.n_params * len(active)):
                for b, r in enumerate(active):
                    out[r] = self._retire(b, r, "budget")
                break
            new, new_lp, hid = yield from self._pass(active)
        return [c for c in out if c is not None]

    def _draw(self, active: list[int]) -> Draw:
        """How a pass's bonus tokens are drawn: in row order, since compaction moves rows
        between slots and a row's draw must not depend on which slot it sits in (the same
        seed gives the same tokens however rows left the batch)."""
        order = None if all(a < b for a, b in zip(active, active[1:])) else \
            sorted(range(len(active)), key=active.__getitem__)
        return Draw(self.temperature, self.top_p, self.gen, order)

    def _append(self, active: list[int], new: list[list[int]], new_lp: list[list[float]]
                ) -> list[tuple[int, str | None]]:
        """Append each row's new tokens up to the first that ends its step (StopRule, token
        by token); where the budget's tokens run out in this pass, the first rows (row
        order) keep theirs and every row's step ends. Per slot: (tokens kept, why its step
        ends or None). Refuses (FloatingPointError) tokens drawn from logits that were not
        finite: their logprobs are NaN, and the tokens any index the draw fell on."""
        if (total := sum(map(sum, new_lp))) != total:  # NaN: a row's logits were not finite
            raise FloatingPointError(
                "the model's next-token logits are not finite (NaN or inf) for a row of this "
                "expand: no token can be drawn from them (weights that overflow in float16 or "
                "bfloat16, or broken ones, give this)")
        rule, sizes, ends = self.rule, [], []
        for b, r in enumerate(active):
            t, n0, why = self.toks[r], self.rows[r].n_tokens, None
            sizes.append(len(t))
            for x in new[b]:
                t.append(x)
                why = rule.reason(t, n0, len(t))
                if why is not None:
                    break
            ends.append((len(t) - sizes[b], why))
        want = sum(m for m, _ in ends)
        # the tokens kept: all, or the room left (at most want), handed out in row order
        kept = room = self.eng.meter.token_room(want)
        if room < want:
            for b in sorted(range(len(active)), key=active.__getitem__):
                m = min(ends[b][0], room)
                room -= m
                ends[b] = (m, "budget")
        for b, r in enumerate(active):
            m = ends[b][0]
            del self.toks[r][sizes[b] + m:]  # (tokens past the budget's room)
            self.lps[r].extend(new_lp[b][:m])
            if self.drafting and m:
                self.drafting.add(r, sizes[b], new[b][:m])
        self.eng.meter.charge_model(generated=kept, passes=0)
        if self.drafting:
            self.drafting.stats.emitted += kept
        return ends

    def _latest(self, hid: torch.Tensor, kept: list[int]) -> torch.Tensor:
        """hid [A, m, hidden]: the states a pass's emitted tokens were predicted from ->
        [A, hidden] the state that predicted each slot's latest kept token."""
        if hid.shape[1] == 1 and all(kept):
            return hid[:, 0]
        dev = hid.device
        pick = hid[torch.arange(len(kept), device=dev), upload([max(m - 1, 0) for m in kept], dev)]
        assert self.last is not None
        return torch.where(upload([m > 0 for m in kept], dev, torch.bool)[:, None], pick, self.last)

    def _compact(self, active: list[int], keep: list[int]) -> list[int]:
        """Keep the slots in `keep` (the cache's rows and the per-slot tensors)."""
        order = self.cache.keep(keep)
        sel = upload(order, self.eng.device)
        self.tok, self.at = self.tok[sel], self.at[sel]
        if self.last is not None:
            self.last = self.last[sel]
        return [active[b] for b in order]

    def _pass(self, active: list[int]) -> Any:
        """One forward: each row's latest token and its draft (none: one token), then the
        accepted tokens -> per slot the tokens it emits, their logprobs, and (keep_hidden)
        the states they were predicted from [A, m, hidden]."""
        eng, cache, A = self.eng, self.cache, len(active)
        trees = self.drafting.drafts(active) if self.drafting else []
        q = 1 + max(map(len, trees), default=0)
        if cache.length + q > cache.capacity:  # (only with drafts: rejected columns fill it)
            squeeze(self, active)
            q = min(q, cache.capacity - cache.length)
            trees = [t.head(q - 1) for t in trees]
        n = cache.length
        if q == 1:
            p: Pass = eng.kv.pass_for(self.tok, self.at, cache, cache.attention_mask(1), 1,
                                      self.hidden)
            p.draw = self._draw(active)
            res = yield p
            eng.meter.charge_model(flops=2.0 * eng.n_params * A)
            self.tok, self.at, out = res.tokens, self.at + 1, res.out
            emits, lps, paths = res.emits, res.lps, [[0]] * A
            hid = out.hidden_states[-1].float() if self.hidden else None
        else:
            emits, lps, paths, out, hid = yield from verify(self, active, trees, q)
            self.tok = upload([e[-1:] for e in emits], eng.device)
            self.at = self.at + upload([[len(e)] for e in emits], eng.device)
        if self.drafting:  # the columns of each row's fed token and its accepted nodes
            for r, path in zip(active, paths):
                self.cols[r].extend(n + c for c in path)
            self.drafting.observe(active, trees, emits, paths, out.logits.float())
        return emits, lps, hid

    def _retire(self, b: int, r: int, why: str) -> Node:
        """Row r's child, its step ended for `why` (its cache slot b). A row whose step the
        budget ends before its first token gets an empty step that stands where its parent
        does (the parent's segment: its logits, its state)."""
        parent, toks = self.rows[r], self.toks[r]
        if toks:
            c = len(toks) - 1
            child = Node(parent=parent, step=Step(self.eng.decode(toks), tuple(toks),
                                                  tuple(self.lps[r]), why))
            # the KV of its step's tokens but the last, with a column to spare where the last
            # is written when the child is expanded (a budget's child ends its path: none)
            seg = self._columns(b, r, c, int(why != "budget"))
            state = None if self.last is None else self.last[b]
        else:
            own = self.segs[r]
            child, state = budget_child(parent), own.hidden
            seg = self.eng.kv.segment(self.cache.columns_of(b, self.P, self.P), 0,
                                      logits=own.logits, hidden=own.hidden)
        self.eng.kv.put(child, seg, self.eng.session.kv)
        if state is not None:
            self.eng.step_features[child] = state.clone()
        if self.drafting:  # its tokens were counted as they came (an empty step has none)
            self.drafting.drafter.seen.add(child.id)
        return child

    def _columns(self, b: int, r: int, c: int, spare: int) -> Segment:
        """A segment of slot b's first c step columns (row r's), copied out of the slab (off
        the pool `spare` more after them where they are contiguous)."""
        cols, P = self.cols[r][:c], self.P
        if not self.drafting or cols == list(range(P, P + c)):
            return self.eng.kv.segment(self.cache.columns_of(b, P, P + c), spare)
        return self.eng.kv.segment(self.cache.gather(b, cols))
