"""The HTTP side: a FastAPI app with the OpenAI routes in front of a Service.

    POST /v1/chat/completions, POST /v1/completions   (search.serve.plan: what a body means)
    GET  /v1/models, GET /health

Every request body is read here, at most `max_body` bytes, decoded as UTF-8 and parsed as a
JSON object; anything wrong is a 4xx with the API's error object, never a crash and never a
touch on other requests. A client that disconnects cancels its searches: a plain request is
watched while it waits, a stream ends (and cancels) when a write to it fails.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from search.fit import BudgetTooSmall
from search.models import form_of
from search.serve.plan import BadRequest, Defaults, Plan, Reading, plan
from search.serve.reply import Choice, Reply, error_body, pieces
from search.serve.service import PROGRESS_EVERY, Cancelled, Search, Service
from search.types import Result

POLL = 0.25  # seconds between two looks at a waiting client's connection
MAX_BODY = 1 << 20


def error(message: str, status: int, param: str | None = None) -> JSONResponse:
    return JSONResponse(dict(error_body(message, status, param)), status_code=status)


def failure(err: BaseException) -> JSONResponse:
    """The response to a search that raised: 503 for one cancelled by a shutdown, 400 for a
    token budget too small for the search's narrowest width (solve's own message, naming the
    budget it needs), else 500 naming the error (the other requests go on)."""
    if isinstance(err, Cancelled):
        return error(f"the search was cancelled: {err}", 503)
    if isinstance(err, BudgetTooSmall):
        return error(str(err), 400, "budget")
    return error(f"the search failed: {type(err).__name__}: {err}", 500)


async def read_json(request: Request, limit: int) -> Any:
    """The body as JSON: at most `limit` bytes, UTF-8 (as JSON must be), parsed."""
    length = request.headers.get("content-length", "")
    too_big = f"the request body is larger than this server takes ({limit} bytes)"
    if length.isdigit() and int(length) > limit:
        raise BadRequest(too_big, status=413)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BadRequest(too_big, status=413)
        chunks.append(chunk)
    raw = b"".join(chunks)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise BadRequest(f"the request body is not valid text: byte {raw[err.start]:#04x} at "
                         f"position {err.start} is not UTF-8; send JSON encoded as UTF-8"
                         ) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise BadRequest(f"the request body is not JSON: {err}") from None


class ClientGone(Exception):
    """The client closed its connection before its response."""


async def wait(request: Request, searches: Sequence[Search]) -> list[Result]:
    """Every search's Result, in order, while watching the client's connection; the first
    error a search raised is raised here."""
    futures = [awaiting(s) for s in searches]
    while True:
        _, pending = await asyncio.wait(futures, timeout=POLL)
        if not pending:
            return [f.result() for f in futures]
        if await request.is_disconnected():
            raise ClientGone


def awaiting(s: Search) -> asyncio.Future[Result]:
    """The search's Result as an asyncio future, whose error counts as seen even when its
    request has gone (asyncio would log it as never retrieved)."""
    f = asyncio.wrap_future(s.future)
    f.add_done_callback(lambda f: f.cancelled() or f.exception())
    return f


def sse(data: Mapping[str, Any] | str) -> str:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"


async def events(service: Service, plan_: Plan, reply: Reply, searches: Sequence[Search]
                 ) -> AsyncIterator[str]:
    """The SSE stream: each choice's role, then progress comments while the searches run
    (every PROGRESS_EVERY seconds: the search.progress line of each), then each choice's
    text in pieces as its search ends, its last chunk (finish_reason, the `search` field),
    the usage chunk if asked for, and [DONE]."""
    if plan_.chat:
        for s in searches:
            yield sse(reply.chunk(s.index, role=True, text=""))
    pending = {awaiting(s): s for s in searches}
    choices: list[Choice] = []
    while pending:
        done, _ = await asyncio.wait(pending, timeout=PROGRESS_EVERY,
                                     return_when=asyncio.FIRST_COMPLETED)
        if not done:
            lines = [f"{s.index}: {s.watch.latest or 'starting'}" for s in pending.values()]
            yield "".join(f": {line}\n" for line in lines) + "\n"
            continue
        for f in done:
            s = pending.pop(f)
            try:
                result = f.result()
            except Exception as err:  # noqa: BLE001  # the client gets the error object
                body = json.loads(bytes(failure(err).body))
                yield sse(body)
                return
            c = Choice.of(s.index, result, plan_, service.driver.engine)
            choices.append(c)
            for piece in pieces(c.text):
                yield sse(reply.chunk(s.index, text=piece))
            yield sse(reply.chunk(s.index, finish=c, plan=plan_))
    if plan_.include_usage:
        yield sse(reply.usage_chunk(plan_, sorted(choices, key=lambda c: c.index)))
    yield sse("[DONE]")


class SearchStream(StreamingResponse):
    """A stream whose searches are cancelled when it ends for any reason (its client gone:
    a write failed or the disconnect was heard; the task cancelled) before they did."""

    def __init__(self, content: AsyncIterator[str], service: Service,
                 searches: Sequence[Search]) -> None:
        super().__init__(content, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache"})
        self.service, self.searches = service, searches

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.service.cancel(list(self.searches))


def create_app(service: Service, defaults: Defaults, *, names: Sequence[str],
               max_body: int = MAX_BODY) -> FastAPI:
    """The app serving `service` under the model names `names` (the first is the engine's)."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        service.open()
        try:
            yield
        finally:
            await asyncio.to_thread(service.close)

    app = FastAPI(title="tts-search", lifespan=lifespan)
    # how the model reads prompts: its chat template (the hf engine's), what it declares
    reading = Reading(chat_template=bool(getattr(service.driver.engine, "chat", True)),
                      form=form_of(service.model))

    async def complete(request: Request, chat: bool) -> Response:
        try:
            body = await read_json(request, max_body)
            p = plan(body, chat=chat, models=names, defaults=defaults, reading=reading)
            await asyncio.to_thread(service.check_prompts, p)
            searches = service.start(p)
        except BadRequest as err:
            return error(str(err), err.status, err.param)
        reply = Reply.new(chat, names[0])
        if p.stream:
            return SearchStream(events(service, p, reply, searches), service, searches)
        try:
            results = await wait(request, searches)
        except ClientGone:
            return Response(status_code=499)  # nobody reads it
        except Exception as err:  # noqa: BLE001  # this request's failure only
            return failure(err)
        finally:
            service.cancel(searches)  # those still running: the client left, or one failed
        engine = service.driver.engine
        choices = [Choice.of(i, r, p, engine) for i, r in enumerate(results)]
        return JSONResponse(reply.completion(p, choices))

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await complete(request, chat=True)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await complete(request, chat=False)

    @app.get("/v1/models")
    async def models() -> Mapping[str, Any]:
        return {"object": "list", "data": [{"id": n, "object": "model", "created": 0,
                                            "owned_by": "tts-search"} for n in names]}

    @app.get("/health")
    async def health() -> Response:
        report = await asyncio.to_thread(service.health)
        return JSONResponse(dict(report), status_code=503 if service.closing else 200)

    return app


def listening(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (host, port) for uvicorn. Made with IPPROTO_TCP named, so that
    asyncio sets TCP_NODELAY on every connection it accepts (it does so only for sockets whose
    protocol says TCP; a plain socket.socket() says 0), and with TCP_NODELAY set here too (Linux
    passes it on to accepted sockets): without it a response's headers and body, written
    apart, wait out the client's delayed ACK on a kept-alive connection, 40 ms a request."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET,
                         socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    return sock
