"""Search as a service: an OpenAI-compatible server in front of the searches.

    python -m search.serve --model tiny-arith --scorer steps --algo beam --port 8000

loads the engine (and a PRM scorer) once and serves POST /v1/chat/completions and
POST /v1/completions as the OpenAI API defines them, GET /v1/models and GET /health. A request
picks its search in extra fields (algo, knobs, scorer, budget; seed is the API's own), the
server's defaults fill what it leaves out, and a request with none of them is plain sampling,
so any OpenAI client works unchanged. Concurrent requests share the engine through the
driver behind search.solve_many (search.serve.service). docs/serve.md has the whole contract.

Needs the `serve` extra (FastAPI, uvicorn): pip install -e '.[serve]'.
"""

from search.serve.plan import BadRequest, Defaults, Plan, plan

__all__ = ["BadRequest", "Defaults", "Plan", "plan"]
