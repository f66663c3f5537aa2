"""A lean forward pass for Llama-family models over the engine's slab cache, on any device.

transformers' forward is written for every case at once: per layer it builds the rotary
tables, passes keyword bundles through four module levels, runs RMSNorm as six small ops,
rotates q and k with slices, negations and concatenations, and adds residuals as separate
ops. At a search's decode step (a few rows x 1 token) that work rivals the GEMMs.
`LeanLlama` computes the same function in fewer, wider ops:

- the rotary tables are computed once by the model's own rotary module (then indexed by
  position), and q and k are rotated together: x*cos + roll(x, d/2)*sin', where sin' is sin
  with its first half negated (so that roll(x)*sin' == rotate_half(x)*sin, exactly);
- RMSNorm is torch.rms_norm; q/k/v and gate/up are one GEMM each (packed.fuse_siblings);
- the residual adds follow the o_proj and down_proj GEMMs in place (packed.gemm_rows);
- attention reads the rows' paths where they live: on the CPU in fp32 one kernel call a
  layer for every Pass (search.runtime.kernel), through block tables into the KV pool
  (search.runtime.paged); else per Pass over a slab cache (kv.batch_cache),
  attention.tree_attend: per-part attention merged by log-sum-exp (a shared prefix is a
  part every row reads), torch SDPA with grouped KV heads without parts;
- on the CPU every layer runs in one TorchScript call (search.runtime.scripted.layers), which
  holds no Python interpreter lock while it runs, so the search threads' Python runs beside it.

One forward for every device and weight dtype. The above is the CPU's fp32 path (packed
linears, TorchScript, the attention kernel). On a GPU, or in bf16/fp16, the same layer
runs on the model's own linears (cuBLAS), torch.rms_norm, and torch's fused SDPA per Pass with
a group's query heads stacked as query rows (attention.tree_attend: no enable_gqa, no
repeat_kv; merged by log-sum-exp with the parts a row reads). So on a GPU too the scheduler
merges many searches' Passes into one forward (`merges`); there a row's logits can move by
the GEMMs' rounding with the rows beside it (cuBLAS picks its kernel by the batch's size), so
merging is bit-exact only on the CPU's packed linears (`row_invariant`) with the attention
kernel, and `merge=False`
keeps every search's forwards to itself on a GPU. The rotary table covers the engine's
context from the start off the CPU (no host read of the positions per forward).

It returns what the engine reads of transformers' output: `logits` for the last
`logits_to_keep` positions, and with output_hidden_states the final (normed) hidden states
of those positions as `hidden_states[-1]`. Anything else (another cache or mask, a model
that is not a plain Llama block) goes to the model's own forward unchanged; `why_not` says
why a model cannot run here (the engine warns with it: LeanFallback); `take_attention`
switches a model on any of transformers' attentions to sdpa_gqa where it can.
tests/test_lean.py checks it against transformers' forward (logits, hidden states, cache
columns) on decode, prefill, shared-prefix and draft-tree batches; tests/test_gpu_lean.py in
bf16 and fp32 on each device, merged Passes against separate ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext, suppress
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import torch
import torch.nn.functional as F

from search.runtime import attention, scripted
from search.runtime.kernel import serves as kernel_serves
from search.runtime.kv import SlabCache
from search.runtime.omp import one_thread, threads_here, weight_bytes
from search.runtime.packed import FusedLinear, PackedLinear, packed_linear, single_row_same
from search.runtime.paged import block_tables
from search.runtime.passes import Pass, cache_arg, flatten, per_pass


class LeanFallback(UserWarning):
    """An engine asked for the lean forward runs transformers' own instead (lean.why_not):
    slower, and its Passes never share a forward with other searches'."""


# rotary variants whose frequencies do not depend on the sequence length
STATIC_ROPE = ("default", "linear", "llama3")
TABLE_MIN = 2048  # positions in the first rotary table; it doubles when a forward needs more


@dataclass
class Output:
    """The part of a transformers CausalLMOutput the engine reads."""

    logits: torch.Tensor  # [B, kept positions, V]
    hidden_states: tuple[torch.Tensor, ...] | None = None  # ([B, kept, hidden],): final, normed


