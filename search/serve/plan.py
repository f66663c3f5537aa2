"""An OpenAI request body -> a Plan: the searches it asks for, checked as search.solve checks
them (the same functions, so the same messages), before any search starts.

Standard fields mean what the OpenAI API says, mapped onto a search:

    n                  n choices: n searches with seeds seed, seed + 1, ...
    seed               the first search's seed (default: the server's, 0 unless set)
    temperature, top_p the algorithm's knobs of those names (400 where it has none)
    max_tokens         a cap on every token the search generates (as OpenAI counts a reasoning
                       model's hidden tokens): Budget.tokens, the smaller of the two if both
    stop               the returned text ends before the first stop string (the search itself
                       runs on; its cost counts in usage)
    logprobs           the chosen path's sampled tokens and their log-probabilities (no
                       alternatives: top_logprobs > 0 is refused)
    stream             the chosen text as SSE chunks once the search ends, progress before it

The search's own fields (extra fields of the body): algo, knobs, scorer, budget ({tokens,
seconds, scorer_calls, flops, reserve}), step_delimiter and answer_pattern. Fields absent take
the server's defaults (Defaults); with no --algo the default is plain sampling: best_of_n with
one sample.

The prompt is what the model reads (Reading): a model with a chat template gets the request's
messages as they are (system and earlier turns included, no instruction added), a text prompt
as its text stands; a model without one gets one user message or prompt through its own plain
template. Steps end at `step_delimiter`, else at what the model declares (search.models.Form),
else nowhere but the step's token cap; the answer is what `answer_pattern` matches, else what
the model's declared domain reads (tiny-arith: "The answer is N."), else the whole reply
(search.serve.text).
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from search import registry
from search.api import check_run, check_scorer
from search.engines.prompts import PROMPT_FORM, RAW
from search.models import Form
from search.serve.text import ANSWER_PATTERN, TEXT, pattern
from search.types import Budget, Problem

SAMPLE = ("best_of_n", {"n": 1, "select": "vote"})  # plain sampling: one path, nothing to pick
SEARCH_FIELDS = ("algo", "knobs", "scorer", "budget", "step_delimiter", "answer_pattern")
COMMON = ("model", "n", "seed", "temperature", "top_p", "max_tokens", "stop", "stream",
          "stream_options", "user", "metadata", "store", "service_tier", "presence_penalty",
          "frequency_penalty", "logit_bias") + SEARCH_FIELDS
CHAT = COMMON + ("messages", "max_completion_tokens", "logprobs", "top_logprobs",
                 "response_format", "tools", "tool_choice", "parallel_tool_calls")
TEXT_FIELDS = COMMON + ("prompt", "logprobs", "echo", "suffix", "best_of")
MAX_STOPS = 4  # as the API allows


TOKEN_CAPS = ("max_tokens", "max_completion_tokens")  # the API's names for a hard token cut


class BadRequest(ValueError):
    """A request the server refuses: status (400, 404, 413) and the message it answers."""

    def __init__(self, message: str, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.param = status, param


@dataclass(frozen=True)
class Defaults:
    """The server's choices for requests that leave them out (`python -m search.serve`)."""

    algo: str | None = None  # None: plain sampling (SAMPLE)
    knobs: Mapping[str, Any] = field(default_factory=dict)
    scorer: str | None = None
    budget: Budget | None = None
    seed: int = 0
    max_n: int = 16  # choices one request may ask for


@dataclass(frozen=True)
class Reading:
    """How the served model reads a request: chat_template (its tokenizer has one); form:
    the text it was trained on, where it declares one (search.models.form_of)."""

    chat_template: bool = True
    form: Form | None = None


@dataclass(frozen=True)
class Plan:
    """One request's searches: every (problem, seed) in `runs` is one choice, in order."""

    chat: bool  # /v1/chat/completions (else /v1/completions)
    runs: tuple[tuple[Problem, int], ...]
    algo: str
    knobs: Mapping[str, Any]
    scorer: str | None  # the scorer to use (None: search.solve's default)
    budget: Budget | None
    stop: tuple[str, ...] = ()
    logprobs: bool = False
    stream: bool = False
    include_usage: bool = False  # stream_options.include_usage
    echo: str | None = None  # /v1/completions with echo: the prompt, put before each text
    # max_tokens is a hard cut as the API defines it (finish_reason "length"), so a search
    # capped by it runs as given; a `budget` alone is fitted as search.solve fits it
    fit_budget: bool = True


