"""The transformers engine (`HFEngine`, engine.py) and its internals, one module each:

  config.py     HFConfig and SpecConfig: every option, its rules checked in one place
  kvtree.py     a model's KV segments over search trees (computed once, freed by retain)
  kv.py         segments and the batch caches of a forward (in-place slab, shared prefix)
  attention.py  grouped-query and cascade attention over those caches
  packed.py     oneDNN-prepacked linear layers (fp32 on CPU)
  lean.py       Llama-family forward in fewer ops, over the slab cache
  dtypes.py     weight dtypes: names, the int8 path, native bf16
  decode.py     one call's decoding: DecodeState, the stop rule, the plain loop
  spec.py       speculative decoding (drafter.py: its model-free drafts)

`from search.engines.hf import HFEngine` is the way in; other engines (openai, vllm, fake)
live beside this package, with what they share with it (sched, sampling, prompts, base).
"""

from search.engines.hf.config import HFConfig, SpecConfig
from search.engines.hf.engine import HFEngine

__all__ = ["HFConfig", "HFEngine", "SpecConfig"]
