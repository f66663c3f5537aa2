"""The engine over an OpenAI-compatible completions server, one module each:

  engine.py        OpenAIEngine: the Engine protocol over POST /completions (see its doc)
  http_pool.py     concurrent JSON requests with retries (RetryPolicy, ServerError)
  server_usage.py  what a server says it computed: prompt tokens evaluated, parameters, logprobs

`from search.engines.openai import OpenAIEngine` is the way in; `search.solve(...,
engine="openai:URL#MODEL")` builds one through parse_spec.
"""

from search.engines.openai.engine import OpenAIEngine, parse_spec
from search.engines.openai.http_pool import RetryPolicy, ServerError

__all__ = ["OpenAIEngine", "RetryPolicy", "ServerError", "parse_spec"]
