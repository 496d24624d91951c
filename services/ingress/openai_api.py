"""An OpenAI-compatible face on the ingress: `POST /v1/chat/completions` and `GET /v1/models`,
so an application that speaks the OpenAI API asks SPEX as it would ask any model.

`model` names the search: `spex:<algorithm>-<target>` (`spex:rebase-16`, `spex:rstar-8`) or
`spex:<algorithm>` (its default target). The question is the one user message. Every other
parameter is honoured or refused with a 400 naming it (`spex.services.ingress.openai_params`); SPEX's
own client fields ride as extra body fields (the client's `extra_body`). The reply is one
choice whose message is the solution's steps and its answer (cut at `stop` and `max_tokens`);
`usage` counts the question's and the reply's tokens; a `spex` field carries the query id, the
answer, the tree's size and digest, and every token the search generated. `stream: true` sends
a `chat.completion.chunk` per change of the tree (no choices; its `spex` field says what
changed), then the content, then (with `stream_options.include_usage`) the usage, then
`[DONE]`. A caller holds at most SPEX_HTTP_STREAMS_PER_CLIENT streamed completions and event
streams open, and as many completions waiting (`long_lived`); past that, a 429. Every refusal
on these routes, the ingress's own (401, 503, no such route) among them, is OpenAI's shape:
`{"error": {"message", "type", "param", "code"}}`. A client that goes away cancels its query.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web
from redis.exceptions import RedisClusterException, RedisError

from spex.proto import AnswerResult, SubmissionError, SubmissionTooLarge
from spex.services.ingress.backpressure import with_retry_after
from spex.services.ingress.http_body import BodyRefused, read_json_object
from spex.services.ingress.long_lived import POLL_S, STREAM, WAIT, Slots, SlotsFull, poll
from spex.services.ingress.openai_bodies import (
    Chunk,
    ChunkChoice,
    ChunkHead,
    Completion,
    ErrorBody,
    ModelCard,
    ModelList,
    SearchAbout,
    SpexReply,
    Usage,
)
from spex.services.ingress.openai_params import ChatAsk, ParamError, chat_ask
from spex.shared.core.search import SEARCHES
from spex.shared.runtime.availability import unavailable
from spex.shared.runtime.client import IngressClient
from spex.shared.runtime.pool import PoolBusy
from spex.shared.runtime.refusals import Answered, Backpressure, KeyConflict, MemoryFull, UnknownQuery
from spex.shared.runtime.searches import catalogue, check_search
from spex.shared.runtime.views import demonstration, node_json, served_json

__all__ = ["OpenAIRoutes", "openai_error", "serves"]

LISTED_TARGETS = (4, 8, 16)
WAIT_S = 3600.0  # the longest a request waits for its answer
PATHS = ("/v1/chat/", "/v1/models")  # the paths whose refusals are OpenAI's shape (prefixes)
# OpenAI's error code of a refusal with no more particular one, by status.
CODES = {401: "invalid_api_key", 429: "rate_limit_exceeded"}


def serves(path: str) -> bool:
    """Whether `path` is one of the OpenAI face's (or under one): its refusals are OpenAI's."""
    return path.startswith(PATHS)


def openai_error(
    status: int,
    message: str,
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    """A refusal in OpenAI's shape: its type by status, its code OpenAI's for it (a 429 or 503
    says when to retry)."""
    kind = (
        "server_error" if status >= 500 else "rate_limit_error" if status == 429 else "invalid_request_error"
    )
    body: ErrorBody = {
        "error": {"message": message, "type": kind, "param": param, "code": code or CODES.get(status)}
    }
    return web.json_response(body, status=status, headers=with_retry_after(status, headers))


def _content(answer: AnswerResult) -> str:
    steps = "\n\n".join(s.strip() for s in answer.solution if s.strip())
    if answer.answer is not None and (not steps or answer.answer not in steps):
        steps = f"{steps}\n\nThe answer is {answer.answer}.".strip()
    return steps


def _reply(answer: AnswerResult, ask: ChatAsk) -> tuple[str, str, Usage]:
    """(content, finish_reason, usage) of the reply: the answer cut by the client's stop and
    max_tokens; synthetic content says first what it is, since a client reads only this text
    (the label is the server's notice: neither cut nor counted)."""
    text, finish = ask.reply(_content(answer))
    label = demonstration(answer.served_by)
    return (f"[{label}]\n\n{text}" if label else text), finish, ask.usage(text)


class OpenAIRoutes:
    def __init__(
        self,
        client: IngressClient,
        client_of: Callable[[web.Request], str],
        caller_of: Callable[[web.Request], str],
        max_body: int,
        temperature: float,
        slots: Slots,
    ) -> None:
        self.client = client
        self.slots = slots  # long-lived requests open per caller, shared with the event streams
        self.client_of = client_of  # request -> the token's client name
        self.caller_of = caller_of  # request -> whom its slot is counted against (`long_lived`)
        self.max_body = max_body
        self.temperature = temperature  # the operator's sampling temperature: the one accepted
        self.log = structlog.get_logger().bind(service="ingress")

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/v1/models", self.models), web.post("/v1/chat/completions", self.chat)]

    async def models(self, request: web.Request) -> web.Response:
        """Each search served at the targets of `LISTED_TARGETS` it takes, with a `spex` field
        saying what it is: its family, default answer selection, parameters (with their
        defaults) and where it came from (built-in, an entry point, SPEX_SEARCH_PLUGINS)."""
        data: list[ModelCard] = []
        for entry in catalogue():
            about: SearchAbout = {
                "search": entry.name,
                "family": entry.family,
                "answer_selection": entry.default_selection,
                "parameters": entry.parameters,
                "origin": entry.origin,
                "summary": entry.summary,
            }
            for t in LISTED_TARGETS:
                if _takes(entry.name, t):
                    data.append({"id": f"spex:{entry.name}-{t}", "object": "model", "created": 0,
                                 "owned_by": "spex", "spex": about})  # fmt: skip
        models: ModelList = {"object": "list", "data": data}
        return web.json_response(models)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await read_json_object(request, self.max_body)
        except BodyRefused as exc:
            response = openai_error(
                exc.status, str(exc), "body", "invalid_json" if exc.status == 400 else None
            )
            if exc.close:
                response.force_close()
            return response
        kind = STREAM if body.get("stream") is True else WAIT  # a wrong type is refused in `_answer`
        try:
            with self.slots.hold(self.caller_of(request), kind):
                return await self._answer(request, body)
        except SlotsFull as exc:
            return openai_error(429, str(exc))

    async def _answer(self, request: web.Request, body: dict[str, object]) -> web.StreamResponse:
        """Submit the question `body` asks and answer it: a completion, or a stream of chunks."""
        try:
            ask = chat_ask(body, self.temperature, self.client.limits.searches or SEARCHES)
            qid = await self.client.submit(
                ask.question, algorithm=ask.algorithm, client=self.client_of(request), **ask.fields
            )
        except ParamError as exc:
            return openai_error(exc.status, str(exc), exc.field, exc.code)
        except SubmissionTooLarge as exc:
            return openai_error(413, str(exc), "messages", "invalid_value")
        except SubmissionError as exc:
            return openai_error(400, str(exc), exc.field, "invalid_value")
        except KeyConflict as exc:
            return openai_error(409, str(exc))
        except MemoryFull as exc:  # Redis has no room for its search: the platform's, a 503
            return openai_error(503, str(exc), headers={"Retry-After": str(exc.retry_after_s)})
        except Backpressure as exc:
            return openai_error(429, str(exc))
        model = str(body["model"])
        self.log.info("chat_completion_submitted", query_id=qid, model=model, user=_digest(ask.user))
        try:
            if ask.stream:
                return await self._stream(request, qid, model, ask)
            answer = await self._wait(request, qid)
        except asyncio.CancelledError:  # the client went away: nobody wants the answer
            await asyncio.shield(self._cancel(qid))
            raise
        except ConnectionError:
            await self._cancel(qid)
            return web.Response(status=499)  # nobody is there to read it
        if answer is None:
            return openai_error(504, f"no answer within {WAIT_S:.0f} s (query {qid})")
        if answer.error:
            return openai_error(500, f"the search failed: {answer.error} (query {qid})")
        return web.json_response(_completion(qid, model, answer, ask))

    async def _cancel(self, qid: str) -> None:
        with contextlib.suppress(UnknownQuery, Answered):  # answered (and expired) meanwhile
            await self.client.cancel(qid)

    async def _wait(self, request: web.Request, qid: str) -> AnswerResult | None:
        """The answer, or None after WAIT_S; ConnectionError once the client has gone. The
        question is accepted already: Redis unavailable meanwhile is waited out, not a 503."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            try:
                answer = await self.client.result(qid)
            except (RedisError, RedisClusterException) as exc:  # a busy pool, Redis away: look again
                if not isinstance(exc, PoolBusy) and unavailable(exc) is None:
                    raise
            else:
                if answer is not None:
                    return answer
            if request.transport is None or request.transport.is_closing():
                raise ConnectionError("the client went away")
            await asyncio.sleep(POLL_S)
        return None

    async def _stream(self, request: web.Request, qid: str, model: str, ask: ChatAsk) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        head: ChunkHead = {
            "id": f"chatcmpl-{qid}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
        }
        if ask.include_usage:
            head["usage"] = None  # OpenAI's: every chunk but the last, the usage's, says none

        async def send(chunk: Chunk | None) -> None:
            data = "[DONE]" if chunk is None else json.dumps({**head, **chunk})
            await response.write(f"data: {data}\n\n".encode())

        try:
            await self._events(qid, send, ask)
            await response.write_eof()
        except ConnectionError:  # the client went away: nobody wants the answer
            await self._cancel(qid)
        except RedisError:  # the queue went away mid-stream: say so, and end the stream
            with contextlib.suppress(ConnectionError):
                await send({"choices": [], "spex": {"query_id": qid, "error": "the queue is unreachable"}})
                await send(None)
        return response

    async def _events(self, qid: str, send: Callable[[Chunk | None], Awaitable[None]], ask: ChatAsk) -> None:
        """The chunks of a streamed completion: the role, a chunk per tree event, the content,
        the end (and the usage, if asked for)."""
        await send(
            {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
        )
        after = "0"
        while True:
            answer, events, after = await poll(self.client, qid, after)
            for event in events:
                await send({"choices": [], "spex": {"query_id": qid, "node": node_json(event)}})
            if not events and answer is not None:
                break
            if not events:
                await asyncio.sleep(POLL_S)
        content, finish, usage = ("", "stop", ask.usage("")) if answer.error else _reply(answer, ask)
        if answer.error:
            await send({"choices": [], "spex": {"query_id": qid, "error": answer.error}})
        else:
            await send({"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}]})
        done: ChunkChoice = {"index": 0, "delta": {}, "finish_reason": finish}
        await send({"choices": [done], "spex": _spex(qid, answer)})
        if ask.include_usage:
            await send({"choices": [], "usage": usage})
        await send(None)


def _spex(qid: str, answer: AnswerResult) -> SpexReply:
    return {
        "query_id": qid, "answer": answer.answer, "nodes": answer.nodes,
        "tokens_generated": answer.tokens_generated, "latency_s": round(answer.latency_s, 4),
        "tree_digest": answer.tree_digest, "speculative_issued": answer.spec_issued,
        "speculative_adopted": answer.spec_adopted, "correct": answer.correct,
        "error": answer.error or None, "served_by": served_json(answer.served_by),
    }  # fmt: skip


def _completion(qid: str, model: str, answer: AnswerResult, ask: ChatAsk) -> Completion:
    content, finish, usage = _reply(answer, ask)
    return {
        "id": f"chatcmpl-{qid}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}
        ],
        "usage": usage,
        "spex": _spex(qid, answer),
    }


def _takes(search: str, target: int) -> bool:
    """Search `search` runs at `target` with its default parameters."""
    try:
        check_search(search, target, {})
    except ValueError:
        return False
    return True


def _digest(user: str) -> str | None:
    """What the log keeps of an end user's id: a digest, enough to trace one user's requests by,
    not what the client sent (None: none sent)."""
    return hashlib.sha256(user.encode()).hexdigest()[:16] if user else None