def plan(body: Mapping[str, Any], *, chat: bool, models: Sequence[str],
         defaults: Defaults, reading: Reading = Reading()) -> Plan:
    """The Plan of a parsed request body, or BadRequest naming what is wrong. reading: how
    the served model reads its prompts (see the module doc)."""
    if not isinstance(body, Mapping):
        raise BadRequest(f"the request body must be a JSON object, got {type(body).__name__}")
    _known_fields(body, CHAT if chat else TEXT_FIELDS)
    _check_model(body.get("model"), models)
    _refuse_unsupported(body, chat)
    kind = _kind(body, reading)
    problems = _chat_problem(body, reading, kind) if chat else \
        _text_problems(body, reading, kind)
    algo = _get(body, "algo", str)
    given = _get(body, "knobs", Mapping)
    # the server's knobs go with the server's algorithm only
    knobs: dict[str, Any] = dict(given if given is not None else
                                 defaults.knobs if algo is None else {})
    algo = algo or defaults.algo
    if algo is None:  # plain sampling
        algo, sample = SAMPLE
        knobs = {**sample, **knobs}
    knobs = {k: tuple(v) if isinstance(v, list) else v for k, v in knobs.items()}  # JSON lists
    _sampling_knobs(body, algo, knobs)
    _step_delimiter(body, algo, knobs, reading)
    named = _get(body, "scorer", str)
    scorer = named if named is not None else defaults.scorer
    budget = _budget(body, defaults.budget)
    seed = _get(body, "seed", int)
    seed = defaults.seed if seed is None else seed
    n = _count(body, "n", 1, defaults.max_n)
    runs = tuple((p, seed + i) for p in problems for i in range(n))
    try:
        knobs = registry.upgrade_knobs(algo, knobs)
        # search.solve's checks, with the scorer it will get (the server's only for a search
        # that consults one); seeds differ only in value, so one run of each problem
        if named is None and not registry.uses_scorer(algo, knobs):
            scorer = None
        for p in problems:
            check_scorer(check_run(p, algo, budget, seed, scorer, knobs), p, models[0])
    except (TypeError, ValueError, LookupError, OSError) as err:  # OSError: a PRM path
        raise BadRequest(_message(err)) from None
    return Plan(chat=chat, runs=runs, algo=algo, knobs=knobs, scorer=scorer, budget=budget,
                stop=_stops(body.get("stop")), logprobs=_logprobs(body, chat),
                stream=bool(_get(body, "stream", bool)), include_usage=_include_usage(body),
                echo=problems[0].prompt if not chat and _get(body, "echo", bool) else None,
                fit_budget=not any(body.get(k) is not None
                                   for k in TOKEN_CAPS))


def _message(err: Exception) -> str:
    """The error's message as search.solve shows it (a KeyError's without its quotes)."""
    return str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)


# -- fields ---------------------------------------------------------------------------------------
def _known_fields(body: Mapping[str, Any], known: Sequence[str]) -> None:
    for key in body:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            raise BadRequest(f"unknown field {key!r}{hint}", param=str(key))


def _get(body: Mapping[str, Any], key: str, kind: type) -> Any:
    """body[key] if present and not null, checked to be of `kind` (JSON's types)."""
    value = body.get(key)
    if value is None:
        return None
    wrong = isinstance(value, bool) and kind is not bool or not isinstance(value, kind)
    if wrong:
        names = {str: "a string", int: "an integer", bool: "a boolean", Mapping: "an object",
                 list: "an array", float: "a number"}
        raise BadRequest(f"{key} must be {names.get(kind, kind.__name__)}, got {value!r}",
                         param=key)
    return value


def _count(body: Mapping[str, Any], key: str, default: int, most: int) -> int:
    value = _get(body, key, int)
    if value is None:
        return default
    if not 1 <= value <= most:
        raise BadRequest(f"{key} must be between 1 and {most}, got {value}", param=key)
    return value


