"""Results -> OpenAI response objects: a completion, its stream chunks, its usage.

Each choice is one search's Result: its chosen text (cut before the first `stop` string),
finish_reason "stop" when the chosen path finished (or a stop string cut it); where the budget
(max_tokens or any other limit) ended the search before a path was chosen, its best partial
path (the highest-scoring unfinished one, search.select.best_partial: the text so far, as an
OpenAI endpoint returns it) with finish_reason "length"; and an extra `search` field with the
search's status, answer, selected_by, score, seed and full Usage. `usage` counts as the API does: prompt_tokens once
per prompt, completion_tokens every token the searches generated (as OpenAI counts a
reasoning model's hidden tokens, with completion_tokens_details.reasoning_tokens the ones not
in the returned texts), and `usage.search` the full Usage summed over the choices.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from search.engines.base import Engine
from search.select import best_partial
from search.serve.plan import Plan
from search.types import Candidate, Node, Result, Usage


@dataclass(frozen=True)
class Choice:
    """What one Result answers: its text (stop applied), why it ended, its tokens."""

    index: int
    result: Result
    text: str
    finish_reason: str
    tokens: tuple[tuple[str, float], ...]  # the returned text's tokens and their logprobs
    path_tokens: int  # the chosen path's generated tokens (all of it, before any stop cut)

    @classmethod
    def of(cls, index: int, result: Result, plan: Plan, engine: Engine) -> Choice:
        shown = shown_candidate(result)
        node = node_of(result, shown)
        text = shown_text(result, shown)
        cut = min((i for s in plan.stop if (i := text.find(s)) >= 0), default=-1)
        if cut >= 0:
            text, reason = text[:cut], "stop"
        else:
            finished = shown.finished if shown is not None else result.status == "ok"
            reason = "stop" if finished else "length"
        steps = node.steps() if node is not None else []
        tokens: list[tuple[str, float]] = []
        if plan.logprobs:
            at = 0
            for step in steps:
                for tid, lp in zip(step.token_ids, step.logprobs):
                    piece = engine.decode([tid])
                    if at + len(piece) > len(text):  # past a stop string's cut
                        break
                    tokens.append((piece, float(lp)))
                    at += len(piece)
        path = sum(len(s.token_ids) for s in steps)
        if plan.echo:
            text = result.tree.problem.prompt + text
        return cls(index, result, text, reason, tuple(tokens), path)

    def extra(self) -> dict[str, Any]:
        """The choice's `search` field."""
        r = self.result
        return {"status": r.status, "answer": r.answer, "selected_by": r.selected_by,
                "score": r.score if math.isfinite(r.score) else None, "seed": r.seed,
                "candidates": len(r.candidates), "usage": r.usage.as_dict()}

    def logprobs(self, chat: bool) -> dict[str, Any]:
        """The choice's logprobs object: the returned text's tokens, no alternatives."""
        if chat:
            return {"content": [{"token": t, "logprob": lp, "bytes": list(t.encode()),
                                 "top_logprobs": []} for t, lp in self.tokens],
                    "refusal": None}
        offsets, at = [], 0
        for t, _ in self.tokens:
            offsets.append(at)
            at += len(t)
        return {"tokens": [t for t, _ in self.tokens],
                "token_logprobs": [lp for _, lp in self.tokens], "top_logprobs": None,
                "text_offset": offsets}


def shown_candidate(result: Result) -> Candidate | None:
    """The candidate a choice shows: the chosen one (whose text is the Result's), else the
    best partial path where a budget cut the search before a path was chosen; None where
    there is neither."""
    if result.text:
        chosen = [c for c in result.candidates if c.text == result.text]
        return next((c for c in chosen if c.finished), chosen[0] if chosen else None)
    return best_partial(result.candidates)


def shown_text(result: Result, shown: Candidate | None = None) -> str:
    """The text a choice shows (before any stop cut): the Result's, else (no answer) its
    shown candidate's (shown_candidate, computed here unless given)."""
    if result.text:
        return result.text
    shown = shown or shown_candidate(result)
    return shown.text if shown is not None else ""