class _Proj:
    """One or more sibling linears as one map x [rows, in] -> [rows, sum(out)] (+ residual):
    a single oneDNN call on their packed weight where they have one, their modules else."""

    def __init__(self, modules: Sequence[Any]) -> None:
        first = modules[0]
        self.modules = list(modules)
        self.packed: torch.Tensor | None = None
        self.bias: torch.Tensor | None = None
        if all(isinstance(m, FusedLinear) and m.fused is first.fused for m in modules) \
                and len(modules) == len(first.fused.sizes):
            self.packed, self.bias = first.fused.packed, first.fused.bias
        elif len(modules) == 1 and type(first) is PackedLinear:
            self.packed, self.bias = first.packed, first.bias
        # whether oneDNN computes a lone row apart (packed.py)
        self.lone = self.packed is not None and not single_row_same(self.packed, self.bias,
                                                                     self.packed.size(1))

    def __call__(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        if self.packed is not None:
            return packed_linear(x, self.packed, self.bias, x.shape[-1], residual)
        outs = [m(x) for m in self.modules]
        out = outs[0] if len(outs) == 1 else torch.cat(outs, -1)
        return out if residual is None else residual + out


@dataclass
class _Layer:
    norm1: torch.Tensor
    norm2: torch.Tensor
    qkv: _Proj
    o: _Proj
    gate_up: _Proj
    down: _Proj
    qkn: torch.Tensor | None = None  # the q and k heads' RMSNorm weights [H + KV, d] (Qwen3)


# the same block as Llama's (Qwen2: with q/k/v biases; Qwen3: each q and k head RMS-normed
# before rotary), where every layer attends to all positions (no sliding window)
FAMILY = ("llama", "mistral", "qwen2", "qwen3")


def why_not(model: Any) -> str | None:
    """Why LeanLlama cannot stand in for this model's forward (None: it can)."""
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "model_type", None) not in FAMILY:
        return f"not a Llama-family model (config.model_type not in {FAMILY})"
    if "sliding_attention" in (getattr(cfg, "layer_types", None) or ()) or (
            getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True)):
        return "sliding-window attention"
    body = getattr(model, "model", None)
    if body is None or not hasattr(model, "lm_head") or not hasattr(body, "layers"):
        return "not a LlamaForCausalLM layout (model.model.layers, lm_head)"
    if getattr(cfg, "hidden_act", None) != "silu" or getattr(cfg, "pretraining_tp", 1) != 1:
        return "an MLP other than SiLU-gated, or pretraining_tp > 1"
    if getattr(body.rotary_emb, "rope_type", "default") not in STATIC_ROPE:
        return f"rotary type {body.rotary_emb.rope_type!r} depends on the sequence length"
    if getattr(cfg, "_attn_implementation", None) != attention.NAME:
        return f"attention {cfg._attn_implementation!r} (the lean forward is sdpa_gqa's)"
    weight = body.embed_tokens.weight  # (the linears may be int8 modules: no .weight tensor)
    if weight.dtype not in DTYPES:
        return f"weights in {weight.dtype} (the lean forward runs {', '.join(map(str, DTYPES))})"
    if weight.device.type not in DEVICES:
        return f"device {weight.device.type!r} (the lean forward runs on {', '.join(DEVICES)})"
    return None


DTYPES = (torch.float32, torch.bfloat16, torch.float16)
DEVICES = ("cpu", "cuda")


@dataclass
class _Part:
    """One Pass in a forward, as every layer reads it: its slab's first B slots from column
    n, and the parts its rows read where they live (the views of a layer: scripted.layers and
    attend make them, or `new` and LeanLlama._attend here)."""

    cache: SlabCache
    B: int  # rows
    q: int  # query tokens per row
    at: int  # its first token in the forward's residual stream
    n: int  # columns before its tokens
    bias: torch.Tensor | None  # its mask, additive, off the kernel (attention.group_bias)
    # each part some row reads [L, 2, KV, S, d], and the slots reading it [b] long (None: all)
    reads: list[tuple[torch.Tensor, torch.Tensor | None]]

    @staticmethod
    def of(p: Pass, at: int, groups: int | None, x: torch.Tensor) -> _Part:
        """Pass p whose first token is x's row `at`; groups: a key/value head's query heads,
        for its mask as a bias (None: on the kernel, none)."""
        cache, mask = p.cache, p.mask
        B, q = p.input_ids.shape
        if cache.rows != B:
            raise RuntimeError(f"slab cache of {cache.rows} rows cannot take {(B, q)}")
        if cache.table is not None and groups is not None:
            raise RuntimeError("a slab cache whose paths are in a KV pool needs the CPU "
                               "attention kernel")
        cache._room_for(q)  # (refuses a forward the slab has no room for)
        bias = None if groups is None else attention.group_bias(
            mask, B, groups, q, mask.shape[-1], x.dtype, x.device)
        return _Part(cache, B, q, at, cache.length, bias,
                     [(cache.parts[k], rows) for k, rows in cache.readers()])

    def new(self, li: int) -> torch.Tensor:
        """[B, q, 2, KV, d]: where layer li's new keys and values go."""
        return self.cache.buf[li, :, :self.B, :, self.n:self.n + self.q].permute(1, 3, 0, 2, 4)



