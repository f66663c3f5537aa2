"""One `expand` call's decoding for the transformers engine (search.engines.hf.engine): what a
loop reads of the engine (`DecodeState`), the one rule that ends a step (`StopRule`), and the
plain loop (`StepDecoder`): every row samples one token per forward pass until its step stops.
The speculative loop (spec.SpecDecoder) is a Decoder too: same state, same rule, same children.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from search.budget import Meter
from search.engines.base import budget_child
from search.runtime.kv import Segment
from search.runtime.kvtree import KVTree
from search.runtime.passes import Job
from search.runtime.sampling import Draw, draw
from search.runtime.transfer import readback, upload
from search.session import Session
from search.types import Node, Step


def unique(nodes: Sequence[Node]) -> list[Node]:
    """The nodes without repeats (by id), in first-seen order."""
    return list({node.id: node for node in nodes}.values())


@dataclass(frozen=True)
class DecodeState:
    """What a decoding loop reads of the engine, fixed for one `expand` call (the engine
    builds it per call: HFEngine.decode_state)."""

    kv: KVTree  # the engine's KV tree: segments in, children's segments out, the forwards
    session: Session  # the calling search's: its meter is charged, its KV scope holds the children
    n_params: int  # FLOPs of a fed token: 2 x this
    eos_ids: frozenset[int]
    max_length: int  # the context length: a step ends where its path reaches it
    decode: Callable[[Sequence[int]], str]  # a step's text (special tokens skipped)
    stop_text: Callable[[Sequence[int]], str]  # text with special tokens kept (stop strings)
    # child -> [hidden] final state its last token was predicted from (kv.keep_hidden)
    features: weakref.WeakKeyDictionary[Node, torch.Tensor]

    @property
    def device(self) -> torch.device:
        return self.kv.device

    @property
    def meter(self) -> Meter:
        return self.session.meter


@dataclass(frozen=True)
class StopRule:
    """Why a step ends after its latest token: the one rule of every decoding loop (plain and
    speculative), checked token by token in this order: EOS, a stop string in the decoded
    tail, the context length, max_tokens."""

    eos_ids: frozenset[int]
    stop: tuple[str, ...]
    max_tokens: int
    max_length: int
    text: Callable[[Sequence[int]], str]  # token ids -> text, special tokens kept

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
            text = self.text(window[-self.span:])
            if any(s in text for s in self.stop):
                return "stop"
        if start + size >= self.max_length:
            return "length"
        if size >= self.max_tokens:
            return "max_tokens"
        return None


class Decoder:
    """One `expand` call over rows (nodes, a node once per sample): the state, the stop rule,
    the call's generator, and how a finished row becomes a child."""

    def __init__(self, state: DecodeState, rows: list[Node], stop: tuple[str, ...],
                 max_tokens: int, temperature: float, top_p: float, seed: int) -> None:
        self.s, self.rows = state, rows
        self.rule = StopRule(state.eos_ids, stop, max_tokens, state.max_length, state.stop_text)
        self.max_tokens, self.temperature, self.top_p = max_tokens, temperature, top_p
        self.gen = torch.Generator(device=state.device).manual_seed(seed)

    def reason(self, window: list[int], start: int, size: int) -> str | None:
        return self.rule.reason(window, start, size)

    def room(self) -> int:
        """Most tokens a row samples (it feeds one fewer): the columns to reserve."""
        return max(1, max(min(self.max_tokens, self.s.max_length - n.n_tokens) for n in self.rows))

    def child(self, parent: Node, toks: list[int], lps: list[float], reason: str,
              kv: torch.Tensor) -> Node:
        """The row's child, holding the KV of its step's tokens but the last (kv
        [L, 2, H, >= len(toks) - 1, D], its columns past those the room where the last,
        fed when the child is expanded, is written: Segment.spare)."""
        step = Step(self.s.decode(toks), tuple(toks), tuple(lps), reason)
        child = Node(parent=parent, step=step)
        self.s.kv.put(child, Segment.spare(kv, len(toks) - 1), self.s.session.kv)
        return child


    def cut(self, parent: Node, toks: list[int], lps: list[float], kv: torch.Tensor,
            hid: torch.Tensor | None, seg: Segment | None) -> Node:
        """The child of a row whose step the budget ends early (stop reason "budget"): its
        tokens so far (kv: their columns but the last; hid: the state that predicted the
        last, with keep_hidden). A row that got no token of this step gets an empty step
        that stands where its parent does (the parent's segment: its logits, its state)."""
        if toks:
            child = self.child(parent, toks, lps, "budget", kv)
        else:
            assert seg is not None  # the row's parent was made complete before decoding
            child = budget_child(parent)
            self.s.kv.put(child, Segment(kv=kv, n=0, logits=seg.logits, hidden=seg.hidden),
                          self.s.session.kv)
            hid = seg.hidden
        if hid is not None:
            self.s.features[child] = hid.clone()
        return child


