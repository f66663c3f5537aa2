"""Concurrent JSON requests with retries, for engines that drive a model server
(search.engines.openai).

One daemon thread runs an asyncio loop with one httpx.AsyncClient (connections stay open
between calls); a caller in any thread, a notebook's running event loop included, submits a
batch and blocks until every request of it has an answer. At most `concurrency` requests are
in flight at once.

Retried, with exponential backoff (backoff * 2**attempt seconds, capped at max_backoff; a
longer Retry-After header wins): HTTP 429 and 5xx, timeouts, connection errors, and a 200 whose
body is not complete JSON (a truncated answer). After the last retry the request fails with a
ServerError naming the URL, the number of attempts and the last cause. Any other HTTP error
(a 4xx: the request itself is wrong, e.g. a prompt longer than the context) fails at once with
the server's message: retrying cannot fix it.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

T = TypeVar("T")


class ServerError(RuntimeError):
    """A request that failed for good (after its retries, or at once for a 4xx)."""


@dataclass(frozen=True)
class RetryPolicy:
    """retries: further attempts after the first; timeout: seconds per attempt."""

    retries: int = 4
    backoff: float = 0.5
    max_backoff: float = 8.0
    timeout: float = 120.0

    def __post_init__(self) -> None:
        if self.retries < 0 or self.backoff < 0 or self.max_backoff < 0 or self.timeout <= 0:
            raise ValueError(f"invalid retry policy {self}")

    def delay(self, attempt: int, retry_after: str | None = None) -> float:
        wait = min(self.backoff * 2 ** attempt, self.max_backoff)
        try:
            return max(wait, min(float(retry_after or 0), self.max_backoff))
        except ValueError:  # Retry-After given as an HTTP date: keep our own schedule
            return wait


class HTTPPool:
    """POSTs JSON bodies concurrently; `retried` counts the retries made so far."""

    def __init__(self, *, concurrency: int = 16, policy: RetryPolicy = RetryPolicy(),
                 headers: Mapping[str, str] | None = None) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be positive, got {concurrency}")
        self.policy, self.concurrency, self.headers = policy, concurrency, dict(headers or {})
        self.retried = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="tts-http")
        self._thread.start()
        self._client: httpx.AsyncClient | None = None  # made on the loop's own thread
        self._gate: asyncio.Semaphore | None = None

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._loop.is_closed():
            raise ServerError("the engine's HTTP pool was closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    async def _setup(self) -> tuple[httpx.AsyncClient, asyncio.Semaphore]:
        if self._client is None or self._gate is None:
            limits = httpx.Limits(max_connections=self.concurrency,
                                  max_keepalive_connections=self.concurrency)
            self._client = httpx.AsyncClient(headers=self.headers, limits=limits,
                                             timeout=self.policy.timeout)
            self._gate = asyncio.Semaphore(self.concurrency)
        return self._client, self._gate

    def post_many(self, url: str, bodies: Sequence[Mapping[str, Any]]
                  ) -> list[dict[str, Any] | ServerError]:
        """Each body's decoded JSON answer, or the ServerError it ended with, in order."""
        async def all_of() -> list[dict[str, Any] | ServerError]:
            client, gate = await self._setup()
            jobs = [self._post(client, gate, url, body) for body in bodies]
            out = await asyncio.gather(*jobs, return_exceptions=True)
            for item in out:  # anything but our own error is a bug: let it through
                if isinstance(item, BaseException) and not isinstance(item, ServerError):
                    raise item
            return list(out)  # type: ignore[arg-type]

        return self._run(all_of())

    def get(self, url: str) -> httpx.Response:
        """One GET without retries (model lists, metrics); ServerError if it gets no answer."""
        async def one() -> httpx.Response:
            client, _ = await self._setup()
            try:
                return await client.get(url)
            except httpx.HTTPError as err:
                raise ServerError(f"GET {url}: {type(err).__name__}: {err}") from None

        return self._run(one())

    async def _post(self, client: httpx.AsyncClient, gate: asyncio.Semaphore, url: str,
                    body: Mapping[str, Any]) -> dict[str, Any]:
        policy, cause = self.policy, "no attempt"
        for attempt in range(policy.retries + 1):
            retry_after = None
            if attempt:
                self.retried += 1
            async with gate:
                try:
                    resp = await client.post(url, json=body)
                    text = resp.text
                except httpx.TimeoutException as err:
                    cause = f"timed out after {policy.timeout:g} s ({type(err).__name__})"
                except httpx.TransportError as err:  # refused, reset, body cut short
                    cause = f"{type(err).__name__}: {err}"
                else:
                    if resp.status_code == 200:
                        try:
                            data = json.loads(text)
                        except ValueError as err:
                            cause = f"a body that is not complete JSON ({err}): {text[:200]!r}"
                        else:
                            if isinstance(data, dict):
                                return data
                            raise ServerError(f"POST {url}: expected a JSON object, got "
                                              f"{text[:200]!r}")
                    elif resp.status_code == 429 or resp.status_code >= 500:
                        cause = f"HTTP {resp.status_code}: {text[:300]}"
                        retry_after = resp.headers.get("retry-after")
                    else:
                        raise ServerError(f"POST {url}: HTTP {resp.status_code}: {text[:1000]}")
            if attempt < policy.retries:
                await asyncio.sleep(policy.delay(attempt, retry_after))
        raise ServerError(f"POST {url} failed after {policy.retries + 1} attempts; "
                          f"last: {cause}")

    def close(self) -> None:
        """Close the connections and stop the loop thread (idempotent)."""
        if self._loop.is_closed():
            return
        if self._client is not None:
            self._run(self._client.aclose())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()