def _check_model(model: Any, models: Sequence[str]) -> None:
    if model is None:
        raise BadRequest(f"model is required; this server serves {', '.join(map(repr, models))}",
                         param="model")
    if model not in models:
        raise BadRequest(f"the model {model!r} does not exist; this server serves "
                         f"{', '.join(map(repr, models))}", status=404, param="model")


def _refuse_unsupported(body: Mapping[str, Any], chat: bool) -> None:
    """Standard fields a search cannot honour, refused unless they ask for the default."""
    for key in ("presence_penalty", "frequency_penalty"):
        if body.get(key) not in (None, 0, 0.0):
            raise BadRequest(f"{key} is not supported: the search samples from the model's own "
                             "distribution (leave it out or 0)", param=key)
    if body.get("logit_bias"):
        raise BadRequest("logit_bias is not supported (leave it out)", param="logit_bias")
    if chat and body.get("tools"):
        raise BadRequest("tools are not supported: the server answers with text", param="tools")
    fmt = body.get("response_format")
    if chat and fmt is not None and fmt != {"type": "text"}:
        raise BadRequest("response_format other than {'type': 'text'} is not supported",
                         param="response_format")
    if not chat and body.get("suffix"):
        raise BadRequest("suffix is not supported (no insertion mode)", param="suffix")
    best_of = body.get("best_of")
    if not chat and best_of not in (None, 1, body.get("n", 1)):
        raise BadRequest("best_of is not supported; ask for the search itself: "
                         "algo='best_of_n', knobs={'n': ...}", param="best_of")


def _text(content: Any, where: str) -> str:
    """A message's content: a string, or a list of text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, Mapping) and p.get("type") == "text"
                                         and isinstance(p.get("text"), str) for p in content):
        return "".join(p["text"] for p in content)
    raise BadRequest(f"{where} must be a string or a list of text parts", param="messages")


def _problem(**kwargs: Any) -> Problem:
    try:
        return Problem(**kwargs)
    except (TypeError, ValueError) as err:  # empty text, text that is not UTF-8
        raise BadRequest(str(err)) from None


def _kind(body: Mapping[str, Any], reading: Reading) -> dict[str, Any]:
    """The Problem's domain and metadata: answer_pattern's (search.serve.text), else the
    model's declared domain, else free text."""
    given = _get(body, "answer_pattern", str)
    if given is not None:
        try:
            pattern(given)
        except ValueError as err:
            raise BadRequest(str(err), param="answer_pattern") from None
        return {"domain": TEXT, "metadata": {ANSWER_PATTERN: given}}
    return {"domain": reading.form.domain if reading.form else TEXT}


def _chat_problem(body: Mapping[str, Any], reading: Reading, kind: Mapping[str, Any]
                  ) -> tuple[Problem]:
    """A model with a chat template reads the messages as they are, through it; one without
    reads one user message through its plain template."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty array of {role, content}",
                         param="messages")
    said = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise BadRequest(f"messages[{i}] must be an object with a role and content",
                             param="messages")
        said.append({"role": m["role"], "content": _text(m.get("content"),
                                                          f"messages[{i}].content")})
    if reading.chat_template:
        return (_problem(messages=tuple(said), id="request", **kind),)
    if len(said) == 1 and said[0]["role"] == "user":
        return (_problem(prompt=said[0]["content"], id="request", **kind),)
    raise BadRequest("this model has no chat template, so it reads one user message (the "
                     "problem), not a conversation", param="messages")


def _text_problems(body: Mapping[str, Any], reading: Reading, kind: Mapping[str, Any]
                   ) -> tuple[Problem, ...]:
    """One Problem per prompt: its text as it stands for a model with a chat template (a
    completion continues the text), through the model's plain template for one without."""
    prompt = body.get("prompt")
    prompts = [prompt] if isinstance(prompt, str) else prompt
    if not isinstance(prompts, list) or not prompts or \
            not all(isinstance(p, str) for p in prompts):
        raise BadRequest("prompt must be a string or a non-empty array of strings (token "
                         "arrays are not supported)", param="prompt")
    if reading.chat_template:
        kind = {**kind, "metadata": {**kind.get("metadata", {}), PROMPT_FORM: RAW}}
    return tuple(_problem(prompt=p, id=f"request-{i}", **kind) for i, p in enumerate(prompts))


