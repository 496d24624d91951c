"""`AsyncClient`: the HTTP service from asyncio code, over aiohttp (one connection pool per
client). The same methods as `Client`, awaited; `events` is an async iterator."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, cast

import aiohttp

from spex._http import (
    POLL_FIRST_S,
    POLL_MOST_S,
    QUESTIONS,
    REQUEST_TIMEOUT_S,
    STREAM_READ_TIMEOUT_S,
    check_url,
    headers,
    question_path,
    refusal,
    reply_json,
    submission,
    unreachable,
)
from spex._replies import Answer, Event, EventStream, Tree

if TYPE_CHECKING:
    from spex.shared.runtime.bodies import AnswerJson, TreeJson

__all__ = ["AsyncClient"]


class AsyncClient:
    """A client of SPEX's HTTP ingress for asyncio: `Client`'s methods, awaited. Use it in an
    `async with` block (or call `aclose`): it holds a connection pool.

    Args:
        url: The ingress's base URL, `http://HOST:PORT`.
        token: The bearer token, where the ingress asks for one.
        timeout_s: How long one request may take.

    Example:
        ```python
        async with spex.AsyncClient("http://127.0.0.1:8080", token=token) as client:
            qid = await client.submit("What is 2 + 3?", target=8)
            async for event in client.events(qid):
                print(event)
        ```
    """

    def __init__(self, url: str, token: str | None = None, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.url = check_url(url)
        self._token = token or None
        self.timeout_s = timeout_s
        self._session: aiohttp.ClientSession | None = None  # made on first use, in the running loop

    def __repr__(self) -> str:  # never the token
        return f"AsyncClient({self.url!r}, token={'set' if self._token else 'none'})"

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def submit(
        self,
        question: str,
        *,
        algorithm: str | None = None,
        target: int | None = None,
        seed: int | None = None,
        mode: str | None = None,
        reference: str | None = None,
        client_key: str | None = None,
        early_stop: bool | None = None,
        early_stop_alpha: float | None = None,
        early_stop_min_answers: int | None = None,
        early_stop_weight: str | None = None,
        baseline_twin: bool | None = None,
        prompt_tokens: int | None = None,
        **fields: Any,
    ) -> str:
        """Submit a question; returns its query id (`Client.submit` says what each field is)."""
        given = {
            "algorithm": algorithm, "target": target, "seed": seed, "mode": mode, "reference": reference,
            "client_key": client_key, "early_stop": early_stop, "early_stop_alpha": early_stop_alpha,
            "early_stop_min_answers": early_stop_min_answers, "early_stop_weight": early_stop_weight,
            "baseline_twin": baseline_twin, "prompt_tokens": prompt_tokens,
        }  # fmt: skip
        _, reply = await self._call("POST", QUESTIONS, submission(question, given, fields))
        return str(reply["query_id"])

    async def result(self, query_id: str) -> Answer | None:
        """The question's answer, or `None` while it is being searched."""
        status, reply = await self._call("GET", question_path(query_id))
        return Answer.from_json(query_id, cast("AnswerJson", reply)) if status == 200 else None

    async def wait(self, query_id: str, timeout_s: float | None = None) -> Answer:
        """The question's answer once it has one; `TimeoutError` if none came within
        `timeout_s` (`None`: wait as long as it takes)."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        pause = POLL_FIRST_S
        while True:
            answer = await self.result(query_id)
            if answer is not None:
                return answer
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                raise TimeoutError(f"{query_id}: no answer within {timeout_s} s")
            await asyncio.sleep(pause if left is None else min(pause, left))
            pause = min(POLL_MOST_S, pause * 1.5)

    async def cancel(self, query_id: str) -> None:
        """Cancel the question's search (an answered question keeps its answer)."""
        await self._call("DELETE", question_path(query_id))

    async def tree(self, query_id: str) -> Tree:
        """The question's tree as searched so far."""
        return Tree.from_json(
            cast("TreeJson", (await self._call("GET", question_path(query_id, "/tree")))[1])
        )

    async def events(self, query_id: str) -> AsyncIterator[Event]:
        """The question's tree as it grows: a `NodeEvent` each time a node changes, then one
        `AnswerEvent`, then the iteration ends."""
        stream = EventStream(query_id)
        timeout = aiohttp.ClientTimeout(total=None, connect=self.timeout_s, sock_read=STREAM_READ_TIMEOUT_S)
        try:
            async with self._http().get(
                self.url + question_path(query_id, "/events"),
                headers=headers(self._token) | {"Accept": "text/event-stream"},
                timeout=timeout,
            ) as reply:
                await self._check(reply)
                async for raw in reply.content:
                    for event in stream.feed(raw.decode()):
                        yield event
                    if stream.done:
                        return
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise self._unreachable(exc, STREAM_READ_TIMEOUT_S) from None
        stream.ended()

    async def overview(self) -> dict[str, Any]:
        """The cluster at a glance (`GET /v1/overview`)."""
        return (await self._call("GET", "/v1/overview"))[1]

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self._session

    async def _call(
        self, method: str, path: str, body: dict[str, object] | None = None
    ) -> tuple[int, dict[str, object]]:
        """(status, JSON object) of a 2xx reply; any other reply, or none, a `ClientError`."""
        try:
            async with self._http().request(
                method,
                self.url + path,
                json=body,
                headers=headers(self._token, body is not None),
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
            ) as reply:
                await self._check(reply)
                return reply.status, reply_json(self.url, reply.status, await reply.read())
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise self._unreachable(exc, self.timeout_s) from None

    async def _check(self, reply: aiohttp.ClientResponse) -> None:
        if reply.status >= 400:
            raw = await reply.read()
            raise refusal(self.url, reply.status, raw, self._token, reply.headers.get("Retry-After"))

    def _unreachable(self, exc: BaseException, timeout_s: float) -> Exception:
        if isinstance(exc, TimeoutError):
            return unreachable(self.url, exc, timeout_s)
        os_error = exc.os_error if isinstance(exc, aiohttp.ClientConnectorError) else None
        reason = os_error.strerror if isinstance(os_error, OSError) and os_error.strerror else exc
        return unreachable(self.url, reason)
