"""The transformers engine (`HFEngine`, engine.py) and what only it uses, one module each:

  config.py     HFConfig and SpecConfig: every option, its rules checked in one place
  decode.py     one call's decoding: the stop rule, the one loop (plain and speculative)
  spec.py       speculative decoding (drafter.py: its model-free drafts)

The torch machinery it shares with model-based scorers (KV tree, caches, attention, packed
linears, lean forward, dtypes, scheduler, sampling) is search.runtime.
`from search.engines.hf import HFEngine` is the way in; other engines (openai/, vllm, fake)
live beside this package, with what they share with it (prompts, base).
"""

from search.engines.hf.config import HFConfig, SpecConfig
from search.engines.hf.engine import HFEngine

__all__ = ["HFConfig", "HFEngine", "SpecConfig"]