def node_of(result: Result, cand: Candidate | None) -> Node | None:
    """The candidate's node in the Result's tree (None for none)."""
    if cand is None:
        return None
    return next((n for n in result.tree.walk() if n.id == cand.node_id), None)


def usage(choices: Sequence[Choice]) -> dict[str, Any]:
    """The response's usage (see the module doc)."""
    prompts = {id(c.result.tree.problem): len(c.result.tree.prompt_ids) for c in choices}
    generated = sum(c.result.usage.generated_tokens for c in choices)
    shown = sum(c.path_tokens for c in choices)
    total = sum((c.result.usage for c in choices), Usage())
    return {"prompt_tokens": sum(prompts.values()), "completion_tokens": generated,
            "total_tokens": sum(prompts.values()) + generated,
            "completion_tokens_details": {"reasoning_tokens": max(0, generated - shown)},
            "search": total.as_dict()}


def search_info(plan: Plan, results: Sequence[Result]) -> dict[str, Any]:
    """The response's `search` field: what ran (the knobs with every value, as Result.knobs)."""
    first = results[0] if results else None
    return {"algo": plan.algo, "knobs": dict(first.knobs) if first else dict(plan.knobs),
            "scorer": first.scorer if first else plan.scorer,
            "budget": plan.budget.limits() if plan.budget else {}}


@dataclass(frozen=True)
class Reply:
    """The response's fixed parts: its id, creation time, model, and kind."""

    chat: bool
    model: str
    id: str
    created: int

    @classmethod
    def new(cls, chat: bool, model: str) -> Reply:
        prefix = "chatcmpl" if chat else "cmpl"
        return cls(chat, model, f"{prefix}-{uuid.uuid4().hex}", int(time.time()))

    def _head(self, chunk: bool) -> dict[str, Any]:
        kind = ("chat.completion.chunk" if chunk else "chat.completion") if self.chat \
            else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model,
                "system_fingerprint": None}

    def _choice(self, c: Choice, plan: Plan) -> dict[str, Any]:
        lp = c.logprobs(self.chat) if plan.logprobs else None
        body = {"message": {"role": "assistant", "content": c.text, "refusal": None}} \
            if self.chat else {"text": c.text}
        return {"index": c.index, **body, "logprobs": lp, "finish_reason": c.finish_reason,
                "search": c.extra()}

    def completion(self, plan: Plan, choices: Sequence[Choice]) -> dict[str, Any]:
        """The whole (non-streamed) response."""
        return {**self._head(False), "choices": [self._choice(c, plan) for c in choices],
                "usage": usage(choices),
                "search": search_info(plan, [c.result for c in choices])}

    def chunk(self, index: int, *, text: str | None = None, role: bool = False,
              finish: Choice | None = None, plan: Plan | None = None) -> dict[str, Any]:
        """One stream chunk of choice `index`: its role, a piece of its text, or its end
        (finish_reason, logprobs and the `search` field)."""
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant"} if role else {}
            if text is not None:
                delta["content"] = text
            body: dict[str, Any] = {"delta": delta}
        else:
            body = {"text": text or ""}
        choice: dict[str, Any] = {"index": index, **body, "logprobs": None,
                                  "finish_reason": None}
        if finish is not None and plan is not None:
            choice.update(finish_reason=finish.finish_reason, search=finish.extra(),
                          logprobs=finish.logprobs(self.chat) if plan.logprobs else None)
        return {**self._head(True), "choices": [choice]}

    def usage_chunk(self, plan: Plan, choices: Sequence[Choice]) -> dict[str, Any]:
        """The last chunk when stream_options.include_usage: no choices, the usage."""
        return {**self._head(True), "choices": [], "usage": usage(choices),
                "search": search_info(plan, [c.result for c in choices])}


def pieces(text: str) -> list[str]:
    """A text cut into the pieces a stream sends: its lines, each with its line break."""
    return text.splitlines(keepends=True) or [""]


def error_body(message: str, status: int, param: str | None = None) -> Mapping[str, Any]:
    """The API's error object."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    code = {404: "model_not_found", 413: "request_too_large", 503: "unavailable"}.get(status)
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}
