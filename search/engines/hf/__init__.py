"""The transformers engine (HFEngine, engine.py) and its internals."""

from search.engines.hf.engine import HFEngine

__all__ = ["HFEngine"]
