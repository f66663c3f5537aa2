"""The transformers engine: batched step expansion over a tree of shared KV segments.

How a call runs (B rows = nodes x n samples):
  1. `_ensure`: every node to expand gets its KV complete (its last sampled token fed, or the
     prompt prefilled once per problem, or a freed segment recomputed and counted as prefill).
  2. The rows' path caches are concatenated from their segments, left-padded, and decoded
     together one token per forward pass; a row leaves the batch when its step stops, and
     the child keeps only the KV of the tokens this step added.
Works with decoder-only models whose layers use full attention and a DynamicCache (Llama,
Qwen2, Mistral without sliding window, SmolLM2, ...), on CPU or CUDA.
"""

from __future__ import annotations

import weakref
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from search.budget import Meter
from search.engines import kv as kvmod
from search.engines.base import DEFAULT_STOP
from search.engines.kv import Segment
from search.engines.kvtree import KVTree
from search.engines.sampling import sample
from search.types import Node, Problem, Step

INSTRUCTIONS: Mapping[str, str] = {
    "math": ("{prompt}\n\nSolve the problem step by step. Put a blank line between steps. "
             "End with: The answer is <answer>."),
    "code": ("Complete the following Python function. Reply with the whole function in a "
             "```python code block.\n\n{prompt}"),
}


