"""How the client commands reach a cluster: over HTTP through its ingress (`--url`, a user's way,
with `--token-file` where the ingress asks for tokens; the public client, `spex.Client`) or
straight to its Redis (`--redis`, an operator's way). Both answer the same questions the same
way (`Ingress`), so `spex submit`, `result`, `cancel` and `tree` print the same whichever they
go through.

Every failure is a ValueError whose one line names the flag to fix: an address nothing listens
on names `--url` and the address, a refused token names `--token-file`, and a request the
ingress refuses is what the ingress said (`spex.services.ingress`: one line of JSON).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import msgspec

from spex.proto import AnswerResult, ServedBy
from spex.shared.runtime.views import SIMULATED

if TYPE_CHECKING:
    from spex import Answer, Client, ClientError
    from spex.shared.runtime.bodies import TreeJson
    from spex.shared.runtime.client import IngressClient

T = TypeVar("T")

__all__ = [
    "HttpIngress",
    "Ingress",
    "RedisIngress",
    "check_redis_url",
    "check_url",
    "flagged",
    "ingress_client",
    "read_token",
]

REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


class Ingress(Protocol):
    """A cluster as the client commands see it. `answer` and `tree` raise ValueError naming
    `query_id` for an id that names no question (of this client's)."""

    async def submit(self, question: str, fields: dict[str, Any]) -> str: ...

    async def answer(self, query_id: str, wait_s: float | None) -> AnswerResult | None: ...

    async def cancel(self, query_id: str) -> None: ...

    async def tree(self, query_id: str) -> TreeJson: ...

    async def aclose(self) -> None: ...


def check_url(url: str) -> str:
    """The ingress's base URL, or ValueError naming --url (the client's check, `url: ...`)."""
    from spex import Client

    try:
        return Client(url).url
    except ValueError as exc:
        raise ValueError(f"--{exc}") from None


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


def ingress_client(url: str, token: str, timeout_s: float | None = None) -> Client:
    """The public HTTP client of the ingress at `url` (checked: ValueError naming --url)."""
    from spex import Client

    return Client(check_url(url), token) if timeout_s is None else Client(check_url(url), token, timeout_s)


def flagged(exc: ClientError) -> ValueError:
    """A client's error as one line naming the flag that fixes it: --token-file for a refused or
    missing token, --url for an ingress that did not answer (or failed, or is not one); what the
    ingress said, as it said it, for a request it refused."""
    from spex import Unauthorized

    if isinstance(exc, Unauthorized):
        return ValueError(f"--token-file: {exc}: give a file holding a valid one (or set $SPEX_TOKEN)")
    if exc.said is None or (exc.status or 0) >= 500:
        return ValueError(f"--url: {exc}")
    return ValueError(str(exc))


class HttpIngress:
    """The cluster through its HTTP ingress, by the public client (`spex.Client`), each call in
    a thread of its own."""

    def __init__(self, url: str, token: str) -> None:
        self.client = ingress_client(url, token)

    async def _call(self, method: Callable[..., T], *args: object, **kwargs: object) -> T:
        from spex import ClientError

        try:
            return await asyncio.to_thread(method, *args, **kwargs)
        except ClientError as exc:
            raise flagged(exc) from None

    async def submit(self, question: str, fields: dict[str, Any]) -> str:
        return await self._call(self.client.submit, question, **fields)

    async def answer(self, query_id: str, wait_s: float | None) -> AnswerResult | None:
        try:
            answer = await self._call(self.client.wait, query_id, wait_s or 0.0)
        except TimeoutError:
            return None
        return _answer(answer)

    async def cancel(self, query_id: str) -> None:
        await self._call(self.client.cancel, query_id)

    async def tree(self, query_id: str) -> TreeJson:
        return (await self._call(self.client.tree, query_id)).to_json()

    async def aclose(self) -> None:
        self.client.close()


def _answer(answer: Answer) -> AnswerResult:
    """The ingress's answer as the message the Redis path reads (one printer for both)."""
    return AnswerResult(
        msg_id="",
        query_id=answer.query_id,
        answer=answer.answer,
        correct=answer.correct,
        solution=list(answer.solution),
        nodes=answer.nodes,
        tokens_generated=answer.tokens_generated,
        latency_s=answer.latency_s,
        tree_digest=answer.tree_digest,
        error=answer.error or "",
        early_stopped=answer.early_stopped,
        cancelled=answer.status == "cancelled",
        spec_issued=answer.speculative_issued,
        spec_adopted=answer.speculative_adopted,
        served_by=_served(answer),
    )


def _served(answer: Answer) -> ServedBy | None:
    """What answered, as the wire says it (None: not said, or not in the wire's terms)."""
    if answer.served_by is None:
        return None
    said = asdict(answer.served_by)
    said.pop("demonstration")
    said["reward"] = said["reward"].removeprefix(SIMULATED)  # the wire says prm or logprob for both
    try:
        return msgspec.convert({k: v or "" for k, v in said.items()}, ServedBy)
    except msgspec.ValidationError:
        return None


class RedisIngress:
    """The cluster through its Redis, as the ingress itself reaches it (`IngressClient`)."""

    def __init__(self, client: IngressClient) -> None:
        self.client = client

    async def submit(self, question: str, fields: dict[str, Any]) -> str:
        from spex.shared.runtime.refusals import Backpressure

        try:
            return await self.client.submit(question, **fields)
        except Backpressure as exc:
            raise ValueError(str(exc)) from None

    async def _known(self, query_id: str) -> None:
        from spex.shared.runtime.refusals import UnknownQuery

        try:  # as the HTTP ingress: an id that names no question is an error, not "no answer yet"
            await self.client.request(query_id)
        except UnknownQuery:
            raise ValueError(f"query_id: no question {query_id[:64]!r}") from None

    async def answer(self, query_id: str, wait_s: float | None) -> AnswerResult | None:
        await self._known(query_id)
        return await self.client.result(query_id, wait_s)

    async def cancel(self, query_id: str) -> None:
        from spex.shared.runtime.refusals import Answered, UnknownQuery

        await self._known(query_id)
        try:
            await self.client.cancel(query_id)
        except UnknownQuery:
            raise ValueError(f"query_id: no question {query_id[:64]!r}") from None
        except Answered as exc:
            raise ValueError(str(exc)) from None

    async def tree(self, query_id: str) -> TreeJson:
        from spex.shared.runtime.views import answer_status

        await self._known(query_id)
        nodes = await self.client.tree(query_id)
        answer = await self.client.result(query_id)
        status = "searching" if answer is None else answer_status(answer)
        return {"query_id": query_id, "status": status, "nodes": nodes}

    async def aclose(self) -> None:
        await self.client.aclose()
