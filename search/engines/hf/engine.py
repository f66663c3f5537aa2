"""The transformers engine: batched step expansion over a tree of shared KV segments.

How a call runs (B rows = nodes x n samples):
  1. `_ensure`: every node to expand gets its KV complete (its last sampled token fed, or the
     prompt prefilled once per problem, or a freed segment recomputed and counted as prefill).
  2. The rows decode together one token per forward pass, each token's K/V written in
     place into one batch cache per call. On the lean forward (plain Llama-family models,
     search.runtime.lean: the same function in fewer ops, on CPU or CUDA;
     `tree_attention`) a row reads its path where it lives: on the CPU's attention kernel
     in the KV pool through a block table, its new columns in blocks of its own
     (search.runtime.paged); elsewhere the long segments of its path and the short ones
     all rows share, each once for all the rows under it, only its short segments of its
     own copied in, left-padded (kv.batch_cache). Other models run transformers'
     forward (the engine warns: forward_note) over the rows' paths copied in, a prefix
     common to all rows kept once under cascade attention (`share_prefix`). A row leaves
     the batch when its step stops, and the child keeps a copy of the KV of the tokens this
     step added, with room for its last token (fed when it is expanded).
  3. With `speculate`, the same loop (search.engines.hf.decode.Decoder) feeds each row its
     last token plus a model-free draft (n-grams of the search tree, the model's recycled
     top-k) and keeps what the model's own sampling accepts: several tokens per pass;
     greedy outputs identical, sampled ones from the same distribution
     (search.engines.hf.spec).
Each call is a job (search.runtime.passes) whose forwards are Passes: alone by default; while
the scheduler serves (search.solve_many), every search's calls in flight share each forward,
with results bit for bit what the call computes alone. Searches share the engine through
their views (search.session.Bindable: `engine.bind(session)`): a view's calls charge its
session's meter, and the trees they cache are dropped when that session ends.
The engine owns its KV (search.runtime.kvstore): node segments are a cache under
`HFConfig.kv_cache` bytes, least recently used out first, pinned while a call reads them,
computed again (uncharged) when a call needs one that was dropped; no caller frees KV.
Works with decoder-only models whose layers use full attention (Llama, Qwen2, Qwen3, Mistral
without sliding window, SmolLM2, ...), on CPU or CUDA, in fp32 or bf16 (`dtype`).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
import weakref
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import torch

from search.budget import BudgetReached
from search.engines.base import DEFAULT_STOP, budget_child, check_expand
from search.engines.hf.config import HFConfig
from search.engines.hf.decode import Decoder
from search.engines.hf.drafter import Drafter
from search.engines.hf.spec import SpecStats, Speculation
from search.engines.prompts import PromptFormat
from search.runtime import dtypes, kernel, lean, packed
from search.runtime.dtypes import is_int8, kv_dtype, quantize_int8, weight_dtype
from search.runtime.kvpool import BLOCK
from search.runtime.kvtree import KVTree
from search.runtime.passes import Job
from search.runtime.sched import Scheduler
from search.runtime.transfer import upload
from search.session import Bindable, Session
from search.types import Node, Problem, Step


class HFEngine(Bindable):
    """A transformers causal LM behind the Engine protocol.

    `HFEngine(model, tokenizer, config)` or `HFEngine(model, tokenizer, **options)`, options
    being HFConfig's fields (search.engines.hf.config: every option and its rules)."""

    concurrent = True  # safe to share between searches in threads (see the module doc)

    def __init__(self, model: Any, tokenizer: Any, config: HFConfig | None = None,
                 **options: Any) -> None:
        self.config = cfg = HFConfig.of(config, **options)
        self.device = cfg.torch_device
        int8 = is_int8(cfg.dtype)  # the linears quantised once the model is here (dtypes.py)
        self.model = model.to(device=self.device,
                              dtype=None if int8 else weight_dtype(cfg.dtype)).eval()
        # what the forwards run: the lean forward, or transformers' with the reason why
        self.forward_note = lean.take_attention(self.model, cfg.lean)
        self.tokenizer = tokenizer
        self.name = cfg.name or getattr(model.config, "_name_or_path", "model")
        self.kv = KVTree(self.model, self.device, keep_hidden=cfg.keep_hidden,
                         share_prefix=cfg.share_prefix, prompt_cache=cfg.prompt_cache,
                         cap=cfg.kv_cache)
        # this engine's calls, inline or merged across searches while it serves (sched.py)
        self.scheduler = self.kv.scheduler = Scheduler()
        # child -> the hidden state its step's last token was predicted from (keep_hidden)
        self.step_features: weakref.WeakKeyDictionary[Node, torch.Tensor] = \
            weakref.WeakKeyDictionary()
        self.n_params = self.kv.n_params  # counted before quantisation: FLOPs stay honest
        if int8:
            quantize_int8(self.model)
        if cfg.pack is not False and self.device.type == "cpu":
            packed.pack_linears(self.model)
        self.packed = packed.is_packed(self.model)
        if cfg.pack and not self.packed:  # the model's own dtype (dtype=None) can forbid it
            raise ValueError("pack=True, but no linear layer could be packed: it needs fp32 "
                             "weights on a CPU whose torch has oneDNN")
        cfg_max = getattr(model.config, "max_position_embeddings", None) or 4096
        self.max_length = int(cfg.max_length or min(cfg_max, 8192))
        self.kv.forward = self.model if self.forward_note else lean.LeanLlama(
            self.model, positions=self.max_length, merge=cfg.merge)
        # cfg.kv_dtype where it differs from the weights' (float16 beside fp32 on the CPU),
        # refused where no forward of this engine reads it (before the layout is first read)
        self.kv.kv_dtype = kv = kv_dtype(cfg.kv_dtype, next(self.model.parameters()).dtype,
                                         self.device.type)
        if kv is not None and (self.forward_note or not kernel.available()):
            raise ValueError(f"kv_dtype={cfg.kv_dtype!r} is read only by the CPU attention "
                             "kernel on the lean forward, which this engine does not run ("
                             f"{self.forward_note or 'the kernel is not built here'})")
        self.kv.attend_in_place(cfg.tree_attention)  # parts of paths read where they live
        if dtypes.cpu_16bit(self.model, self.device, cfg.dtype):
            warnings.warn(f"{self.name}: 16-bit weights on the CPU run without the packed GEMMs"
                          " and the attention kernel (fp32 only): searches sharing this engine "
                          "never merge their forwards; dtype='float32' converts them",
                          UserWarning, stacklevel=2)
        if cfg.lean and self.forward_note:
            warnings.warn(f"{self.name}: transformers' forward runs instead of the lean one "
                          f"({self.forward_note}): slower, and searches sharing this engine "
                          "never merge their forwards", lean.LeanFallback, stacklevel=2)
        self.prompt = PromptFormat(chat=bool(tokenizer.chat_template) if cfg.chat is None
                                   else cfg.chat, system_prompt=cfg.system_prompt,
                                   template=cfg.prompt_template, instructions=cfg.instructions)
        self.eos_ids = _eos_ids(model, tokenizer)
        # speculation (spec.py): its knobs, its drafter, acceptance counters in spec_stats
        self.spec = cfg.spec
        self.drafter = Drafter(self.spec) if self.spec is not None else None
        self.spec_stats = SpecStats()

    def record_features(self) -> None:
        """The public switch a scorer that reads step features (the value head) turns on:
        every step sampled from now on records the final hidden state its last token was
        predicted from (step_features), as HFEngine(keep_hidden=True) does from the start;
        the engine's config says so too. A job in flight reads the flag once
        (KVTree.pass_for), so turning it on mid-search is safe."""
        if not self.kv.keep_hidden:
            self.part.config = dataclasses.replace(self.config, keep_hidden=True)
            self.kv.keep_hidden = True

    @property
    def chat(self) -> bool:
        """Whether prompts go through the tokenizer's chat template."""
        return bool(self.prompt.chat)

    @property
    def forward(self) -> Any:
        """What the engine's forwards call: the model, or the lean forward standing in for
        it (held by the KV tree, whose prefills call it too)."""
        return self.kv.forward

    @classmethod
    def load(cls, name_or_path: str, config: HFConfig | None = None, **options: Any) -> HFEngine:
        """Load by embedded name (see search.models), local path or Hugging Face id;
        dtype=torch.bfloat16 (or "bfloat16") loads bf16 weights; "int8" loads fp32 and
        quantises the linears (see quantize_int8); none: 16-bit weights bound for the CPU
        as fp32 where they fit (dtypes.fp32_fits). The model's own engine defaults (an
        embedded reasoner's prompt format) fill what `options` leave out, and with a
        `config`, the fields it leaves at HFConfig's defaults."""
        from search.models import load_model

        dtype = config.dtype if config is not None else options.get("dtype")
        load_kw = {} if dtype is None else {
            "dtype": torch.float32 if is_int8(dtype) else weight_dtype(dtype)}
        model, tokenizer, defaults = load_model(name_or_path, **load_kw)
        # (the packed GEMMs and the attention kernel run fp32)
        model = dtypes.fp32_for_cpu(model, HFConfig.of(config, **options).torch_device, dtype)
        if config is None:
            return cls(model, tokenizer, **{**defaults, **options, "name": name_or_path})
        blank = HFConfig()
        fill = {k: v for k, v in defaults.items() if k not in options
                and getattr(config, k) == getattr(blank, k)}
        return cls(model, tokenizer, dataclasses.replace(config, **fill, name=name_or_path),
                   **options)

    # -- prompts -----------------------------------------------------------------------
    def prompt_ids(self, problem: Problem) -> list[int]:
        """Token ids of the problem's prompt (PromptFormat: the chat template when the model
        has one), refused where it leaves no room in the context."""
        ids = self.prompt.ids(problem, self.tokenizer)
        if len(ids) >= self.max_length:
            raise ValueError(f"prompt of {len(ids)} tokens does not fit the engine's "
                             f"max_length={self.max_length}")
        return ids

    def root(self, problem: Problem) -> Node:
        # the tokenizer is used by one thread at a time: the scheduler's
        return self.scheduler.call(lambda: self.session.kv.add(
            Node(problem=problem, prompt_ids=self.prompt_ids(problem))), cancel=self.session.cancel)

    def prefill(self, problems: Sequence[Problem]) -> int:
        """Prefill each distinct prompt of `problems` once, in shared forwards, into the
        prompt cache (kvstore.PromptCache): the searches that follow on these prompts
        (search.solve_many's) compute none of them (each is still charged its prompt, as
        the forward it saves: kvtree.KVTree._cached_prompts). Returns the prompt tokens the
        engine computed meanwhile (0 for prompts already cached, or another thread's). A
        prompt the engine refuses (too long for its context) is skipped here: its own run
        meets the refusal and fails alone. With no prompt cache (prompt_cache=0) nothing
        would be kept for them, so nothing is computed."""
        if not self.kv.prompts.cap:
            return 0
        session = Session()
        view = self.bind(session)
        roots: dict[tuple[int, ...], Node] = {}
        for problem in problems:
            try:
                root = view.root(problem)
            except ValueError:
                continue
            roots.setdefault(tuple(root.prompt_ids), root)
        before = self.kv.prefilled
        with self.kv.prompts.claim(list(roots)) as mine:  # (another thread's: waited for)
            # where prompts may begin with cached ones' blocks (PromptCache.longest), one
            # prompt of each first block first, then the others (a system prompt once)
            first: dict[tuple[int, ...], tuple[int, ...]] = {}
            for ids in mine:
                first.setdefault(ids[:BLOCK] if self.kv.partial_prompts else ids, ids)
            lead = set(first.values())
            for wave in (list(first.values()), [ids for ids in mine if ids not in lead]):
                if wave:
                    self.scheduler.run(self.kv.ensure_job([roots[ids] for ids in wave],
                                                          session), cancel=session.cancel)
        return self.kv.prefilled - before

    def decode(self, token_ids: Sequence[int], *, skip_special: bool = True) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=skip_special,
                                     clean_up_tokenization_spaces=False)

    # -- the protocol ------------------------------------------------------------------
    def expand(self, nodes: Sequence[Node], n: int = 1, *, stop: Sequence[str] | None = DEFAULT_STOP,
               max_tokens: int = 256, temperature: float = 1.0, top_p: float = 1.0,
               seed: int = 0) -> list[list[Node]]:
        nodes = self._room(check_expand(nodes, n, max_tokens, temperature, top_p), "expand")
        if not nodes:
            return []
        rows = [node for node in nodes for _ in range(n)]
        return self.scheduler.run(self._expand(nodes, rows, n, tuple(stop or ()), max_tokens,
                                      temperature, top_p, seed), cost=self._cost(rows, max_tokens),
                         cancel=self.session.cancel)

    def _expand(self, nodes: list[Node], rows: list[Node], n: int, stop: tuple[str, ...],
                max_tokens: int, temperature: float, top_p: float, seed: int
                ) -> Job[list[list[Node]]]:
        with self.kv.store.pinned(nodes):  # the rows' paths stay while they decode
            try:
                yield from self.kv.ensure_job(nodes, self.session)
            except BudgetReached:  # no forward fits the budget: every row ends before its first token
                return [[budget_child(node) for _ in range(n)] for node in nodes]
            # speculation needs a 4D mask with holes (sdpa/eager); other kinds decode plainly
            spec = None if self.drafter is None or self.spec is None or \
                self.kv.layout.mask == "2d" else Speculation(self.spec, self.drafter, self.spec_stats)
            children = yield from Decoder(self, rows, stop, max_tokens, temperature, top_p, seed,
                                          spec=spec).run()
        return [children[i * n:(i + 1) * n] for i in range(len(nodes))]

    def _cost(self, rows: Sequence[Node], room: int) -> int:
        """Bytes of batch cache a call over these rows may hold (no prefix shared)."""
        longest = max(min(n.n_tokens + room, self.max_length) for n in rows)
        return len(rows) * longest * self.kv.column_bytes

    def extend(self, nodes: Sequence[Node], continuations: Sequence[str | Sequence[int]], *,
               generated: bool = False) -> list[Node]:
        if len(nodes) != len(continuations):
            raise ValueError("extend needs one continuation per node")
        nodes = list(nodes)
        return self.scheduler.run(self._extend(nodes, list(continuations), generated),
                         cost=self._cost(nodes, max((len(c) for c in continuations), default=1)),
                         cancel=self.session.cancel)

    def _extend(self, nodes: list[Node], continuations: list[str | Sequence[int]],
                generated: bool) -> Job[list[Node]]:
        with self.kv.store.pinned(nodes):  # the parents stay until their children are made
            ids_list = [self._tokens(self.tokenizer(c, add_special_tokens=False)["input_ids"]
                                     if isinstance(c, str) else c, "extend")
                        for c in continuations]
            if any(not ids for ids in ids_list):
                raise ValueError("extend: an empty continuation")
            self._room(nodes, "extend")
            # the context ends a continuation where it is full (its step's reason "length")
            ids_list = [ids[:self.max_length - n.n_tokens] for ids, n in zip(ids_list, nodes)]
            out: list[Node | None] = [None] * len(nodes)
            full = list(map(len, ids_list))
            if generated:  # generated tokens count against Budget.tokens: the first ones fit
                ids_list = fit(ids_list, self.meter.token_room(sum(full)))
            try:
                yield from self.kv.ensure_job(nodes, self.session)
            except BudgetReached:
                ids_list = [[] for _ in ids_list]
            by_width: dict[int, list[int]] = defaultdict(list)
            for i, ids in enumerate(ids_list):
                if ids:
                    by_width[len(ids)].append(i)
                else:  # the budget left this row nothing
                    out[i] = budget_child(nodes[i])
            for width, idx in by_width.items():
                parents = [nodes[i] for i in idx]
                count = width * len(idx)
                try:
                    new, logits, _ = yield from self.kv.feed_job(
                        parents, [ids_list[i] for i in idx], self.session, all_logits=True,
                        prefill=0 if generated else count)
                except BudgetReached:
                    for i in idx:
                        out[i] = budget_child(nodes[i])
                    continue
                if generated:
                    self.meter.charge_model(generated=count, passes=0)
                for i, p, kv_new, lg in zip(idx, parents, new, logits):
                    ids = ids_list[i]
                    # token 0 is predicted by the parent's logits, token j by position j-1
                    prev = torch.cat([self._logits(p)[None], lg[:-1]], dim=0)
                    lps = torch.log_softmax(prev, -1).gather(-1, upload(ids, prev.device)[:, None])
                    reason = "budget" if len(ids) < full[i] else \
                        "eos" if ids[-1] in self.eos_ids else \
                        "length" if p.n_tokens + len(ids) >= self.max_length else "forced"
                    child = Node(parent=p, step=Step(self.decode(ids), tuple(ids),
                                                     tuple(lps.squeeze(-1).tolist()), reason))
                    self.kv.put(child, self.kv.segment(kv_new, logits=lg[-1]), self.session.kv)
                    out[i] = child
            return [c for c in out if c is not None]

    def topk_next(self, nodes: Sequence[Node], k: int) -> list[list[tuple[int, float]]]:
        """The k likeliest next tokens; none where the budget leaves no forward to compute
        them."""
        if not isinstance(k, int) or k < 0:
            raise ValueError(f"topk_next: k must be an int >= 0, got {k!r}")

        def top(lp: torch.Tensor) -> list[tuple[int, float]]:
            values, ids = lp.topk(min(k, lp.shape[-1]))  # (k past the vocabulary: all of it)
            return list(zip(ids.tolist(), values.tolist()))

        return self.scheduler.run(self._next(list(nodes), top, list), cancel=self.session.cancel)

    def next_logprobs(self, nodes: Sequence[Node], token_ids: Sequence[int]) -> list[list[float]]:
        """Log-probabilities of the given next tokens after each node; -inf where the budget
        leaves no forward to compute them."""
        idx = upload(self._tokens(token_ids, "next_logprobs"), self.device)
        return self.scheduler.run(self._next(list(nodes), lambda lp: lp[idx].tolist(),
                                             lambda: [-math.inf] * len(token_ids)),
                                  cancel=self.session.cancel)

    def _next(self, nodes: list[Node], read: Callable[[torch.Tensor], Any],
              cut: Callable[[], Any]) -> Job[list[Any]]:
        """Per node, `read` of its next-token logprobs [V] (the nodes made complete first);
        `cut()` each where the budget leaves no forward to complete them."""
        self._room(nodes, "the next token's logprobs", 0)
        try:
            yield from self.kv.ensure_job(nodes, self.session)
        except BudgetReached:
            return [cut() for _ in nodes]
        return [read(torch.log_softmax(self._logits(node), -1)) for node in nodes]

    def _room(self, nodes: list[Node], what: str, room: int = 1) -> list[Node]:
        """nodes, refused (ValueError) where one leaves fewer than `room` positions of the
        engine's context (a node another engine made, of a longer context)."""
        if over := [n.n_tokens for n in nodes if n.n_tokens + room > self.max_length]:
            raise ValueError(f"{what}: a node of {over[0]} tokens "
                             f"{'leaves no room in' if room else 'is past'} the engine's context "
                             f"(max_length={self.max_length})")
        return nodes

    def _tokens(self, ids: Sequence[int], what: str) -> list[int]:
        """ids as ints, refused (ValueError) where one is not a token id of the model's
        vocabulary (a negative one would index from its end)."""
        out = [int(t) for t in ids]
        self.kv.refuse_foreign(out, what)
        return out

    def _logits(self, node: Node) -> torch.Tensor:
        """A complete node's next-token logits [V] (its segment's)."""
        seg = self.kv.get(node)
        assert seg is not None and seg.logits is not None
        return seg.logits

    @property
    def cached_tokens(self) -> int:
        """Tokens whose KV the engine currently holds (for memory tests and reports)."""
        return self.scheduler.call(lambda: self.kv.cached_tokens)


def fit(rows: list[list[int]], room: int) -> list[list[int]]:
    """The rows cut to `room` tokens in all, the first rows first (fit([[1, 2], [3]], 2) ==
    [[1, 2], []])."""
    out = []
    for ids in rows:
        out.append(ids[:room])
        room -= len(out[-1])
    return out


def _eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    ids: set[int] = set()
    for src in (getattr(model, "generation_config", None), model.config, tokenizer):
        value = getattr(src, "eos_token_id", None)
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    return frozenset(ids)
