"""An OpenAI-compatible face on the ingress: `POST /v1/chat/completions` and `GET /v1/models`,
so an application that speaks the OpenAI API asks SPEX as it would ask any model.

`model` names the search: `spex:<algorithm>-<target>` (`spex:rebase-16`, `spex:rstar-8`) or
`spex:<algorithm>` (its default target). The question is the last user message. SPEX's other
client fields ride as extra body fields (the client's `extra_body`; `EXTRA_FIELDS`), `seed`
(OpenAI's own) among them. The reply is one choice whose message is the solution's steps and its
answer; `usage.completion_tokens` counts every token the search generated; a `spex` field
carries the query id, the answer, the tree's size and digest. `stream: true` sends a
`chat.completion.chunk` per change of the tree (no choices; its `spex` field says what
changed), then the content, then `[DONE]`. Errors are OpenAI's shape:
`{"error": {"message", "type", "param", "code"}}`. A client that goes away cancels its query.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from redis.exceptions import RedisError

from spex.proto import ALGORITHMS, AnswerResult, SubmissionError, submission
from spex.shared.runtime.client import Backpressure, IngressClient, KeyConflict, UnknownQuery
from spex.shared.runtime.views import node_json

__all__ = ["OpenAIRoutes", "parse_model"]

MODEL = re.compile(r"spex:(?P<algorithm>[a-z]+)(?:-(?P<target>[0-9]{1,6}))?")
LISTED_TARGETS = (4, 8, 16)
# The client fields a request's body carries beside `model` (the algorithm and the target) and
# `messages` (the question): the rest of the submission's, `seed` (OpenAI's own) among them,
# but its client key and prompt tokens.
EXTRA_FIELDS = tuple(
    name
    for name in submission.CLIENT_FIELDS
    if name not in ("question", "algorithm", "client_key", "prompt_tokens")
)
WAIT_S = 3600.0  # the longest a request waits for its answer
POLL_S = 0.05  # how often a waiting request looks for its answer
BODY_TIMEOUT_S = 15.0  # a body not read in whole within this is a 408 (as the ingress's own)


def parse_model(name: object) -> tuple[str, int | None]:
    """(algorithm, target or None) of a model name; SubmissionError naming `model` if it is
    not one of ours."""
    m = MODEL.fullmatch(name) if isinstance(name, str) else None
    if m is None or m["algorithm"] not in ALGORITHMS:
        raise SubmissionError(
            "model", f"expected spex:<algorithm>[-<target>], algorithm one of {list(ALGORITHMS)}"
        )
    return m["algorithm"], int(m["target"]) if m["target"] else None


def _error(status: int, message: str, kind: str, param: str | None = None) -> web.Response:
    code = {404: "model_not_found", 429: "rate_limit_exceeded"}.get(status)
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return web.json_response(body, status=status)


def _question(messages: object) -> str:
    """The last user message's text (a string, or a list of text parts)."""
    if not isinstance(messages, list) or not messages:
        raise SubmissionError("messages", "expected a non-empty list of messages")
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
                texts = [t for t in parts if isinstance(t, str)]
                if len(texts) != len(parts):
                    raise SubmissionError("messages", "a text part's text must be a string")
                return "\n".join(texts)
            raise SubmissionError("messages", "a user message's content must be text")
    raise SubmissionError("messages", "no user message")


def _content(answer: AnswerResult) -> str:
    steps = "\n\n".join(s.strip() for s in answer.solution if s.strip())
    if answer.answer is not None and (not steps or answer.answer not in steps):
        steps = f"{steps}\n\nThe answer is {answer.answer}.".strip()
    return steps


