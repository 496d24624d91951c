"""How the client commands reach a cluster: over HTTP through its ingress (`--url`, a user's way,
with `--token-file` where the ingress asks for tokens) or straight to its Redis (`--redis`, an
operator's way). Both answer the same questions the same way (`Ingress`), so `spex submit`,
`result`, `cancel` and `tree` print the same whichever they go through.

Every failure is a ValueError whose one line names the flag to fix: an address nothing listens
on names `--url` and the address, a refused token names `--token-file`, and a request the
ingress refuses is what the ingress said (`spex.services.ingress`: one line of JSON).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from spex.proto import AnswerResult, ServedBy

if TYPE_CHECKING:
    from spex.shared.runtime.client import IngressClient

__all__ = [
    "HttpIngress",
    "Ingress",
    "RedisIngress",
    "check_redis_url",
    "check_url",
    "ingress_request",
    "read_token",
]

REQUEST_TIMEOUT_S = 30.0  # one HTTP request; the ingress answers at once (it waits on nothing)
POLL_FIRST_S = 0.1  # waiting for an answer over HTTP: the first pause between looks ...
POLL_MOST_S = 1.0  # ... growing by half each look up to this (the ingress has no blocking read)
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


class Ingress(Protocol):
    """A cluster as the client commands see it. `answer` and `tree` raise ValueError naming
    `query_id` for an id that names no question (of this client's)."""

    async def submit(self, question: str, fields: dict[str, Any]) -> str: ...

    async def answer(self, query_id: str, wait_s: float | None) -> AnswerResult | None: ...

    async def cancel(self, query_id: str) -> None: ...

    async def tree(self, query_id: str) -> dict[str, Any]: ...

    async def aclose(self) -> None: ...


def check_url(url: str) -> str:
    """The ingress's base URL, or ValueError naming --url."""
    if not url.startswith(("http://", "https://")) or not url.partition("://")[2].strip("/"):
        raise ValueError(f"--url: give the ingress's URL, http://HOST:PORT (or https://), not {url!r}")
    return url.rstrip("/")


def check_redis_url(url: str) -> str:
    """A Redis URL without a password in it, or ValueError naming --redis."""
    if not url.startswith(REDIS_SCHEMES):
        raise ValueError("--redis: give a URL, redis://HOST:PORT (or rediss://, unix://)")
    if "@" in url.partition("://")[2].split("/")[0]:
        raise ValueError(
            "--redis: no password in the URL (other users see it in ps); use SPEX_REDIS_PASSWORD "
            "or --redis-password-file"
        )
    return url


def read_token(token_file: str | None) -> str:
    """The ingress's bearer token: the first line of `token_file`, else $SPEX_TOKEN, else none.
    Never a flag's value: other users see a command line in ps."""
    if not token_file:
        return os.environ.get("SPEX_TOKEN", "").strip()
    try:
        lines = Path(token_file).read_text().strip().splitlines()
    except OSError as exc:
        raise ValueError(f"--token-file: {token_file}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ValueError(f"--token-file: {token_file}: not a text file") from None
    if not lines or not lines[0].strip():
        raise ValueError(f"--token-file: {token_file} is empty")
    return lines[0].strip()


def ingress_request(
    url: str,
    method: str,
    path: str,
    token: str,
    body: dict[str, Any] | None = None,
    timeout_s: float = REQUEST_TIMEOUT_S,
) -> tuple[int, dict[str, Any]]:
    """(status, JSON object) of a 2xx answer to one request to the ingress at `url`; any other
    answer, or none, is a ValueError saying what went wrong and which flag fixes it."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{url}{path}", data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as reply:
            return reply.status, _json(url, reply.status, reply.read())
    except urllib.error.HTTPError as exc:
        status, said = exc.code, _json(url, exc.code, exc.read()).get("error")
        if status == 401:
            given = "refused the token" if token else "needs a token"
            raise ValueError(
                f"--token-file: the ingress at {url} {given}: give a file holding a valid one "
                "(or set $SPEX_TOKEN)"
            ) from None
        if not isinstance(said, str):
            raise ValueError(f"--url: {url} answered HTTP {status}") from None
        if status >= 500:
            raise ValueError(f"--url: the ingress at {url} answered HTTP {status}: {said}") from None
        raise ValueError(said if status in (400, 404, 409, 413) else f"{said} (HTTP {status})") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, TimeoutError):
            raise ValueError(f"--url: the ingress at {url} did not answer within {timeout_s:g} s") from None
        reason = reason.strerror if isinstance(reason, OSError) and reason.strerror else reason
        raise ValueError(f"--url: cannot reach the ingress at {url}: {reason}") from None


def _json(url: str, status: int, raw: bytes) -> dict[str, Any]:
    try:
        out = json.loads(raw)
    except ValueError:
        out = None
    if not isinstance(out, dict):
        raise ValueError(
            f"--url: {url} answered HTTP {status}, and not in the ingress's JSON: is it the ingress?"
        )
    return out


class HttpIngress:
    """The cluster through its HTTP ingress (`POST /v1/questions`, `GET`/`DELETE
    /v1/questions/{id}`, `GET /v1/questions/{id}/tree`), with urllib as `spex top` reads it."""

    def __init__(self, url: str, token: str) -> None:
        self.url, self.token = check_url(url), token

    async def _call(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        return await asyncio.to_thread(ingress_request, self.url, method, path, self.token, body)

    async def submit(self, question: str, fields: dict[str, Any]) -> str:
        _, reply = await self._call("POST", "/v1/questions", {"question": question, **fields})
        return str(reply["query_id"])

    async def answer(self, query_id: str, wait_s: float | None) -> AnswerResult | None:
        deadline, pause = time.monotonic() + (wait_s or 0.0), POLL_FIRST_S
        while True:
            status, reply = await self._call("GET", f"/v1/questions/{_quoted(query_id)}")
            if status == 200:
                return _answer(query_id, reply)
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            await asyncio.sleep(min(pause, left))
            pause = min(POLL_MOST_S, pause * 1.5)

    async def cancel(self, query_id: str) -> None:
        await self._call("DELETE", f"/v1/questions/{_quoted(query_id)}")

    async def tree(self, query_id: str) -> dict[str, Any]:
        return (await self._call("GET", f"/v1/questions/{_quoted(query_id)}/tree"))[1]

    async def aclose(self) -> None:
        return None


def _quoted(query_id: str) -> str:
    return urllib.parse.quote(query_id, safe="")


def _answer(query_id: str, reply: dict[str, Any]) -> AnswerResult:
    """The ingress's answer (`watch.answer_json`) as the message the Redis path reads."""
    return AnswerResult(
        msg_id="",
        query_id=query_id,
        answer=reply.get("answer"),
        correct=reply.get("correct"),
        solution=list(reply.get("solution", [])),
        nodes=int(reply.get("nodes", 0)),
        tokens_generated=int(reply.get("tokens_generated", 0)),
        latency_s=float(reply.get("latency_s", 0.0)),
        tree_digest=str(reply.get("tree_digest", "")),
        error=str(reply.get("error", "")),
        early_stopped=bool(reply.get("early_stopped", False)),
        cancelled=reply.get("status") == "cancelled",
        spec_issued=int(reply.get("speculative_issued", 0)),
        spec_adopted=int(reply.get("speculative_adopted", 0)),
        served_by=_served(reply.get("served_by")),
    )


def _served(reply: Any) -> ServedBy | None:
    """What answered, from the answer's `served_by` (`views.served_json`)."""
    if not isinstance(reply, dict):
        return None
    try:
        return msgspec.convert({k: v or "" for k, v in reply.items() if k != "demonstration"}, ServedBy)
    except msgspec.ValidationError:
        return None


class RedisIngress:
    """The cluster through its Redis, as the ingress itself reaches it (`IngressClient`)."""

    def __init__(self, client: IngressClient) -> None:
        self.client = client

    async def submit(self, question: str, fields: dict[str, Any]) -> str:
        from spex.shared.runtime.client import Backpressure

        try:
            return await self.client.submit(question, **fields)
        except Backpressure as exc:
            raise ValueError(str(exc)) from None

    async def _known(self, query_id: str) -> None:
        from spex.shared.runtime.client import UnknownQuery

        try:  # as the HTTP ingress: an id that names no question is an error, not "no answer yet"
            await self.client.request(query_id)
        except UnknownQuery:
            raise ValueError(f"query_id: no question {query_id[:64]!r}") from None

    async def answer(self, query_id: str, wait_s: float | None) -> AnswerResult | None:
        await self._known(query_id)
        return await self.client.result(query_id, wait_s)

    async def cancel(self, query_id: str) -> None:
        from spex.shared.runtime.client import Answered, UnknownQuery

        await self._known(query_id)
        try:
            await self.client.cancel(query_id)
        except UnknownQuery:
            raise ValueError(f"query_id: no question {query_id[:64]!r}") from None
        except Answered as exc:
            raise ValueError(str(exc)) from None

    async def tree(self, query_id: str) -> dict[str, Any]:
        from spex.shared.runtime.views import answer_status

        await self._known(query_id)
        nodes = await self.client.tree(query_id)
        answer = await self.client.result(query_id)
        status = "searching" if answer is None else answer_status(answer)
        return {"query_id": query_id, "status": status, "nodes": nodes}

    async def aclose(self) -> None:
        await self.client.aclose()