class HFEngine:
    """A transformers causal LM behind the Engine protocol."""

    def __init__(self, model: Any, tokenizer: Any, *, device: str | torch.device | None = None,
                 max_length: int | None = None, chat: bool | None = None,
                 system_prompt: str | None = None, prompt_template: str = "{prompt}\n",
                 instructions: Mapping[str, str] = INSTRUCTIONS, name: str = "",
                 keep_hidden: bool = False) -> None:
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.name = name or getattr(model.config, "_name_or_path", "model")
        self.meter = Meter()
        # keep_hidden: record, per generated step, the final hidden state its last token was
        # predicted from (`step_features`), so a value head scores steps with no extra pass
        self.kv = KVTree(self.model, self.device, keep_hidden=keep_hidden)
        self.step_features: weakref.WeakKeyDictionary[Node, torch.Tensor] = \
            weakref.WeakKeyDictionary()
        self.n_params = self.kv.n_params
        cfg_max = getattr(model.config, "max_position_embeddings", None) or 4096
        self.max_length = int(max_length or min(cfg_max, 8192))
        self.chat = bool(tokenizer.chat_template) if chat is None else chat
        self.system_prompt = system_prompt
        self.prompt_template = prompt_template
        self.instructions = dict(instructions)
        self.eos_ids = _eos_ids(model, tokenizer)

    @classmethod
    def load(cls, name_or_path: str, **kwargs: Any) -> HFEngine:
        """Load by embedded name (see search.models), local path or Hugging Face id."""
        from search.models import load_model

        load_kw = {k: kwargs.pop(k) for k in ("dtype",) if k in kwargs}
        model, tokenizer, defaults = load_model(name_or_path, **load_kw)
        return cls(model, tokenizer, **{**defaults, **kwargs, "name": name_or_path})

    # -- prompts -----------------------------------------------------------------------
    def prompt_ids(self, problem: Problem) -> list[int]:
        """Token ids of the problem's prompt (chat template when the model has one)."""
        if self.chat:
            messages = [dict(m) for m in problem.messages]
            if not messages:
                template = self.instructions.get(problem.domain, "{prompt}")
                if self.system_prompt:
                    messages.append({"role": "system", "content": self.system_prompt})
                messages.append({"role": "user", "content": template.format(prompt=problem.prompt)})
            out = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                     tokenize=True)
            ids = out["input_ids"] if isinstance(out, Mapping) else out
        else:
            if problem.messages:
                raise ValueError(f"{self.name}: the problem is given as chat messages but the "
                                 "tokenizer has no chat template; give a plain prompt instead")
            text = self.prompt_template.format(prompt=problem.prompt)
            ids = self.tokenizer(text)["input_ids"]
        ids = [int(i) for i in ids]
        if not ids:
            raise ValueError("the prompt tokenised to nothing")
        if len(ids) >= self.max_length:
            raise ValueError(f"prompt of {len(ids)} tokens does not fit the engine's "
                             f"max_length={self.max_length}")
        return ids

    def root(self, problem: Problem) -> Node:
        return Node(problem=problem, prompt_ids=self.prompt_ids(problem))

    def decode(self, token_ids: Sequence[int], *, skip_special: bool = True) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=skip_special,
                                     clean_up_tokenization_spaces=False)

    # -- the protocol ------------------------------------------------------------------
    def expand(self, nodes: Sequence[Node], n: int = 1, *, stop: Sequence[str] | None = DEFAULT_STOP,
               max_tokens: int = 256, temperature: float = 1.0, top_p: float = 1.0,
               seed: int = 0) -> list[list[Node]]:
        _check_sampling(n, max_tokens, temperature, top_p)
        nodes = list(nodes)
        for node in nodes:
            if node.finished:
                raise ValueError(f"cannot expand a finished node: {node!r}")
        if not nodes:
            return []
        self.kv.ensure(_unique(nodes), self.meter)
        rows = [node for node in nodes for _ in range(n)]
        children = _StepDecoder(self, rows, tuple(stop or ()), max_tokens, temperature,
                                top_p, seed).run()
        return [children[i * n:(i + 1) * n] for i in range(len(nodes))]

    def rollout(self, nodes: Sequence[Node], *, max_tokens: int = 512, temperature: float = 0.0,
                seed: int = 0) -> list[Node]:
        """Complete each node to EOS (or max_tokens) in one step: one child each."""
        return [c[0] for c in self.expand(nodes, 1, stop=None, max_tokens=max_tokens,
                                          temperature=temperature, seed=seed)]

    def extend(self, nodes: Sequence[Node], continuations: Sequence[str | Sequence[int]], *,
               generated: bool = False) -> list[Node]:
        if len(nodes) != len(continuations):
            raise ValueError("extend needs one continuation per node")
        ids_list = [self.tokenizer(c, add_special_tokens=False)["input_ids"] if isinstance(c, str)
                    else [int(t) for t in c] for c in continuations]
        if any(not ids for ids in ids_list):
            raise ValueError("extend: an empty continuation")
        self.kv.ensure(_unique(nodes), self.meter)
        out: list[Node | None] = [None] * len(nodes)
        by_width: dict[int, list[int]] = defaultdict(list)
        for i, ids in enumerate(ids_list):
            by_width[len(ids)].append(i)
        for width, idx in by_width.items():
            parents = [nodes[i] for i in idx]
            count = width * len(idx)
            new, logits, _ = self.kv.feed([self.kv.path_kv(p) for p in parents],
                                          [p.n_tokens for p in parents],
                                          [ids_list[i] for i in idx], self.meter,
                                          all_logits=True, prefill=0 if generated else count)
            if generated:
                self.meter.charge_model(generated=count, passes=0)
            for i, p, kv_new, lg in zip(idx, parents, new, logits):
                ids = ids_list[i]
                seg = self.kv.get(p)
                assert seg is not None and seg.logits is not None
                # token 0 is predicted by the parent's logits, token j by position j-1
                prev = torch.cat([seg.logits[None], lg[:-1]], dim=0)
                lps = torch.log_softmax(prev, -1).gather(-1, torch.tensor(ids, device=prev.device)[:, None])
                reason = "eos" if ids[-1] in self.eos_ids else "forced"
                child = Node(parent=p, step=Step(self.decode(ids), tuple(ids),
                                                 tuple(lps.squeeze(-1).tolist()), reason))
                self.kv.put(child, Segment(kv=kv_new, n=width, logits=lg[-1]))
                out[i] = child
        return [c for c in out if c is not None]

    def topk_next(self, nodes: Sequence[Node], k: int) -> list[list[tuple[int, float]]]:
        self.kv.ensure(_unique(nodes), self.meter)
        out = []
        for node in nodes:
            seg = self.kv.get(node)
            assert seg is not None and seg.logits is not None
            lp, ids = torch.log_softmax(seg.logits, -1).topk(k)
            out.append(list(zip(ids.tolist(), lp.tolist())))
        return out

    def next_logprobs(self, nodes: Sequence[Node], token_ids: Sequence[int]) -> list[list[float]]:
        """Log-probabilities of the given next tokens after each node."""
        self.kv.ensure(_unique(nodes), self.meter)
        idx = torch.tensor(list(token_ids), device=self.device)
        out = []
        for node in nodes:
            seg = self.kv.get(node)
            assert seg is not None and seg.logits is not None
            out.append(torch.log_softmax(seg.logits, -1)[idx].tolist())
        return out

    def retain(self, live: Sequence[Node]) -> None:
        self.kv.retain(live)

    @property
    def cached_tokens(self) -> int:
        """Tokens whose KV the engine currently holds (for memory tests and reports)."""
        return self.kv.cached_tokens


