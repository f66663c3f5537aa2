"""One model's KV cache over a search tree: segments per node, computed at most once.

The store is keyed weakly by Node, so several models can cache the same tree side by side
(the generator, a PRM with its own tokenisation, ...): each KVTree is given a function
`own_tokens(node)` that says which token ids a node adds in that model's vocabulary.
A node is *complete* when every token of its path is cached and the model's output after
its last token (`Segment.logits`: LM logits, or a reward head's output) is known.
A forward over several rows reads their paths where they live (on the CPU kernel: in the
tree's KV pool, through block tables; elsewhere the long or widely shared segments, the
rest copied into one batch cache: kv.batch_cache), and keeps each row's new columns (in
its node's blocks, on the pool). Prompts' segments are also kept by token ids (kvstore.PromptCache), so
a prompt is prefilled once for every search on it while it is held or fits the cache, and
where the forward allows (`partial_prompts`) a prompt that begins as a cached one does
computes only what follows.

The segments are a cache (search.runtime.kvstore.NodeStore): kept under a byte cap, least
recently used out first, pinned while a call reads them, recomputed when a call needs one
that was dropped (uncharged: a Result does not depend on the cap), and dropped with their
search's trees when it ends. No caller frees KV by hand.

Model work is written as jobs (search.runtime.passes: generators yielding one Pass per
forward), so that several searches' calls can share forwards; `ensure` runs its job
(`ensure_job`) to the end. The model work is done for a search's
search.session.Session, passed in: its meter is charged, and the trees it caches join its KV
scope, whose close (the search's end) drops their segments here.
"""

from __future__ import annotations

import functools
import inspect
from collections import defaultdict
from collections.abc import Callable, Generator, Sequence
from typing import Any

import torch

from search.budget import BudgetReached
from search.runtime import kv as kvmod
from search.runtime import lean
from search.runtime.kvpool import Blocks, Pool, Segment
from search.runtime.kvstore import DEFAULT_CAP, Gone, NodeStore, PromptCache
from search.runtime.lean import LeanLlama
from search.runtime.paged import PagedCache
from search.runtime.passes import Pass
from search.runtime.sched import Scheduler
from search.runtime.transfer import upload
from search.session import KVScope, Session
from search.types import Node

OwnTokens = Callable[[Node], Sequence[int]]
# tokens of a part of a path read where it lives off the CPU kernel (kv.batch_cache)
SHARE_PREFIX = 64


def generator_tokens(node: Node) -> Sequence[int]:
    """The generator's own view: a root adds its prompt ids, a child its step's ids."""
    return node.prompt_ids if node.step is None else node.step.token_ids