class OpenAIRoutes:
    def __init__(self, client: IngressClient, client_of: Callable[[web.Request], str]) -> None:
        self.client = client
        self.client_of = client_of  # request -> the token's client name

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/v1/models", self.models), web.post("/v1/chat/completions", self.chat)]

    async def models(self, request: web.Request) -> web.Response:
        data = [
            {"id": f"spex:{a}-{t}", "object": "model", "created": 0, "owned_by": "spex"}
            for a in ALGORITHMS
            for t in LISTED_TARGETS
        ]
        return web.json_response({"object": "list", "data": data})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = json.loads(await asyncio.wait_for(request.read(), BODY_TIMEOUT_S))
        except TimeoutError:
            return _error(408, f"body: not sent within {BODY_TIMEOUT_S:.0f} s", "invalid_request_error")
        except web.HTTPRequestEntityTooLarge:
            return _error(413, "body: too large", "invalid_request_error")
        except (ValueError, RecursionError):
            return _error(400, "body: not a JSON object", "invalid_request_error")
        if not isinstance(body, dict):
            return _error(400, "body: expected a JSON object", "invalid_request_error")
        model = body.get("model")
        try:
            algorithm, target = parse_model(model)
        except SubmissionError as exc:
            return _error(404, str(exc), "invalid_request_error", "model")
        try:
            question = _question(body.get("messages"))
            fields = {k: body[k] for k in EXTRA_FIELDS if body.get(k) is not None}
            if target is not None:
                fields.setdefault("target", target)
            fields = submission.check_fields(fields)
            qid = await self.client.submit(
                question, algorithm=algorithm, client=self.client_of(request), **fields
            )
        except SubmissionError as exc:
            return _error(400, str(exc), "invalid_request_error", exc.field)
        except KeyConflict as exc:
            return _error(409, str(exc), "invalid_request_error")
        except Backpressure as exc:
            return _error(429, str(exc), "rate_limit_error")
        try:
            if body.get("stream"):
                return await self._stream(request, qid, str(model))
            answer = await self._wait(request, qid)
        except asyncio.CancelledError:  # the client went away: nobody wants the answer
            await asyncio.shield(self._cancel(qid))
            raise
        except ConnectionError:
            await self._cancel(qid)
            return web.Response(status=499)  # nobody is there to read it
        if answer is None:
            return _error(504, f"no answer within {WAIT_S:.0f} s (query {qid})", "timeout")
        if answer.error:
            return _error(500, f"the search failed: {answer.error} (query {qid})", "server_error")
        return web.json_response(_completion(qid, str(model), answer))

    async def _cancel(self, qid: str) -> None:
        with contextlib.suppress(UnknownQuery):  # answered and expired meanwhile
            await self.client.cancel(qid)

    async def _wait(self, request: web.Request, qid: str) -> AnswerResult | None:
        """The answer, or None after WAIT_S; ConnectionError once the client has gone."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            answer = await self.client.result(qid)
            if answer is not None:
                return answer
            if request.transport is None or request.transport.is_closing():
                raise ConnectionError("the client went away")
            await asyncio.sleep(POLL_S)
        return None

    async def _stream(self, request: web.Request, qid: str, model: str) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        head = {
            "id": f"chatcmpl-{qid}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
        }

        async def send(chunk: dict[str, Any] | None) -> None:
            data = "[DONE]" if chunk is None else json.dumps({**head, **chunk})
            await response.write(f"data: {data}\n\n".encode())

        try:
            await self._events(qid, send)
            await response.write_eof()
        except ConnectionError:  # the client went away: nobody wants the answer
            await self._cancel(qid)
        except RedisError:  # the queue went away mid-stream: say so, and end the stream
            with contextlib.suppress(ConnectionError):
                await send({"choices": [], "spex": {"query_id": qid, "error": "the queue is unreachable"}})
                await send(None)
        return response

    async def _events(self, qid: str, send: Any) -> None:
        """The chunks of a streamed completion: the role, a chunk per tree event, the content."""
        await send(
            {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
        )
        after = "0"
        while True:
            answer = await self.client.result(qid)
            events, after = await self.client.tree_events(qid, after, block_ms=None if answer else 1000)
            for event in events:
                await send({"choices": [], "spex": {"query_id": qid, "node": node_json(event)}})
            if not events and answer is not None:
                break
        if answer.error:
            await send({"choices": [], "spex": {"query_id": qid, "error": answer.error}})
        else:
            delta = {"index": 0, "delta": {"content": _content(answer)}, "finish_reason": None}
            await send({"choices": [delta]})
        done = {"index": 0, "delta": {}, "finish_reason": "stop"}
        await send({"choices": [done], "spex": _spex(qid, answer)})
        await send(None)


def _spex(qid: str, answer: AnswerResult) -> dict[str, Any]:
    return {
        "query_id": qid, "answer": answer.answer, "nodes": answer.nodes,
        "latency_s": round(answer.latency_s, 4), "tree_digest": answer.tree_digest,
        "speculative_issued": answer.spec_issued, "speculative_adopted": answer.spec_adopted,
        "correct": answer.correct, "error": answer.error or None,
    }  # fmt: skip


def _completion(qid: str, model: str, answer: AnswerResult) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{qid}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": _content(answer)},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": 0,
            "completion_tokens": answer.tokens_generated,
            "total_tokens": answer.tokens_generated,
        },
        "spex": _spex(qid, answer),
    }