class LeanLlama:
    """Callable like the model for the engine's forwards over a SlabCache (see module doc)."""

    def __init__(self, model: Any, *, positions: int | None = None,
                 merge: bool | None = None) -> None:
        """positions: the most a forward meets (the engine's context): the rotary table
        covers them from the start (None: on the CPU it grows when a forward's positions
        pass it, a host read of them per forward; elsewhere the model's
        max_position_embeddings);
        merge: whether Passes of several calls share a forward (`merges`): None where that
        is bit-exact (every projection packed, the attention kernel built) and on a GPU, True
        anywhere, False never."""
        if why := why_not(model):
            raise ValueError(f"LeanLlama cannot run this model: {why}")
        self.model = model
        cfg, body = model.config, model.model
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.hidden, self.inter, self.eps = cfg.hidden_size, cfg.intermediate_size, cfg.rms_norm_eps
        self.scale = body.layers[0].self_attn.scaling
        self.embed, self.norm = body.embed_tokens, body.norm.weight
        self.lm_head = _Proj([model.lm_head])
        self.layers = [_Layer(b.input_layernorm.weight, b.post_attention_layernorm.weight,
                              _Proj([b.self_attn.q_proj, b.self_attn.k_proj, b.self_attn.v_proj]),
                              _Proj([b.self_attn.o_proj]),
                              _Proj([b.mlp.gate_proj, b.mlp.up_proj]), _Proj([b.mlp.down_proj]),
                              self._qk_norms(b.self_attn))
                       for b in body.layers]
        # (a position's cos/sin do not depend on the table's length: the same bits either way)
        cpu = self.norm.device.type == "cpu"
        limit = positions or (None if cpu else getattr(cfg, "max_position_embeddings", None))
        self.grows = limit is None
        self.rope = self._table(TABLE_MIN if limit is None else max(TABLE_MIN, limit))
        # Passes of several calls share one forward on the CPU only where every projection is
        # a packed GEMM and the attention kernel serves, which compute a row the same way
        # whatever rows are beside it (MKL's F.linear, int8's per-call activation scale and
        # the per-Pass fallback's GEMMs do not): else each Pass runs alone
        projs = [self.lm_head] + [pr for la in self.layers
                                  for pr in (la.qkv, la.o, la.gate_up, la.down)]
        self.row_invariant = all(pr.packed is not None for pr in projs)
        # whether the scheduler merges Passes of several calls into one forward (see __init__)
        self.merges = (not cpu or self.row_invariant and kernel_serves(self.norm)) \
            if merge is None else merge
        # one intra-op thread a forward where sleeping workers cost more than they split
        self.threads = 1 if cpu and one_thread(weight_bytes(model)) else 0
        # scripted.post's o, gate|up and down GEMMs (packed weights, biases, lone-row flags) a
        # layer, where every projection is packed
        gemms = [(la.o, la.gate_up, la.down) for la in self.layers] if self.row_invariant else []
        self.posts = [([p.packed for p in ps], [p.bias for p in ps], [p.lone for p in ps])
                      for ps in gemms]
        # scripted.layers' weights: norm1, q|k|v (packed, bias, lone), q|k norms, norm2, post's
        self.weights = tuple(map(list, zip(*[(la.norm1, la.qkv.packed, la.qkv.bias, la.qkv.lone,
                                              la.qkn, la.norm2, *post)
                                             for la, post in zip(self.layers, self.posts)])))

    def _qk_norms(self, attn: Any) -> torch.Tensor | None:
        """The weights of attn's per-head q and k RMSNorms as one [H + KV, d] (None: none)."""
        if getattr(attn, "q_norm", None) is None:
            return None
        return torch.cat([attn.q_norm.weight.expand(self.heads, -1),
                          attn.k_norm.weight.expand(self.kv_heads, -1)])

    def _table(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin' [n, head_dim] for positions 0..n-1, from the model's rotary module.
        (Set as one tuple, whole: the scheduler's lanes may run forwards side by side.)"""
        pos = torch.arange(n, device=self.norm.device)[None]
        cos, sin = self.model.model.rotary_emb(self.norm[None, None], position_ids=pos)
        sin = sin[0].clone()
        sin[:, : self.head_dim // 2].neg_()  # roll(x, d/2) * sin' == rotate_half(x) * sin
        return cos[0].contiguous(), sin

    def handles(self, cache: Any, mask: Any) -> bool:
        return isinstance(cache, SlabCache) and cache.mask_kind == "bool" and \
            isinstance(mask, torch.Tensor) and mask.dtype == torch.bool and mask.dim() == 4

    def __call__(self, *, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                 position_ids: torch.Tensor | None = None, cache: Any = None,
                 logits_to_keep: int = 0, output_hidden_states: bool = False, **kwargs: Any
                 ) -> Any:
        cache = kwargs.pop("past_key_values", cache)  # (transformers' older name for it)
        if position_ids is None or kwargs.keys() - {"use_cache"} or \
                not self.handles(cache, attention_mask):
            return self.model(input_ids=input_ids, attention_mask=attention_mask,
                              position_ids=position_ids, logits_to_keep=logits_to_keep,
                              output_hidden_states=output_hidden_states,
                              **{cache_arg(type(self.model)): cache}, **kwargs)
        assert attention_mask is not None
        return self.forward_slab(input_ids, position_ids, cache, attention_mask,
                                 logits_to_keep, output_hidden_states)

    def forward_slab(self, ids: torch.Tensor, pos: torch.Tensor, cache: SlabCache,
                     mask: torch.Tensor, keep: int, hidden: bool) -> Output:
        """ids, pos [B, q]; mask [B, 1, q or 1, columns] bool over the slab's columns."""
        return self.forward_many([Pass(self, ids, pos, cache, mask, keep, hidden)])[0]

    def forward_many(self, passes: Sequence[Pass]) -> list[Output]:
        """Several Passes (search.runtime.passes.Pass: each its own rows, slab cache and mask)
        in one forward: every linear, norm and element-wise op runs once over all their
        tokens, attention runs per Pass on its own cache. Each Pass's output is bit for bit
        what it gets alone (those ops compute a row the same way whatever rows are beside
        it; attention sees the very tensors it would see alone)."""
        with threads_here(self.threads) if self.threads else nullcontext():
            return self._layers(passes)

    @torch.inference_mode()
    def _layers(self, parts: Sequence[Pass]) -> list[Output]:
        """parts: ids, pos [B, q], cache, mask [B, 1, q or 1, columns], keep, hidden each."""
        H, KV, d, D, inter = self.heads, self.kv_heads, self.head_dim, self.hidden, self.inter
        ids = flatten([p.input_ids for p in parts])  # [N]
        pos = flatten([p.position_ids for p in parts])  # [N]
        table = self.rope
        if self.grows and int(pos.max()) >= table[0].shape[0]:
            table = self.rope = self._table(max(2 * table[0].shape[0], int(pos.max()) + 1))
        cos, sin = table[0][pos][:, None], table[1][pos][:, None]  # [N, 1, d]
        x = self.embed(ids)  # the residual stream, [N, D]: every part's tokens, row-major
        # (the kernel reads KV pools only: a slab cache, made off the engine's CPU path by
        # kv.batch_cache, is attended per Pass)
        kernel = kernel_serves(x) and all(p.cache.pool is not None for p in parts)
        starts = accumulate((p.tokens for p in parts), initial=0)  # each part's first token
        plan = [_Part.of(p, at, None if kernel else H // KV, x) for p, at in zip(parts, starts)]
        spans = [(pt.B, pt.q, pt.at) for pt in plan]  # per part: (B, q, first)
        # per Pass: rows, query tokens, columns before (the kernel's order)
        each = ([pt.B for pt in plan], [pt.q for pt in plan], [pt.n for pt in plan])
        reads: tuple[Any, ...] = ()  # the kernel's masks, pool chunks, block tables and
        pool, owns = [], []  # own-block tables
        if kernel:
            pool, tables, owns = block_tables([pt.cache for pt in plan])
            reads = ([p.mask for p in parts], pool, tables, owns)
        if kernel and self.posts:  # every layer in one call, without the interpreter lock
            x = scripted.LAYERS(x, cos, sin, self.eps, H, KV, d, self.scale, inter,
                                *self.weights, *each, *reads)
        for li, layer in enumerate(() if kernel and self.posts else self.layers):
            qkv = layer.qkv(torch.rms_norm(x, (D,), layer.norm1, self.eps))  # [N, (H + 2 KV) d]
            if kernel:  # (the new keys and values written as scripted.layers writes them)
                qk, k, v = scripted.rope(qkv, cos, sin, H, KV, d, layer.qkn, self.eps)
                torch.ops.tts.write(k, v, li, *each, pool, owns)
                whole = torch.ops.tts.attend(qk, H, KV, self.scale, li, *each, *reads)
            else:  # (another device or dtype, or no kernel built: each Pass alone)
                qk = scripted.ROTATE_AND_WRITE(qkv, cos, sin, H, KV, d, layer.qkn, self.eps,
                                               [pt.B * pt.q for pt in plan],
                                               [pt.new(li) for pt in plan])
                whole = torch.cat([self._attend(pt, qk, li) for pt in plan])
            # (where every projection is packed, the ops and bits of scripted.post)
            x = layer.o(whole, x)  # + residual, in the GEMM
            gu = layer.gate_up(torch.rms_norm(x, (D,), layer.norm2, self.eps))  # [N, 2 I]
            x = layer.down(F.silu(gu[:, :inter]) * gu[:, inter:], x)
        for pt in plan:
            pt.cache.advance(pt.q)  # every layer's columns written
        # each part's kept positions (its rows' last `keep`), normed and through the LM head
        kept = [min(p.keep, q) if p.keep and p.keep > 0 else q for p, (_, q, _) in zip(parts, spans)]
        rows = [x] if kept == [q for _, q, _ in spans] else [  # (every position kept: x)
            x[a:a + B * q].view(B, q, D)[:, q - k:].reshape(B * k, D)
            for (B, q, a), k in zip(spans, kept)]
        last = torch.rms_norm(rows[0] if len(rows) == 1 else torch.cat(rows), (D,), self.norm,
                              self.eps)
        logits = self.lm_head(last)
        lgs, hs = per_pass(logits, kept, spans), \
            per_pass(last, kept, spans) if any(p.hidden for p in parts) else []
        return [Output(lg, (hs[i],) if p.hidden else None)
                for i, (p, lg) in enumerate(zip(parts, lgs))]

    def _attend(self, pt: _Part, qk: torch.Tensor, li: int) -> torch.Tensor:
        """One Pass's attention in layer li off the kernel -> [B q, H d]: over its rows' own
        columns (pt.bias: its mask over a group's stacked queries) and the parts they read
        (attention.tree_attend)."""
        B, H, q, d = pt.B, self.heads, pt.q, self.head_dim
        # its query heads [B, H, q, d] out of the forward's rotated q|k heads [N, H + KV, d]
        query = qk[pt.at:pt.at + B * q, :H].unflatten(0, (B, q)).transpose(1, 2)
        seen = pt.cache.buf[li, :, :B, :, :pt.n + q]  # its rows' keys, values [B, KV, columns, d]
        # the parts they read: keys, values [KV, S, d], readers [b] long or None (every row)
        reads = [(kv[li, 0], kv[li, 1], r) for kv, r in pt.reads]
        out = attention.tree_attend(query, seen[0], seen[1], pt.bias, reads, self.scale)
        return out.reshape(B * q, H * d)


def take_attention(model: Any, lean: bool = True) -> str | None:
    """Switch `model` to sdpa_gqa attention (attention.use_sdpa_gqa) -> why the lean forward
    cannot run it (why_not; "lean=False" where not `lean`; None: it can). Where `lean`, a
    model on any other attention (eager, flex, flash) is switched too, since the lean forward
    computes attention itself (their scores and sdpa's differ by rounding), and switched back
    where it cannot run."""
    impl, switched = getattr(model.config, "_attn_implementation", None), False
    if lean and impl not in ("sdpa", attention.NAME):
        with suppress(ValueError, ImportError):  # (a model transformers runs on no sdpa)
            model.set_attn_implementation("sdpa")
            switched = True
    attention.use_sdpa_gqa(model)
    note = why_not(model) if lean else "lean=False"
    if note and switched and impl is not None:
        model.set_attn_implementation(impl)
    return note


def lean_forward(model: Any, *, positions: int | None = None, merge: bool | None = None
                 ) -> LeanLlama | None:
    """The lean forward for this model (LeanLlama's options), or None where it does not
    apply (see take_attention, which switches its attention first)."""
    return None if take_attention(model) else LeanLlama(model, positions=positions, merge=merge)
