"""An engine over any server that speaks the OpenAI *completions* API: vLLM, SGLang, llama.cpp's
llama-server, llama-cpp-python's server, TGI.

    engine = OpenAIEngine("http://127.0.0.1:8080/v1", "my-model", tokenizer=tok)
    search.solve(problem, "beam", engine=engine)
    search.solve(problem, "beam", engine="openai:http://127.0.0.1:8080/v1#my-model")

A call sends one POST /completions per node (its `n` samples in one request), all of a call's
requests concurrently (http_pool.py: a concurrency limit, retries with backoff on 429, 5xx,
timeouts and truncated answers, a clear ServerError after the last). The prompt is text:
the problem's prompt (the tokenizer's chat template when one is given, else `template`) plus
the node's steps. Where a server ignores `n` (llama-cpp-python answers one choice) or refuses
it (llama-server, n above its slots: HTTP 400), the samples come from separate requests, as
they do from then on; any other number of choices is an error. Seeds: request seeds derive from the call's seed, the row
and the sample, so one seed gives one result wherever the server is deterministic.

Prefix reuse is the server's, not this engine's: it keeps no KV cache.
A child's prompt extends its parent's, so a server with prefix caching (vLLM
--enable-prefix-caching, SGLang's radix cache, llama.cpp's slot cache) reuses the shared
prefix. Accounting is the server's own count, per request, failed attempts excluded:
completion_tokens are generated tokens; prefill is the prompt tokens the server says it
evaluated (server_usage.prompt_counts: llama-server's timings.prompt_n, else
prompt_tokens less prompt_tokens_details.cached_tokens); a server that says neither
(llama-cpp-python) is charged every prompt token, an upper bound counted in
server_stats["prompt_cache_unreported"]. Forward passes: one prefill pass plus one per token of
the longest answer of a call. FLOPs: 2 * n_params per evaluated token, n_params as given, else
the server's (llama-server's meta.n_params), else from a local config of the tokenizer's or the
served model; unknown, FLOPs stay 0 (server_stats["flops_uncounted_tokens"]). server_stats are
totals since the engine was made; each solve's own (its Meter's: concurrent searches on one
engine keep them apart; the pool's retries are in the totals only) are in Result.stats["server"].

Steps need per-token logprobs (requested as logprobs=1): a step's probability and length come
from them (llama-cpp-python serves them with --logits_all true); a choice without them is an
error, never a step of probability one. The server returns token *strings*: the engine numbers
the distinct strings it has seen, so token ids are consistent within one engine (equal id,
equal string; `decode` joins them) but are not the model's vocabulary ids, and a root's
prompt_ids are empty (the server tokenises the prompt and reports its count).

OpenAI servers cut a stop string off the text; a step keeps it, as the transformers engine
does, taken from the returned tokens (which include it) or from the server's stop_reason
(vLLM) / matched_stop (SGLang); those fields, or else whether a stop string is in the tokens,
tell a stop string from EOS. finish_reason "length" is "max_tokens" when the step has max_tokens
tokens, else "length" (the server's context is full).

Token-level moves: `topk_next` asks for one token with the top-k logprobs; `extend` and
`next_logprobs` of tokens that a topk_next call returned reuse its numbers. Other teacher-forced
log-probabilities need the server to echo prompt logprobs (echo=True: vLLM, llama-cpp-python
with --logits_all); without it those calls raise NotImplementedError.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from search.engines.base import DEFAULT_STOP, budget_child, check_expand, server_cap, subseed
from search.engines.openai import server_usage as usage_of
from search.engines.openai.http_pool import HTTPPool, RetryPolicy, ServerError
from search.engines.prompts import PromptFormat
from search.session import Bindable
from search.types import Node, Problem, Step

__all__ = ["OpenAIEngine", "parse_spec"]


PLAIN, RETRY = PromptFormat(), RetryPolicy()  # default prompt format and retry policy


def parse_spec(spec: str) -> tuple[str, str | None]:
    """"openai:http://host:port/v1#model" -> (base URL, model or None)."""
    if not spec.startswith("openai:"):
        raise ValueError(f"an OpenAI engine name looks like openai:http://host:port/v1#model, "
                         f"got {spec!r}")
    url, _, model = spec[len("openai:"):].partition("#")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"{spec!r}: the server address must start with http:// or https://")
    return url.rstrip("/"), model or None


class OpenAIEngine(Bindable):
    """The Engine protocol over an OpenAI-compatible completions server (see module doc).

    extra_body: fields added to every request, e.g. {"top_k": 0, "min_p": 0.0} to turn off a
    llama.cpp server's default truncation, so samples follow temperature and top_p alone.
    n_mode: "auto" (ask for n, fall back when the server ignores it), "native", "separate".
    """

    concurrent = True  # safe to share between searches in threads

    def __init__(self, base_url: str, model: str | None = None, *, tokenizer: Any = None,
                 prompt: PromptFormat = PLAIN, api_key: str | None = None,
                 concurrency: int = 16, retry: RetryPolicy = RETRY,
                 extra_body: Mapping[str, Any] | None = None, n_mode: str = "auto",
                 echo: bool = False, n_params: int | None = None, name: str = "") -> None:
        if n_mode not in ("auto", "native", "separate"):
            raise ValueError(f"n_mode must be auto, native or separate, got {n_mode!r}")
        self.base_url, self.model = base_url.rstrip("/"), model
        self.tokenizer, counted = _tokenizer(tokenizer)
        self.prompt, self.echo, self.n_params = prompt, echo, n_params or counted
        # where n_params came from; None: not looked up yet (the first request does)
        self.n_params_source = "given" if n_params else (
            f"the tokenizer's model {tokenizer}" if counted else None)
        self._tokenizer_name = tokenizer if isinstance(tokenizer, str) else None
        self.extra_body = dict(extra_body or {})
        self.native_n: bool | None = {"auto": None, "native": True, "separate": False}[n_mode]
        self.name = name or f"openai:{self.base_url}#{model or ''}"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        self.pool = HTTPPool(concurrency=concurrency, policy=retry, headers=headers)
        self.server_stats: Counter[str] = Counter()
        self._lock = threading.Lock()  # token ids and server_stats, shared by search threads
        self._pieces: dict[str, int] = {}  # token string -> engine-local id
        self._texts: list[str] = []  # engine-local id -> token string
        self._prompts: weakref.WeakKeyDictionary[Node, str] = weakref.WeakKeyDictionary()
        # logprobs of next tokens a topk_next call has seen, so forcing one costs no request
        self._next: weakref.WeakKeyDictionary[Node, dict[int, float]] = \
            weakref.WeakKeyDictionary()

    @classmethod
    def from_spec(cls, spec: str, **kwargs: Any) -> OpenAIEngine:
        url, model = parse_spec(spec)
        return cls(url, model, **{"name": spec, **kwargs})

    def close(self) -> None:
        self.pool.close()

    # -- prompts and tokens ----------------------------------------------------------------
    def root(self, problem: Problem) -> Node:
        node = Node(problem=problem, prompt_ids=())
        self._prompts[node] = self.prompt.text(problem, self.tokenizer)
        return self.session.kv.add(node)

    def _text(self, node: Node) -> str:
        """What the model has seen at `node`: the rendered prompt and every step's text."""
        root = node.root
        if root not in self._prompts:  # a root made by another engine
            self._prompts[root] = self.prompt.text(root.problem, self.tokenizer)
        return self._prompts[root] + node.text

    def _id(self, piece: str) -> int:
        with self._lock:
            if piece not in self._pieces:
                self._pieces[piece] = len(self._texts)
                self._texts.append(piece)
            return self._pieces[piece]

    def decode(self, token_ids: Sequence[int]) -> str:
        try:
            return "".join(self._texts[i] for i in token_ids)
        except IndexError:
            raise ValueError("token ids this engine never returned") from None

    # -- requests --------------------------------------------------------------------------
    def _models(self) -> list[dict[str, Any]]:
        """The server's GET /models entries ([] when it lists none)."""
        resp = self.pool.get(f"{self.base_url}/models")
        try:
            data = resp.json()["data"] if resp.status_code == 200 else None
        except (ValueError, KeyError, TypeError):
            data = None
        return [d for d in data if isinstance(d, dict)] if isinstance(data, list) else []

    def _body(self, prompt: str, **fields: Any) -> dict[str, Any]:
        if self.model is None:  # a server's one model, found once
            listed = self._models()
            if not listed:
                raise ServerError(f"GET {self.base_url}/models: no model listed; give the "
                                  "model name")
            self.part.model = str(listed[0]["id"])
        if self.n_params_source is None:
            self._learn_n_params()
        return {"model": self.model, "prompt": prompt, **self.extra_body, **fields}

    def _learn_n_params(self) -> None:
        """n_params from the server (llama-server's meta.n_params), else from the config of
        the tokenizer's model or of the model the server names (vLLM's root), found locally;
        tried once."""
        self.part.n_params_source = "unknown"
        try:
            listed = self._models()
        except ServerError:
            listed = []
        found = [d for d in listed if d.get("id") == self.model] or listed
        entry: Mapping[str, Any] = found[0] if found else {}
        meta: Mapping[str, Any] = entry["meta"] if isinstance(entry.get("meta"), dict) else {}
        if isinstance(meta.get("n_params"), int) and meta["n_params"] > 0:
            self.part.n_params, self.part.n_params_source = int(meta["n_params"]), "server"
            return
        for name in (self._tokenizer_name, entry.get("root"), self.model):
            if isinstance(name, str) and (count := usage_of.params_from_config(name)):
                self.part.n_params, self.part.n_params_source = count, f"config of {name}"
                return

    def _count(self, **counts: int) -> None:
        """Add to server_stats (every search's) and to the calling search's own meter, which
        concurrent searches keep apart (solve reports it in Result.stats["server"])."""
        with self._lock:
            self.server_stats.update(counts)
        self.meter.charge_server(counts)

    def _send(self, bodies: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """POST every body; charge the meter from each answer's usage; raise if any failed
        (after charging the answers that came back: nothing computed goes uncounted)."""
        answers = self.pool.post_many(f"{self.base_url}/completions", bodies)
        good = [a for a in answers if not isinstance(a, ServerError)]
        counts, longest = usage_of.tally(good)
        evaluated, completion = counts["prompt_tokens_evaluated"], counts["completion_tokens"]
        processed = evaluated + completion
        self._count(requests=len(good), **counts,
                    flops_uncounted_tokens=0 if self.n_params else processed)
        with self._lock:
            self.server_stats["retries"] = self.pool.retried  # the pool's, for every thread
        if good:
            self.meter.charge_model(generated=completion, prefill=evaluated,
                                    passes=1 + longest,
                                    flops=2.0 * (self.n_params or 0) * processed)
        failed = [a for a in answers if isinstance(a, ServerError)]
        if failed:
            raise ServerError(f"{len(failed)} of {len(bodies)} requests failed: {failed[0]}")
        return good  # type: ignore[return-value]

    # -- the protocol ----------------------------------------------------------------------
    def expand(self, nodes: Sequence[Node], n: int = 1, *, stop: Sequence[str] | None = DEFAULT_STOP,
               max_tokens: int = 256, temperature: float = 1.0, top_p: float = 1.0,
               seed: int = 0) -> list[list[Node]]:
        nodes, stops = check_expand(nodes, n, max_tokens, temperature, top_p), list(stop or ())
        max_tokens = server_cap(self.meter, len(nodes) * n, max_tokens)  # within the budget
        if not max_tokens:
            return [[budget_child(node) for _ in range(n)] for node in nodes]

        def body(row: int, j: int, k: int) -> dict[str, Any]:
            # sample j of a row: seed subseed(seed, row), then (seed, row, j) for j > 0, so a
            # server that ignores n gives the same steps whether or not that was known yet
            s = subseed(seed, row) if j == 0 else subseed(seed, row, j)
            return self._body(self._text(nodes[row]), n=k, max_tokens=max_tokens,
                              temperature=temperature, top_p=top_p, stop=stops or None,
                              logprobs=1, seed=s)

        wave = [(i, 0, body(i, 0, n)) for i in range(len(nodes))] if self.native_n is not False \
            else [(i, j, body(i, j, 1)) for i in range(len(nodes)) for j in range(n)]
        got: list[dict[int, dict[str, Any]]] = [{} for _ in nodes]
        while wave:
            try:
                answers = self._send([b for _, _, b in wave])
            except ServerError as err:  # llama-server refuses n above its slot count (HTTP 400)
                if self.native_n is not None or n == 1 or "HTTP 400" not in str(err):
                    raise
                self.part.native_n = False
                self._count(n_refused=1)
                wave = [(i, j, body(i, j, 1)) for i in range(len(nodes)) for j in range(n)]
                continue
            more = []
            for (i, j, b), data in zip(wave, answers):
                choices = usage_of.choices(data, b["n"], may_ignore_n=self.native_n is not True)
                if len(choices) < b["n"]:  # the server ignored n: ask for the rest one by one
                    self.part.native_n = False
                    self._count(n_ignored=1)
                    more += [(i, k, body(i, k, 1)) for k in range(1, b["n"])]
                got[i].update((j + k, c) for k, c in enumerate(choices))
            wave = more
        return [[Node(parent=node, step=self._step(got[i][j], stops, max_tokens))
                 for j in range(n)] for i, node in enumerate(nodes)]

    def _step(self, choice: Mapping[str, Any], stops: Sequence[str], max_tokens: int) -> Step:
        tokens, values, _ = usage_of.token_logprobs(choice)
        if any(v is None for v in values):
            raise ServerError(f"a generated token has no logprob: {str(choice)[:300]}")
        text, reason = usage_of.step_end(choice, tokens, stops, max_tokens)
        return Step(text, tuple(self._id(t) for t in tokens), tuple(map(float, values)), reason)

    def topk_next(self, nodes: Sequence[Node], k: int) -> list[list[tuple[int, float]]]:
        if k < 1:
            raise ValueError(f"k must be positive, got {k}")
        bodies = [self._body(self._text(node), n=1, max_tokens=1, temperature=0.0, logprobs=k,
                             seed=0) for node in nodes]
        out = []
        for node, data in zip(nodes, self._send(bodies)):
            choice = usage_of.choices(data, 1, may_ignore_n=False)[0]
            _, _, lp = usage_of.token_logprobs(choice)
            top = (lp.get("top_logprobs") or [None])[0]
            if not isinstance(top, dict) or not top:
                raise ServerError(f"no top logprobs in the answer: {str(choice)[:300]}")
            ranked = sorted(((self._id(t), float(v)) for t, v in top.items()),
                            key=lambda p: -p[1])[:k]
            self._next.setdefault(node, {}).update(ranked)
            out.append(ranked)
        return out

    def extend(self, nodes: Sequence[Node], continuations: Sequence[str | Sequence[int]], *,
               generated: bool = False) -> list[Node]:
        del generated  # the server's counts are charged, whatever the tokens were
        if len(nodes) != len(continuations):
            raise ValueError("extend needs one continuation per node")
        out: list[Node] = []
        for node, cont in zip(nodes, continuations):
            ids = None if isinstance(cont, str) else [int(t) for t in cont]
            seen = self._next.get(node, {})
            if ids is not None and len(ids) == 1 and ids[0] in seen:
                step = Step(self.decode(ids), tuple(ids), (seen[ids[0]],), "forced")
            else:
                text = cont if isinstance(cont, str) else self.decode(ids or ())
                if not text:
                    raise ValueError("extend: an empty continuation")
                pieces, lps = self._forced(node, text, "extend")
                step = Step(text, tuple(map(self._id, pieces)), tuple(lps), "forced")
            out.append(Node(parent=node, step=step))
        return out

    def next_logprobs(self, nodes: Sequence[Node], token_ids: Sequence[int]) -> list[list[float]]:
        out = []
        for node in nodes:
            seen = self._next.get(node, {})
            out.append([seen[t] if t in seen else
                        math.fsum(self._forced(node, self.decode([t]), "next_logprobs")[1])
                        for t in token_ids])
        return out

    def _forced(self, node: Node, text: str, method: str) -> tuple[list[str], list[float]]:
        """The server's tokens of `text` after `node` and their logprobs (echoed prompt)."""
        if not self.echo:
            raise NotImplementedError(
                f"OpenAIEngine.{method}: teacher-forced log-probabilities need a server that "
                "echoes prompt logprobs (echo=True: vLLM, llama-cpp-python with --logits_all "
                "true); without echo only tokens returned by topk_next can be forced")
        prefix = self._text(node)
        data = self._send([self._body(prefix + text, n=1, max_tokens=1, temperature=0.0,
                                      logprobs=1, echo=True, seed=0)])[0]
        choice = usage_of.choices(data, 1, may_ignore_n=False)[0]
        tokens, values, _ = usage_of.token_logprobs(choice)
        # drop the generated token(s), then keep the shortest tail of the echoed prompt that
        # covers the continuation (counted from the end: the server may render the prompt's
        # special tokens differently, the continuation's characters it does not)
        extra = int((data.get("usage") or {}).get("completion_tokens", 1))
        tokens, values = tokens[:len(tokens) - extra], values[:len(values) - extra]
        start, covered = len(tokens), 0
        while start > 0 and covered < len(text):
            start -= 1
            covered += len(tokens[start])
        if covered < len(text) or any(v is None for v in values[start:]):
            raise ServerError(f"the echoed prompt has no logprobs for {text!r}")
        return tokens[start:], [float(v) for v in values[start:]]

    def cache_metrics(self) -> dict[str, float]:
        """The server's prefix-cache counters from its Prometheus /metrics (vLLM, SGLang);
        empty when it has none."""
        root = self.base_url[:-3] if self.base_url.endswith("/v1") else self.base_url
        try:
            resp = self.pool.get(f"{root}/metrics")
        except ServerError:
            return {}
        return usage_of.cache_counters(resp.text) if resp.status_code == 200 else {}


def _tokenizer(tokenizer: Any) -> tuple[Any, int | None]:
    """A tokenizer object as given, or one loaded by embedded name, path or Hugging Face id
    (used only to render chat templates); with its model's parameter count where the model
    was loaded for it (an embedded name)."""
    if tokenizer is None or not isinstance(tokenizer, str):
        return tokenizer, None
    from search.models import embedded, load_model

    if tokenizer in embedded():
        model, tok, _ = load_model(tokenizer)
        return tok, int(sum(p.numel() for p in model.parameters()))
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer), None
