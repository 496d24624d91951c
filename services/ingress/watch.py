"""What the ingress shows of the searches: a query's answer and tree over HTTP, its tree's
events as they happen (server-sent events), the cluster's figures, and the live web view that
draws them (`web/index.html`: plain HTML, SVG and JavaScript, no build step).

GET /v1/questions/{id}/tree → every node (parent, text, reward, answer, tokens, state, times);
GET /v1/questions/{id}/events → `text/event-stream`: an `node` event per change of a node,
then an `answer` event, then the stream ends (a client holds at most
SPEX_HTTP_STREAMS_PER_CLIENT such streams and chat completions open: `long_lived`);
GET /v1/overview → the cluster's figures (`views.overview`: with client tokens or an operator's
token set, a caller's own, and everyone's to the operator's token alone); GET / → the web view;
GET /health (the process answers) and GET /ready (it reaches Redis: `readiness`). The routes
are the ingress's, behind its authentication: the page sends its token (asked for once) with
every request, so it never rides in a URL.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from importlib import resources

from aiohttp import web
from redis.exceptions import RedisError

from spex.proto import AnswerResult, ServedBy
from spex.services.ingress.backpressure import with_retry_after
from spex.services.ingress.long_lived import POLL_S, STREAM, Slots, SlotsFull, poll
from spex.services.ingress.readiness import Readiness
from spex.shared.runtime.bodies import AnswerJson, TreeJson
from spex.shared.runtime.client import IngressClient
from spex.shared.runtime.views import answer_status, node_json, overview, served_json

__all__ = ["KEEPALIVE_S", "WatchRoutes", "answer_json"]

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
OVERVIEW_EVERY_S = 1.0  # the overview is computed at most this often (per client)
KEEPALIVE_S = 15.0  # an idle event stream sends a comment this often (proxies close silent ones)


def answer_json(answer: AnswerResult) -> AnswerJson:
    """An answer as the ingress returns it: what was found, how, and at what cost."""
    out: AnswerJson = {
        "status": answer_status(answer),
        "answer": answer.answer,
        "correct": answer.correct,
        "solution": answer.solution,
        "nodes": answer.nodes,
        "tokens_generated": answer.tokens_generated,
        "latency_s": round(answer.latency_s, 4),
        "tree_digest": answer.tree_digest,
        "early_stopped": answer.early_stopped,
        "speculative_issued": answer.spec_issued,
        "speculative_adopted": answer.spec_adopted,
        "served_by": served_json(answer.served_by),
    }
    if answer.error:
        out["error"] = answer.error
    return out


class WatchRoutes:
    """The watching half of the ingress's routes; `known(request)` is the ingress's check that
    the query exists and is the caller's (a 404 response, or None)."""

    def __init__(
        self,
        client: IngressClient,
        known: Callable[[web.Request, str], Awaitable[web.Response | None]],
        keys: tuple[web.RequestKey[str], web.RequestKey[str], web.RequestKey[bool]],
        scoped: bool,
        slots: Slots,
        served: ServedBy | None = None,
    ) -> None:
        self.client = client
        self.slots = slots  # long-lived requests open per client, shared with the OpenAI face
        self.served = served_json(served)  # what the pipeline answers with (its settings say)
        self.known = known
        # The request's client name, its caller (`long_lived`), whether it bears the operator's
        # token; and whether the overview is scoped (client tokens or an operator's token set).
        self.client_key, self.caller_key, self.operator_key = keys
        self.scoped = scoped
        self._overviews: dict[str | None, tuple[float, dict[str, object]]] = {}
        self.readiness = Readiness(client.r)
        self.page = resources.files("spex.services.ingress").joinpath("web/index.html").read_bytes()

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/", self.index),
            web.get("/health", self.health),
            web.get("/ready", self.ready),
            web.get("/v1/overview", self.overview),
            web.get("/v1/questions/{qid}/tree", self.tree),
            web.get("/v1/questions/{qid}/events", self.events),
        ]

    async def index(self, request: web.Request) -> web.Response:
        return web.Response(body=self.page, content_type="text/html", charset="utf-8")

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def ready(self, request: web.Request) -> web.Response:
        reason = await self.readiness.unready()
        if reason is not None:
            return web.json_response(
                {"status": "unready", "error": reason}, status=503, headers=with_retry_after(503)
            )
        return web.json_response({"status": "ready"})

    async def aclose(self) -> None:
        await self.readiness.aclose()

    async def overview(self, request: web.Request) -> web.Response:
        # Scoped (client tokens or an operator's token set), a caller sees its own figures only
        # and the operator everyone's. Computed at most once a second per client, however many
        # pages poll it.
        client = None if request[self.operator_key] or not self.scoped else request[self.client_key]
        at, figures = self._overviews.get(client, (0.0, {}))
        if time.monotonic() - at >= OVERVIEW_EVERY_S:
            figures = {**await overview(self.client, client), "served_by": self.served}
            self._overviews[client] = (time.monotonic(), figures)
        return web.json_response(figures)

    async def tree(self, request: web.Request) -> web.Response:
        qid = request.match_info["qid"]
        refused = await self.known(request, qid)
        if refused is not None:
            return refused
        nodes = await self.client.tree(qid)
        answer = await self.client.result(qid)
        status = answer_json(answer)["status"] if answer is not None else "searching"
        body: TreeJson = {"query_id": qid, "status": status, "nodes": nodes}
        return web.json_response(body)

    async def events(self, request: web.Request) -> web.StreamResponse:
        qid = request.match_info["qid"]
        refused = await self.known(request, qid)
        if refused is not None:
            return refused
        try:
            with self.slots.hold(request[self.caller_key], STREAM):
                return await self._events(request, qid)
        except SlotsFull as exc:
            return web.json_response({"error": f"events: {exc}"}, status=429, headers=with_retry_after(429))

    async def _events(self, request: web.Request, qid: str) -> web.StreamResponse:
        response = web.StreamResponse(headers=SSE_HEADERS)
        await response.prepare(request)
        try:
            await self._stream(request, qid, response)
            await response.write_eof()
        except ConnectionError:  # the client went away
            pass
        except RedisError:  # the queue went away mid-stream: end it (the client may reconnect)
            with contextlib.suppress(ConnectionError):
                await response.write(_sse("error", {"error": "the queue is unreachable; retry later"}))
        return response

    async def _stream(self, request: web.Request, qid: str, response: web.StreamResponse) -> None:
        after, quiet_since = "0", time.monotonic()
        while True:
            if request.transport is None or request.transport.is_closing():
                raise ConnectionError("the client went away")
            answer, events, after = await poll(self.client, qid, after)
            for event in events:
                await response.write(_sse("node", node_json(event)))
            if events:
                quiet_since = time.monotonic()
                continue
            if answer is not None:  # every event the answer follows is sent: the end
                await response.write(_sse("answer", {"query_id": qid, **answer_json(answer)}))
                return
            if time.monotonic() - quiet_since >= KEEPALIVE_S:
                await response.write(b": keepalive\n\n")
                quiet_since = time.monotonic()
            await asyncio.sleep(POLL_S)


def _sse(event: str, data: Mapping[str, object]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()