def _sampling_knobs(body: Mapping[str, Any], algo: str, knobs: dict[str, Any]) -> None:
    """temperature and top_p into the algorithm's knobs of those names."""
    for key in ("temperature", "top_p"):
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BadRequest(f"{key} must be a number, got {value!r}", param=key)
        try:
            has = key in registry.knob_names(algo)
        except ValueError as err:  # an unknown algorithm: its own message
            raise BadRequest(str(err)) from None
        if not has:
            raise BadRequest(f"{algo} has no {key} knob, so {key}={value} cannot be honoured; "
                             f"leave {key} out", param=key)
        if key in knobs and knobs[key] != value:
            raise BadRequest(f"{key}={value} and knobs.{key}={knobs[key]} disagree; give one",
                             param=key)
        knobs[key] = value


def _step_delimiter(body: Mapping[str, Any], algo: str, knobs: dict[str, Any],
                    reading: Reading) -> None:
    """The step delimiters into the algorithm's `stop` knob: step_delimiter's (a string, an
    array of strings, or null: none), else the knob's own value, else the model's declared
    ones, else none (a step ends at its token cap or the model's end of text)."""
    try:
        has = "stop" in registry.knob_names(algo)
    except ValueError as err:  # an unknown algorithm: its own message
        raise BadRequest(str(err)) from None
    if "step_delimiter" in body:
        given = body["step_delimiter"]
        delims = [given] if isinstance(given, str) else given
        if delims is not None and (not isinstance(delims, list) or not delims or not all(
                isinstance(d, str) and d for d in delims)):
            raise BadRequest("step_delimiter must be a non-empty string, an array of them, or "
                             "null (no delimiter)", param="step_delimiter")
        value = tuple(delims) if delims is not None else None
        if not has:
            raise BadRequest(f"{algo} has no steps to delimit (no stop knob); leave "
                             "step_delimiter out", param="step_delimiter")
        if "stop" in knobs and knobs["stop"] != value:
            raise BadRequest(f"step_delimiter={given!r} and knobs.stop={knobs['stop']!r} "
                             "disagree; give one", param="step_delimiter")
        knobs["stop"] = value
    elif has and "stop" not in knobs:
        value = reading.form.step_delimiter if reading.form else None
        if value != registry.check_knobs(algo, {}, values_too=False)["stop"]:  # its default
            knobs["stop"] = value


def _budget(body: Mapping[str, Any], default: Budget | None) -> Budget | None:
    given = _get(body, "budget", Mapping)
    names = [f.name for f in fields(Budget)]
    for key in given or {}:
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            raise BadRequest(f"Budget has no field {key!r}{hint}; its fields: "
                             f"{', '.join(names)}", param="budget")
    try:
        budget = Budget(**given) if given is not None else default
        caps = [v for k in TOKEN_CAPS
                if (v := _get(body, k, int)) is not None]
        if caps:
            most = min([*caps] + ([budget.tokens] if budget and budget.tokens else []))
            budget = dataclasses.replace(budget or Budget(), tokens=most)
    except (TypeError, ValueError) as err:
        raise BadRequest(str(err), param="budget") from None
    return budget


def _stops(stop: Any) -> tuple[str, ...]:
    stops = [stop] if isinstance(stop, str) else stop if stop is not None else []
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops) \
            or len(stops) > MAX_STOPS:
        raise BadRequest(f"stop must be a non-empty string or an array of up to {MAX_STOPS} "
                         "of them", param="stop")
    return tuple(stops)


def _logprobs(body: Mapping[str, Any], chat: bool) -> bool:
    if chat:
        top = _get(body, "top_logprobs", int)
        if top:
            raise BadRequest("top_logprobs is not supported: the engine keeps the sampled "
                             "tokens' log-probabilities only (use logprobs: true)",
                             param="top_logprobs")
        return bool(_get(body, "logprobs", bool))
    value = _get(body, "logprobs", int)
    if value:
        raise BadRequest("logprobs > 0 is not supported: the engine keeps the sampled tokens' "
                         "log-probabilities only (use logprobs: 0)", param="logprobs")
    return value is not None


def _include_usage(body: Mapping[str, Any]) -> bool:
    opts = _get(body, "stream_options", Mapping) or {}
    return bool(opts.get("include_usage"))