class StepDecoder(Decoder):
    """The plain loop: all rows step together, one token per pass.

    Rows live in the slots of one batch cache (kv.SlabCache: K/V written in place); a row
    that stops leaves its child the KV of the tokens this step added, and the survivors are
    compacted into the first slots. Per token the Python work is one sampling call, one
    decode of each row's last few tokens (only with stop strings) and list appends.

    The host reads the device once per token step, whatever the rows: the sampled tokens
    and their logprobs come back together (transfer.readback); sampling, top-p and the
    forward's inputs stay on the device, and the stop rule (EOS, stop strings, lengths) and
    the budget run on those host values. Index tensors go up asynchronously
    (transfer.upload), so on a GPU the host never waits for a row's work in between.
    """

    def _draw(self, active: list[int]) -> Draw:
        """How this step's tokens are drawn: in row order, since compaction moves rows
        between slots and a row's draw must not depend on which slot it sits in (the same
        seed gives the same tokens however rows left the batch)."""
        order = None if all(a < b for a, b in zip(active, active[1:])) else \
            sorted(range(len(active)), key=active.__getitem__)
        return Draw(self.temperature, self.top_p, self.gen, order)

    def run(self) -> Job[list[Node]]:
        # (a job: its scheduler runs every step of it in inference mode, passes.drive and
        # the lanes; a decorator would enter and leave it again at every token)
        s, rows = self.s, self.rows
        parts = {n.id: s.kv.path_parts(n) for n in unique(rows)}
        cache = s.kv.batch([parts[n.id] for n in rows], self.room())
        P = cache.length
        segs0: list[Any] = [s.kv.get(n) for n in rows]  # complete: ensured by the caller
        logits = torch.stack([g.logits for g in segs0])
        # [B, hidden]: the state each row's next token is predicted from (value features)
        # (read once: another search may turn keep_hidden on meanwhile, see KVTree.pass_for)
        hidden = [g.hidden for g in segs0]
        hid = torch.stack(hidden) if s.kv.keep_hidden and None not in hidden else None
        pos = upload([n.n_tokens for n in rows], s.device)  # [B] next position
        toks: list[list[int]] = [[] for _ in rows]
        lps: list[list[float]] = [[] for _ in rows]
        out: list[Node | None] = [None] * len(rows)
        active = list(range(len(rows)))  # cache slot -> row
        j = 0  # tokens sampled so far in this step, equal for every active row
        prev = None  # [B, hidden]: hid one token back (the state that predicted the last kept)
        tok, lp = draw(logits, self._draw(active))  # later draws come with each forward
        while active:
            room = s.meter.token_room(len(active))  # the budget's tokens left, at most all
            s.meter.charge_model(generated=room, passes=0)
            # when the budget ends inside this batch, the first rows (in row order) keep
            # their token and every row's step ends here
            got = set(active) if room == len(active) else set(sorted(active)[:room])
            drawn, logps = readback(tok, lp)  # the step's one read of the device
            for r, t, logp in zip(active, drawn, logps):
                if r in got:
                    toks[r].append(int(t))
                    lps[r].append(logp)
            if room < len(active):
                for b, r in enumerate(active):
                    kv = cache.take(b, P, P + max(0, len(toks[r]) - 1))
                    state = (hid if r in got else prev)
                    out[r] = self.cut(rows[r], toks[r], lps[r], kv,
                                      None if state is None else state[b], segs0[r])
                break
            reasons = [self.reason(toks[r], rows[r].n_tokens, len(toks[r])) for r in active]
            keep = [b for b, why in enumerate(reasons) if why is None]
            for b, why in enumerate(reasons):
                if why is not None:
                    r = active[b]
                    child = out[r] = self.child(rows[r], toks[r], lps[r], why,
                                                cache.take(b, P, P + j, spare=1))
                    if hid is not None:
                        s.features[child] = hid[b].clone()
            if not keep:
                break
            if len(keep) < len(active):
                order = cache.keep(keep)
                sel = upload(order, s.device)
                tok, pos = tok[sel], pos[sel]
                hid = hid[sel] if hid is not None else None
                active = [active[b] for b in order]
            if s.meter.refuse_forward(2.0 * s.n_params * len(active)):  # FLOPs or seconds: stop here
                for b, r in enumerate(active):
                    out[r] = self.cut(rows[r], toks[r], lps[r], cache.take(b, P, P + j),
                                      None if hid is None else hid[b], segs0[r])
                break
            p = s.kv.pass_for(tok[:, None], (pos + j)[:, None], cache, cache.attention_mask(1), 1,
                              hid is not None)
            p.draw = self._draw(active)
            res = yield p
            s.meter.charge_model(flops=2.0 * s.n_params * len(active))
            tok, lp = res.tokens, res.logprobs
            if hid is not None:
                prev, hid = hid, res.out.hidden_states[-1][:, -1].float()
            j += 1
        return [c for c in out if c is not None]

def stop_decoder(tokenizer: Any, decode: Callable[[Sequence[int]], str]
                 ) -> Callable[[Sequence[int]], str]:
    """token ids -> text with special tokens kept, for stop-string checks: a fast tokenizer's
    own decode (one call per row: `decode_batch` hands rows to a thread pool, whose
    start-up costs more than a stop window's decode, and whose threads take cores from
    the model's), else `decode` (the engine's, told to keep special tokens)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return lambda ids: backend.decode(ids, skip_special_tokens=False)
    return decode
