"""The transformers engine's options: one frozen HFConfig (and SpecConfig, the knobs of
speculative decoding), every rule between options checked in __post_init__.

`HFEngine(model, tok, config)` or `HFEngine(model, tok, **options)` (options are HFConfig
field names); what depends on the model itself (whether a linear could be packed) is checked
by the engine once the model is converted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import torch

from search.engines.prompts import INSTRUCTIONS  # shared with the openai and vllm engines
from search.runtime.dtypes import is_int8, kv_dtype, weight_dtype
from search.runtime.kvstore import DEFAULT_CAP
from search.runtime.kvtree import SHARE_PREFIX
from search.runtime.transfer import device_or_default


@dataclass(frozen=True)
class SpecConfig:
    """Knobs of speculative decoding: `HFEngine(..., speculate=SpecConfig(...))`."""

    max_draft: int = 8  # most draft tokens per row and verification (a tree's depth)
    first_draft: int = 8  # a chain's length when its step starts (then adapted)
    # context lengths matched, longest first; bigrams (1) and recycled candidates guess
    # almost everywhere and lose as chains, but in a tree they are siblings ranked by
    # estimated probability, nodes only where worth it (min_prob)
    ngram: tuple[int, ...] = (5, 4, 3, 2, 1)
    recycle_k: int = 8  # the model's top-k next tokens kept per token (0: no recycling)
    # draft only while active rows * (1 + draft) <= this: a compute-bound pass pays for
    # every token
    max_batch_tokens: int = 16
    table_limit: int = 1 << 20  # n-gram contexts held before the table starts afresh
    # draft trees: most nodes per row (0: a chain of up to max_draft tokens), at most
    # max_draft deep, none whose estimated path probability is below min_prob (each node
    # costs the verification pass a query token); trees accept more tokens per verification
    # than chains (reports/bench/spec.py)
    tree: int = 12
    min_prob: float = 0.07

    def __post_init__(self) -> None:
        if self.max_draft < 1 or not 1 <= self.first_draft <= self.max_draft:
            raise ValueError(f"need 1 <= first_draft <= max_draft, got {self.first_draft}, "
                             f"{self.max_draft}")
        if not self.ngram or min(self.ngram) < 1:
            raise ValueError(f"ngram must list context lengths >= 1, got {self.ngram!r}")
        if min(self.recycle_k, self.max_batch_tokens, self.tree) < 0 or self.table_limit < 1:
            raise ValueError("recycle_k, max_batch_tokens, tree must be >= 0, table_limit >= 1")
        if not 0.0 <= self.min_prob < 1.0:
            raise ValueError(f"min_prob must be in [0, 1), got {self.min_prob}")


@dataclass(frozen=True)
class HFConfig:
    """Every option of HFEngine; the defaults are the engine's."""

    # where the model runs: "cpu", "cuda", ... (None: CUDA when available, else the CPU)
    device: str | torch.device | None = None
    max_length: int | None = None  # context length (None: the model's, at most 8192)
    # prompts (search.engines.prompts.PromptFormat): the tokenizer's chat template (None:
    # when it has one), else prompt_template over the plain text; instructions per domain
    chat: bool | None = None
    system_prompt: str | None = None
    prompt_template: str = "{prompt}\n"
    instructions: Mapping[str, str] = field(default_factory=lambda: INSTRUCTIONS)
    name: str = ""  # the engine's name in reports (default: the model's name or path)
    # keep_hidden: record, per generated step, the final hidden state its last token was
    # predicted from (`step_features`), so a value head scores steps with no extra pass
    keep_hidden: bool = False
    # dtype converts the model in place (like the device move); bf16 needs a CPU with
    # native bf16 (see dtypes.bf16_native) to be fast, and changes greedy choices only
    # rarely. "int8": every nn.Linear quantised to int8 weights (per output channel) with
    # activations quantised per call (torch dynamic quantisation, fbgemm/x86 kernels; CPU
    # only): ~4x fewer weight bytes streamed per decode step; lossy, and not batch-
    # invariant (one activation scale per call), so speculation is not token-identical
    dtype: torch.dtype | str | None = None
    # the element type of the KV the engine caches and attends (None: the weights'):
    # "float16" on fp32 weights halves the bytes each attention step reads and the KV store
    # holds (its attention still computes in fp32). Lossy (keys and values rounded to fp16:
    # greedy choices may move); read only by the CPU attention kernel, so it needs the lean
    # forward on a CPU where the kernel is built (else refused)
    kv_dtype: torch.dtype | str | None = None
    # model-free speculative decoding in `expand` (spec.py), lossless: True for the
    # default SpecConfig
    speculate: bool | SpecConfig = False
    # fp32 linears on CPU (under int8, those it leaves in fp32) on oneDNN-prepacked
    # weights, faster at every batch size and batch-invariant (None: wherever it runs)
    pack: bool | None = None
    # parts of the rows' paths read where they live instead of copied into each call's batch
    # cache (kv.batch_cache): a common prefix of >= this many tokens on transformers'
    # forward; on the lean forward with tree_attention, every segment of >= this many
    # tokens and the short common ones whose tokens times the rows reach it, and on the
    # CPU's attention kernel every segment, in the KV pool; 0: every row's path copied into
    # its batch cache
    share_prefix: int = SHARE_PREFIX
    # the lean forward's rule above (kv.batch_cache(tree=True)); False: a common prefix
    # only, and on the CPU's kernel every row's path copied into pool blocks of its own
    tree_attention: bool = True
    # bytes of prompts' KV kept by token ids while no search holds them (kvstore.PromptCache:
    # least recently used out first); a prompt held or kept here is never prefilled again,
    # and on the CPU kernel a prompt that begins as one of them does computes only the rest
    prompt_cache: int = 1 << 30
    # bytes of search nodes' KV the engine keeps (kvstore.NodeStore): past it, the least
    # recently used segments no call in flight reads are dropped, leaves first, and computed
    # again, uncharged, if a call needs them (a Result is the same whatever the cap)
    kv_cache: int = DEFAULT_CAP  # 4 GiB
    # the engine's forwards over its slab cache run lean.py (the same function in fewer
    # ops) where the model is a plain Llama-family block (fp32, bf16 or fp16; CPU or CUDA);
    # False: always transformers' forward
    lean: bool = True
    # while searches share the engine (search.solve_many) their forwards merge into one
    # (lean forward only): None where that is bit-exact (the CPU's packed linears) and on a
    # GPU, where a row's logits may move by the GEMMs' rounding with the rows beside it;
    # False: each search's forwards to itself (bit for bit what it computes alone on a
    # GPU too); True: merge on the CPU without packed linears too
    merge: bool | None = None

    def __post_init__(self) -> None:
        # a read-only copy: the config stays what it was when checked
        object.__setattr__(self, "instructions", MappingProxyType(dict(self.instructions)))
        for name, low in (("max_length", 2), ("share_prefix", 0), ("prompt_cache", 0),
                          ("kv_cache", 0)):  # ints (max_length: or None; the rest: bytes)
            value = getattr(self, name)
            if (value is not None or name != "max_length") and (not isinstance(value, int)
                                                                or value < low):
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        if not isinstance(self.tree_attention, bool):
            raise TypeError(f"tree_attention must be True or False, got {self.tree_attention!r}")
        if self.merge not in (None, True, False):
            raise TypeError(f"merge must be None, True or False, got {self.merge!r}")
        if not isinstance(self.speculate, (bool, SpecConfig)):
            raise TypeError(f"speculate must be a bool or a SpecConfig, got {self.speculate!r}")
        int8 = is_int8(self.dtype)
        floating = None if int8 else weight_dtype(self.dtype)  # a clear error for a bad name
        if int8 and self.torch_device.type != "cpu":
            raise ValueError("dtype='int8' is a CPU path (torch dynamic quantisation); "
                             f"this engine is on {self.torch_device}")
        # the weights as far as the config knows them (the engine checks the model's own)
        if kv_dtype(self.kv_dtype, floating or torch.float32, self.torch_device.type) and int8:
            raise ValueError(f"kv_dtype={self.kv_dtype!r}: the KV is kept in the weights' "
                             "dtype beside int8 linears, float16 only beside fp32 weights")
        if self.pack and (self.torch_device.type != "cpu"
                          or floating not in (None, torch.float32)):
            raise ValueError("pack=True, but no linear layer could be packed: it needs fp32 "
                             "weights on a CPU whose torch has oneDNN")

    @property
    def torch_device(self) -> torch.device:
        """The device the engine runs on (None resolved: CUDA when available)."""
        return device_or_default(self.device)

    @property
    def spec(self) -> SpecConfig | None:
        """Speculation's knobs, None when it is off."""
        return SpecConfig() if self.speculate is True else self.speculate or None

    @classmethod
    def of(cls, config: HFConfig | None = None, **options: Any) -> HFConfig:
        """`config`, or the defaults, with `options` (HFConfig field names) on top; options
        beside a config must not contradict it."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - names)
        if unknown:
            raise TypeError(f"unknown engine option(s) {', '.join(unknown)}; the options are "
                            f"HFConfig's fields: {', '.join(sorted(names))}")
        if config is None:
            return cls(**options)
        if not isinstance(config, HFConfig):
            raise TypeError(f"config must be an HFConfig, got {type(config).__name__}")
        clash = sorted(k for k, v in options.items() if not _same(getattr(config, k), v))
        if clash:
            raise ValueError(f"option(s) {', '.join(clash)} given beside a config that says "
                             f"otherwise; change the config (dataclasses.replace) instead")
        return config


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return dict(a) == dict(b)
    return a is b or a == b