class KVTree:
    """KV segments of `model` for the nodes of search trees."""

    def __init__(self, model: Any, device: torch.device, own_tokens: OwnTokens = generator_tokens,
                 *, as_scorer: bool = False, keep_hidden: bool = False,
                 share_prefix: int = SHARE_PREFIX, prompt_cache: int = 0, cap: int = DEFAULT_CAP) -> None:
        self.model = model
        self.forward: Any = model  # what feed_job() calls; an engine may set a lean one (lean.py)
        self.scheduler = Scheduler()  # what ensure() runs on; its owner's, set by it
        self.device = device
        self.own = own_tokens
        self.as_scorer = as_scorer  # charge tokens as scorer work, not generator prefill
        self.keep_hidden = keep_hidden  # also keep the final hidden state (value heads)
        self.share_prefix = share_prefix  # a common prefix of >= this many tokens is not copied per row
        self.kv_dtype: torch.dtype | None = None  # the KV's element type (None: the model's)
        # tree mode (attend_in_place): batch caches read the parts of paths the lean forward's
        # rule picks where they live (kv.batch_cache)
        self.tree = False
        # on the CPU kernel (attend_in_place): segments in this pool's blocks, paths read
        # through block tables
        self.pool: Pool | None = None
        self.prompts = PromptCache(prompt_cache)
        # a prompt may begin as a cached one does (PromptCache.longest; attend_in_place)
        self.partial_prompts = False
        self.prefilled = 0  # prefill tokens this tree's model computed (hits not counted)
        self.n_params = sum(p.numel() for p in model.parameters())
        self.vocab = model.get_input_embeddings().num_embeddings  # the token ids it reads
        # causal LMs can skip the LM head for positions we do not read; heads may not
        self._keep_arg = "logits_to_keep" in inspect.signature(model.forward).parameters
        # node segments under `cap` bytes (kvstore: a root's leaves the prompt cache's holders)
        self.store = NodeStore(cap, on_drop=self._dropped)
        self.recomputed = 0  # tokens computed again after the store dropped them (uncharged)

    def attend_in_place(self, tree: bool = True) -> None:
        """Where `tree`, share_prefix > 0 and the forward is the lean one (its owner sets it,
        and kv_dtype, first), rows read their paths where they live: on the CPU kernel every
        segment in this tree's pool, through block tables (a prompt may then begin with a
        cached prompt's columns, partial_prompts: there every GEMM is row-invariant too, so a
        token's KV and logits are the same bits whatever a forward feeds beside or before
        it); elsewhere the segments of at least share_prefix tokens as parts
        (kv.batch_cache's tree rule). Otherwise a common prefix of share_prefix tokens is a
        part off the kernel, and on it every row's path is copied into blocks of its own."""
        lean_sdpa = isinstance(self.forward, LeanLlama) and self.layout.cascade
        self.tree = tree and lean_sdpa and self.share_prefix > 0
        if not (lean_sdpa and lean.kernel_serves(self.model.get_input_embeddings().weight)):
            return
        self.partial_prompts = self.tree and self.forward.row_invariant
        lay = self.layout
        self.pool = Pool(lay.layers, lay.kv_heads, lay.head_dim, lay.dtype, lay.device)

    def refuse_foreign(self, ids: Sequence[int], what: str) -> None:
        """Refuse (ValueError) a token id the model has no row for (a negative one would
        index the embedding or the logits from their end)."""
        if bad := [t for t in ids if not 0 <= t < self.vocab]:
            raise ValueError(f"{what}: token id {bad[0]} is outside the model's vocabulary "
                             f"[0, {self.vocab})")

    # -- the store ---------------------------------------------------------------------
    def get(self, node: Node) -> Segment | None:
        return self.store.get(node)

    def put(self, node: Node, seg: Segment, scope: KVScope) -> None:
        """Store the node's segment; its tree joins `scope` (the search that cached it, whose
        close drops the tree's segments: `release`)."""
        self.store.put(node, seg)
        scope.roots.add(node.root)
        scope.stores.add(self)

    def release(self, scope: KVScope) -> None:
        """The search of `scope` is over: drop its trees' segments (their prompts stay in the
        prompt cache, as entries no live root holds)."""
        self.store.release([node for root in list(scope.roots) for node in root.walk()])

    def _dropped(self, node: Node) -> None:
        if node.parent is None:
            self.prompts.release(node, self.own(node))

    def is_complete(self, node: Node) -> bool:
        seg = self.store.get(node)
        return seg is not None and seg.logits is not None and seg.n == len(self.own(node))

    def path_parts(self, node: Node) -> list[Segment]:
        """The cached part of the path as its segments (those with columns), root first.

        Callers guarantee that the ancestors are complete, so it is a contiguous prefix."""
        return [seg for a in node.path() if (seg := self.store.get(a)) is not None and seg.n]

    @functools.cached_property
    def layout(self) -> kvmod.KVLayout:
        """The batch caches' layout, read on first use (after an engine set kv_dtype)."""
        return kvmod.KVLayout.of(self.model, self.device, self.kv_dtype)

    def batch(self, paths: Sequence[Sequence[Segment]], room: int) -> kvmod.SlabCache:
        """A batch cache of these paths (path_parts) with `room` free columns: read through
        block tables from the pool, else as kv.batch_cache puts them."""
        if self.pool is not None:
            held = [[(self._blocks(seg), seg.n) for seg in path] for path in paths]
            if not self.tree:  # (the paths copied: each row's into blocks of its own)
                own = [Blocks(self.pool) for _ in held]
                held = [[(b, b.copy_in(0, path))] for b, path in zip(own, held)]
            return PagedCache([[e for b, n in path for e in b.table(n)] for path in held],
                              room, self.layout, self.pool, [b for path in held for b, _ in path])
        return kvmod.batch_cache([[seg.columns for seg in path] for path in paths], room,
                                 self.layout, share_prefix=self.share_prefix, tree=self.tree)

    @staticmethod
    def _blocks(seg: Segment) -> Blocks:
        if seg.blocks is None:
            raise RuntimeError("a segment off the pool on a KV tree whose paths are in it")
        return seg.blocks

    def segment(self, new: torch.Tensor | Blocks, spare: int | None = None, **out: Any
                ) -> Segment:
        """A new segment of the columns new [L, 2, H, w, D] (or a batch cache row's blocks:
        Segment.of, in the pool where this tree has one)."""
        return Segment.of(new, self.pool, spare, **out)

    @property
    def column_bytes(self) -> int:
        """Bytes of one cached token (every layer's key and value)."""
        lay = self.layout
        return lay.layers * 2 * lay.kv_heads * lay.head_dim * torch.finfo(lay.dtype).bits // 8

    @property
    def cached_tokens(self) -> int:
        return sum(seg.n for _, seg in self.store.items())

    # -- the model ---------------------------------------------------------------------
    def pass_for(self, ids: torch.Tensor, pos: torch.Tensor, cache: Any, mask: torch.Tensor,
                 keep: int, hidden: bool) -> Pass:
        """The Pass of one forward of this model over `cache` (keep: logits_to_keep; hidden:
        also its final hidden states). A job reads keep_hidden once and passes it here:
        another search may turn it on meanwhile (a value scorer being built), and a job must
        read its output as it asked for it."""
        return Pass(self.forward, ids, pos, cache, mask, keep if self._keep_arg else None,
                    hidden)

    def feed_job(self, nodes: Sequence[Node], tokens: Sequence[Sequence[int]], session: Session,
                 *, all_logits: bool, prefill: int, charged: bool = True, passes: int = 1
                 ) -> Generator[Pass, Any, tuple[list[torch.Tensor], torch.Tensor,
                                                 torch.Tensor | None]]:
        """Run rows of equal width w through the model, each row's tokens after what is
        cached of its node's path (path_parts: the row's first position is their token
        count), for `session`'s search (its meter is charged), as a job -> per row the new
        KV [L,2,H,w,D], the outputs [B, w or 1, V] (float32), and with keep_hidden the final
        hidden state at each row's last position [B, hidden].
        charged=False: KV computed again after the store dropped it, which no budget checks
        and no meter pays (counted in `recomputed`); passes: the passes it is charged as."""
        w, hidden = len(tokens[0]), self.keep_hidden  # read once (see pass_for)
        self.refuse_foreign([t for row in tokens for t in row], "a node's tokens (another "
                            "tokenizer's? make roots with this engine's root(problem))")
        paths = [self.path_parts(a) for a in nodes]
        if charged:
            self._admit(session, len(tokens) * w)
        cache = self.batch(paths, w)
        P = cache.length
        ids = upload([list(t) for t in tokens], self.device)
        starts = [sum(seg.n for seg in path) for path in paths]
        pos = upload(starts, self.device)[:, None] + torch.arange(w, device=self.device)
        out = yield self.pass_for(ids, pos, cache, cache.attention_mask(w),
                                  0 if all_logits else 1, hidden)
        n = ids.numel()
        if charged:
            self._charge(session, n, prefill, passes)
        else:
            self.recomputed += n
        self.prefilled += prefill
        new = [cache.kept(b, P, P + w) for b in range(len(tokens))]
        logits = out.logits.float()
        last = out.hidden_states[-1][:, -1].float() if hidden else None
        return new, (logits if all_logits else logits[:, -1:]), last

    def _admit(self, session: Session, tokens: int) -> None:
        """Refuse (BudgetReached) a forward of `tokens` tokens the session's budget does not
        let start."""
        if session.meter.refuse_forward(2.0 * self.n_params * tokens):
            raise BudgetReached(f"a forward of {tokens} tokens passes the budget")

    def _charge(self, session: Session, n: int, prefill: int, passes: int = 1) -> None:
        """Charge the session a forward of n tokens (prefill of them counted as prefill): as
        scorer work for a scorer's tree, else as the model's."""
        flops = 2.0 * self.n_params * n
        if self.as_scorer:
            session.meter.charge_scorer(calls=0, tokens=n, flops=flops)
        else:
            session.meter.charge_model(prefill=prefill, flops=flops, passes=passes)

    def ensure(self, nodes: Sequence[Node], session: Session) -> None:
        """Make every node complete, computing only what is missing, for `session`'s search
        (charged to its meter; the trees join its KV scope).

        A partial segment lacks only the step's last sampled token, fed here for the first
        time; a node with no segment (a prompt, text this model did not generate) is fed
        whole and counted as prefill. A node the store dropped for room is first computed
        again as it was, uncharged: what is charged is what the call would compute had
        nothing been dropped.
        """
        self.scheduler.run(self.ensure_job(nodes, session), cancel=session.cancel)

    def ensure_job(self, nodes: Sequence[Node], session: Session) -> Generator[Pass, Any, None]:
        """`ensure` as a job (the nodes' paths pinned while it runs; a node listed twice is
        made complete once): first what the store dropped of their paths, computed again as
        it was, then what they lack."""
        with self.store.pinned(nodes):
            for restore in (True, False):
                while groups := self._missing(nodes, restore):
                    for width, group in groups.items():
                        yield from self._complete(group, width, session, restore)

    def _missing(self, nodes: Sequence[Node], restore: bool) -> dict[int, list[Node]]:
        """The first node on each node's path, root first, that the store dropped (restore)
        or that is not complete, by the own tokens to compute (as many as the store dropped,
        or those after its segment): rows of equal width batch together, others run apart."""
        firsts: dict[int, Node] = {}
        for node in nodes:
            first = next((a for a in node.path() if (self.store.gone(a) is not None
                          if restore else not self.is_complete(a))), None)
            if first is not None:
                firsts[first.id] = first
        groups: dict[int, list[Node]] = defaultdict(list)
        for a in firsts.values():
            seg = self.store.get(a)
            width = self._gone(a).n if restore else len(self.own(a)) - (seg.n if seg else 0)
            groups[width].append(a)
        return groups

    def _cached_prompts(self, group: list[Node], width: int, session: Session, charged: bool
                        ) -> tuple[list[Node], dict[int, list[Node]]]:
        """Give the roots of `group` whose prompts are cached (PromptCache) their segment,
        and where `partial_prompts` allows, those that begin with whole blocks of a cached
        prompt a segment of those blocks' columns -> (the rest, left to compute; the roots
        begun, by the tokens left to compute of each). What a hit saves is charged to the
        session as the forward it saves (its tokens, FLOPs and pass; the same budget check
        first), so a search's Result does not depend on what the cache holds (a restore's
        hit, as the recomputation it saves, is not); `prefilled` counts what was computed."""
        hits: list[tuple[Node, Segment]] = []
        begun: dict[int, list[Node]] = defaultdict(list)
        for a in group:
            if a.parent is not None or self.store.get(a) is not None:
                continue
            if (seg := self.prompts.get(a, self.own(a), self.keep_hidden)) is not None:
                hits.append((a, seg))
            elif charged and self.partial_prompts and \
                    (found := self.prompts.longest(self.own(a))) is not None:
                seg, m = found
                hits.append((a, seg.head(m)))
                begun[width - m].append(a)
        if not hits:
            return group, begun
        rest = [a for a in group if all(a is not h for h, _ in hits)]
        if charged:
            n = sum(seg.n for _, seg in hits)
            self._admit(session, len(group) * width)
            self._charge(session, n, n, passes=0 if rest else 1)
        for a, seg in hits:
            self.put(a, seg, session.kv)
        return rest, begun

    def _complete(self, group: list[Node], width: int, session: Session, restore: bool,
                  passes: int = 1) -> Generator[Pass, Any, None]:
        """Compute `width` more own tokens of each node (restore: its dropped ones again,
        uncharged, its output kept only if it had been known), in forwards charged as
        `passes` passes (0: the forward a cache hit saved was charged for them)."""
        group, begun = self._cached_prompts(group, width, session, charged=not restore)
        for left, roots in begun.items():  # (the group's forward is charged: its hits' pass)
            yield from self._complete(roots, left, session, restore, passes=0)
        known = [not restore or self._gone(a).complete for a in group]
        if width == 0:  # empty steps (the budget gave them no token) stand where their parents do
            for a, keep in zip(group, known):
                if a.parent is None:
                    raise ValueError("a root without prompt token ids: make roots with the "
                                     "engine's root(problem), which tokenises the prompt")
                seg = self.store.get(a.parent)  # complete: `a` is the first missing on its path
                assert seg is not None
                self.put(a, seg.head(0, logits=seg.logits if keep else None,
                                     hidden=seg.hidden if keep else None), session.kv)
            return
        if not group:
            return
        segs = [self.store.get(a) for a in group]  # None where restoring (a dropped node)
        done = [seg.n if seg else 0 for seg in segs]
        fresh = sum(s is None or a.parent is None for a, s in zip(group, segs))  # prompts, text
        new, out, hidden = yield from self.feed_job(
            group, [list(self.own(a))[d:d + width] for a, d in zip(group, done)], session,
            all_logits=False, prefill=0 if restore else width * fresh, charged=not restore,
            passes=passes)
        for i, (a, seg, kv_new, o, keep) in enumerate(zip(group, segs, new, out, known)):
            lg, hid = o[-1] if keep else None, None if hidden is None or not keep else hidden[i]
            full = self.segment(kv_new, logits=lg, hidden=hid) if seg is None else \
                seg.extended(kv_new, logits=lg, hidden=hid)
            self.put(a, full, session.kv)
            if a.parent is None:
                self.prompts.add(a, self.own(a), full)

    def _gone(self, node: Node) -> Gone:
        gone = self.store.gone(node)
        assert gone is not None, "a node to restore was dropped by the store"
        return gone