class _StepDecoder:
    """One `expand` call's decoding loop: all rows step together, one token per pass."""

    def __init__(self, engine: HFEngine, rows: list[Node], stop: tuple[str, ...],
                 max_tokens: int, temperature: float, top_p: float, seed: int) -> None:
        self.e, self.rows, self.stop = engine, rows, stop
        self.max_tokens, self.temperature, self.top_p = max_tokens, temperature, top_p
        self.gen = torch.Generator(device=engine.device).manual_seed(seed)
        self.stop_span = max((len(s) for s in stop), default=0) + 2

    def _reason(self, node: Node, toks: list[int]) -> str | None:
        e = self.e
        if toks[-1] in e.eos_ids:
            return "eos"
        if self.stop and any(s in e.decode(toks[-self.stop_span:], skip_special=False)
                             for s in self.stop):
            return "stop"
        if node.n_tokens + len(toks) >= e.max_length:
            return "length"
        if len(toks) >= self.max_tokens:
            return "max_tokens"
        return None

    @torch.inference_mode()
    def run(self) -> list[Node]:
        e, rows = self.e, self.rows
        uniq = _unique(rows)
        where = {n.id: i for i, n in enumerate(uniq)}
        row_idx = torch.tensor([where[n.id] for n in rows], device=e.device)
        stacked, mask = kvmod.stack_left_padded([e.kv.path_kv(n) for n in uniq])
        assert stacked is not None  # every node is complete, so at least its prompt is cached
        cache = kvmod.to_cache(stacked.index_select(2, row_idx))
        attn = mask.to(e.device).index_select(0, row_idx)
        P = attn.shape[1]
        segs0 = [e.kv.get(n) for n in rows]
        logits = torch.stack([s.logits for s in segs0])  # type: ignore[union-attr]
        # [B, hidden]: the state each row's next token is predicted from (value features)
        hid = torch.stack([s.hidden for s in segs0]) if e.kv.keep_hidden else None  # type: ignore[union-attr,misc]
        pos0 = torch.tensor([n.n_tokens for n in rows], device=e.device)
        toks: list[list[int]] = [[] for _ in rows]
        lps: list[list[float]] = [[] for _ in rows]
        out: list[Node | None] = [None] * len(rows)
        active = list(range(len(rows)))  # row ids, in cache-batch order
        j = 0  # tokens sampled so far in this step, equal for every active row
        while active:
            tok, lp = sample(logits, temperature=self.temperature, top_p=self.top_p,
                             generator=self.gen)
            e.meter.charge_model(generated=len(active), passes=0)
            keep = []
            stopped: list[tuple[int, int, str]] = []  # (batch position, row, reason)
            for b, (r, t, logp) in enumerate(zip(active, tok.tolist(), lp.tolist())):
                toks[r].append(t)
                lps[r].append(logp)
                reason = self._reason(rows[r], toks[r])
                if reason is None:
                    keep.append(b)
                else:
                    stopped.append((b, r, reason))
            if stopped:
                segs = kvmod.rows_from_cache(cache, [b for b, _, _ in stopped], P, P + j)
                for (b, r, reason), kv in zip(stopped, segs):
                    child = out[r] = self._child(rows[r], toks[r], lps[r], reason, kv)
                    if hid is not None:
                        e.step_features[child] = hid[b].clone()
            if not keep:
                break
            if len(keep) < len(active):
                sel = torch.tensor(keep, device=e.device)
                cache.batch_select_indices(sel)
                attn, tok, pos0 = attn[sel], tok[sel], pos0[sel]
                hid = hid[sel] if hid is not None else None
                active = [active[b] for b in keep]
            attn = torch.cat([attn, attn.new_ones(len(active), 1)], dim=1)
            res = e.model(input_ids=tok[:, None], attention_mask=attn,
                          position_ids=(pos0 + j)[:, None], past_key_values=cache,
                          use_cache=True, logits_to_keep=1, output_hidden_states=hid is not None)
            e.meter.charge_model(processed=len(active), flops=2.0 * e.n_params * len(active))
            logits = res.logits[:, -1].float()
            if hid is not None:
                hid = res.hidden_states[-1][:, -1].float()
            j += 1
        return [c for c in out if c is not None]

    def _child(self, parent: Node, toks: list[int], lps: list[float], reason: str,
               kv: torch.Tensor) -> Node:
        step = Step(self.e.decode(toks), tuple(toks), tuple(lps), reason)
        child = Node(parent=parent, step=step)
        self.e.kv.put(child, Segment(kv=kv, n=len(toks) - 1))  # last token fed on expansion
        return child


def _unique(nodes: Sequence[Node]) -> list[Node]:
    return list({node.id: node for node in nodes}.values())


def _check_sampling(n: int, max_tokens: int, temperature: float, top_p: float) -> None:
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be a positive int, got {max_tokens!r}")
    if not temperature >= 0:
        raise ValueError(f"temperature must be >= 0, got {temperature!r}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")


def _eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    ids: set[int] = set()
    for src in (getattr(model, "generation_config", None), model.config, tokenizer):
        value = getattr(src, "eos_token_id", None)
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    return frozenset(ids)
