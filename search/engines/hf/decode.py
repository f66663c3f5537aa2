"""One `expand` call's plain decoding loop for the transformers engine (search.engines.hf):
every row samples one token per forward pass until its step stops. The speculative loop
(search.engines.hf.spec) keeps the same contract and shares `stop_decoder`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from search.engines.hf.kv import Segment
from search.engines.sampling import Draw, draw
from search.engines.sched import Job
from search.types import Node, Step

if TYPE_CHECKING:
    from search.engines.hf import HFEngine


def unique(nodes: Sequence[Node]) -> list[Node]:
    """The nodes without repeats (by id), in first-seen order."""
    return list({node.id: node for node in nodes}.values())


class StepDecoder:
    """One `expand` call's decoding loop: all rows step together, one token per pass.

    Rows live in the slots of one batch cache (kv.SlabCache: K/V written in place); a row
    that stops leaves its child the KV of the tokens this step added, and the survivors are
    compacted into the first slots. Per token the Python work is one sampling call, one
    batched decode of the rows' last few tokens (only with stop strings) and list appends.
    """

    def __init__(self, engine: HFEngine, rows: list[Node], stop: tuple[str, ...],
                 max_tokens: int, temperature: float, top_p: float, seed: int) -> None:
        self.e, self.rows, self.stop = engine, rows, stop
        self.max_tokens, self.temperature, self.top_p = max_tokens, temperature, top_p
        self.gen = torch.Generator(device=engine.device).manual_seed(seed)
        self.stop_span = max((len(s) for s in stop), default=0) + 2
        self._decode = stop_decoder(engine)

    def _reasons(self, active: list[int], toks: list[list[int]]) -> list[str | None]:
        """Why each active row stops after its latest token (None: it goes on)."""
        e, out = self.e, []
        texts: list[str] = []
        if self.stop:
            texts = [self._decode(toks[r][-self.stop_span:]) for r in active]
        for i, r in enumerate(active):
            t = toks[r]
            if t[-1] in e.eos_ids:
                out.append("eos")
            elif texts and any(s in texts[i] for s in self.stop):
                out.append("stop")
            elif self.rows[r].n_tokens + len(t) >= e.max_length:
                out.append("length")
            elif len(t) >= self.max_tokens:
                out.append("max_tokens")
            else:
                out.append(None)
        return out

    def _draw(self, active: list[int]) -> Draw:
        """How this step's tokens are drawn: in row order, since compaction moves rows
        between slots and a row's draw must not depend on which slot it sits in (the same
        seed gives the same tokens however rows left the batch)."""
        order = None if all(a < b for a, b in zip(active, active[1:])) else \
            sorted(range(len(active)), key=active.__getitem__)
        return Draw(self.temperature, self.top_p, self.gen, order)

    @torch.inference_mode()
    def run(self) -> Job[list[Node]]:
        e, rows = self.e, self.rows
        parts = {n.id: e.kv.path_parts(n) for n in unique(rows)}
        # a row samples at most this many tokens (it feeds one fewer): the columns to reserve
        room = max(1, max(min(self.max_tokens, e.max_length - n.n_tokens) for n in rows))
        cache = e.kv.batch([parts[n.id] for n in rows], room)
        P = cache.length
        segs0 = [e.kv.get(n) for n in rows]
        logits = torch.stack([s.logits for s in segs0])  # type: ignore[union-attr]
        # [B, hidden]: the state each row's next token is predicted from (value features)
        hid = torch.stack([s.hidden for s in segs0]) if e.kv.keep_hidden else None  # type: ignore[union-attr,misc]
        pos = torch.tensor([n.n_tokens for n in rows], device=e.device)  # [B] next position
        toks: list[list[int]] = [[] for _ in rows]
        lps: list[list[float]] = [[] for _ in rows]
        out: list[Node | None] = [None] * len(rows)
        active = list(range(len(rows)))  # cache slot -> row
        j = 0  # tokens sampled so far in this step, equal for every active row
        tok, lp = draw(logits, self._draw(active))  # later draws come with each forward
        while active:
            e.meter.charge_model(generated=len(active), passes=0)
            for r, t, logp in zip(active, tok.tolist(), lp.tolist()):
                toks[r].append(t)
                lps[r].append(logp)
            reasons = self._reasons(active, toks)
            keep = [b for b, why in enumerate(reasons) if why is None]
            for b, why in enumerate(reasons):
                if why is not None:
                    r = active[b]
                    child = out[r] = self._child(rows[r], toks[r], lps[r], why,
                                                 cache.take(b, P, P + j))
                    if hid is not None:
                        e.step_features[child] = hid[b].clone()
            if not keep:
                break
            if len(keep) < len(active):
                order = cache.keep(keep)
                sel = torch.tensor(order, device=e.device)
                tok, pos = tok[sel], pos[sel]
                hid = hid[sel] if hid is not None else None
                active = [active[b] for b in order]
            p = e.kv.pass_for(tok[:, None], (pos + j)[:, None], cache, cache.attention_mask(1), 1)
            p.draw = self._draw(active)
            res = yield p
            e.meter.charge_model(processed=len(active), flops=2.0 * e.n_params * len(active))
            tok, lp = res.tokens, res.logprobs
            if hid is not None:
                hid = res.out.hidden_states[-1][:, -1].float()
            j += 1
        return [c for c in out if c is not None]

    def _child(self, parent: Node, toks: list[int], lps: list[float], reason: str,
               kv: torch.Tensor) -> Node:
        step = Step(self.e.decode(toks), tuple(toks), tuple(lps), reason)
        child = Node(parent=parent, step=step)
        self.e.kv.put(child, Segment(kv=kv, n=len(toks) - 1))  # last token fed on expansion
        return child


def stop_decoder(engine: HFEngine) -> Any:
    """token ids -> text with special tokens kept, for stop-string checks: a fast tokenizer's
    own decode (one call per row: `decode_batch` hands rows to a thread pool, whose
    start-up costs more than a stop window's decode, and whose threads take cores from
    the model's), else the tokenizer's."""
    backend = getattr(engine.tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return lambda ids: backend.decode(ids, skip_special_tokens=False)
    return lambda ids: engine.decode(ids, skip_special=False)
