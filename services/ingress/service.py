"""HTTP ingress (`spex worker ingress`): POST /v1/questions, GET and DELETE /v1/questions/{id};
the tree, its live events, the cluster's overview and the web view (`watch`); an
OpenAI-compatible chat completions endpoint (`openai_api`); /health and /ready; and
/openapi.json, the OpenAPI document of all of these (`openapi`).

A thin HTTP face on the ingress client (`spex.shared.runtime.client`): the body's fields are
checked and validated by `spex.proto.submission`, the one validator every way in shares.

Security: it binds loopback unless `SPEX_HTTP_HOST` says otherwise; who calls is `callers`'. With
tokens configured (`SPEX_AUTH_TOKENS` or `SPEX_AUTH_TOKENS_FILE`, never the command line) every request needs
`Authorization: Bearer <token>`, and client keys and results are scoped to the token's name:
one client can neither reuse another's key nor read or cancel another's question. Every
refusal is a one-line JSON reason (on the OpenAI face's paths, OpenAI's error shape): 400 a
bad field or a body that is not a JSON object (`http_body` says why), 401 no or a wrong token,
404 no such question, 408 a body not sent in time, 409 a client key reused for a different
question (or a cancel of a question answered already), 413 too large (a declared length is
refused before the body is read), 415 a body of another type than JSON (none given: JSON), 429
one client's excess, 503 the ingress busy (no pooled Redis connection free in a moment:
`backpressure`), Redis unreachable, Redis refusing writes (out of memory: the reason says so),
or a client key not found while Redis's loss of its data stands (`data_loss`); every 429 and
503 says when to retry (Retry-After).
A request aiohttp's parser refuses (a malformed header) is a JSON 400 too, and neither it nor
the log quotes the request's bytes (they may hold a token).
A connection that has not sent a whole request within `IDLE_TIMEOUT_S` is closed.
A new question is a 503 with Retry-After while Redis has no room for its search (`admission`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable
from http import HTTPStatus

import redis.asyncio as aioredis
import structlog
from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest
from redis.exceptions import AuthenticationError, RedisClusterException, RedisError

from spex.proto import SubmissionError, SubmissionTooLarge, submission
from spex.proto.names import Partitions
from spex.proto.submission import twin_id
from spex.services.ingress import admission, openapi
from spex.services.ingress.backpressure import BusyRefusals, with_retry_after
from spex.services.ingress.callers import Callers
from spex.services.ingress.http_body import BodyRefused, read_json_object
from spex.services.ingress.long_lived import Slots
from spex.services.ingress.openai_api import OpenAIRoutes, openai_error, serves
from spex.services.ingress.watch import WatchRoutes, answer_json
from spex.shared.runtime.availability import REDIS, REFUSING_RETRY_AFTER_S, refusal, unavailable
from spex.shared.runtime.client import IngressClient
from spex.shared.runtime.metrics import BACKLOG, HTTP_REQUESTS, IN_FLIGHT
from spex.shared.runtime.pool import PoolBusy
from spex.shared.runtime.refusals import (
    Answered,
    Backpressure,
    DataLost,
    KeyConflict,
    MemoryFull,
    Recovering,
    UnknownQuery,
)
from spex.shared.runtime.service import Service, run_service
from spex.shared.runtime.settings import Settings
from spex.shared.runtime.views import served_by, twin_json

__all__ = ["IngressService", "main"]

IDLE_TIMEOUT_S = 15.0  # a connection without a whole request (headers) for this long is closed
GAUGE_EVERY_S = 1.0  # how often the in-flight and backlog gauges are read
# Served without a token: the page itself, the probes and the API's description hold nothing
# of anyone's.
OPEN_PATHS = frozenset({"/", "/health", "/ready", "/openapi.json"})
CLIENT = web.RequestKey("client", str)  # the token's name ("" without auth)
# Who holds a long-lived request open (`long_lived`): the token's name, or without tokens the
# address the connection comes from; and whether the request bears the operator's token.
CALLER = web.RequestKey("caller", str)
OPERATOR = web.RequestKey("operator", bool)
OPERATOR_PATHS = frozenset({"/v1/overview"})  # where the operator's token is honoured
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class IngressService(Service):
    """POST /v1/questions {the client fields: `spex.proto.submission.CLIENT_FIELDS`} → 202
    {"query_id"}; GET /v1/questions/{id} → 200 with the answer (or
    its error), 202 while it is being searched; DELETE /v1/questions/{id} → 202 (cancelled)."""

    def __init__(self, client: aioredis.Redis, settings: Settings) -> None:
        parts = Partitions(settings.partitions)  # the deployment's: every key built here
        self.memory = admission.MemoryAdmission(client, settings.memory_headroom, partitions=parts)
        self.client = IngressClient(
            client, settings.backlog_limit, settings.limits, settings.memory_per_target, self.memory.room,
            settings.data_loss_wait_s, partitions=parts,
        )  # fmt: skip
        self.host, self.port = settings.http_host, settings.http_port
        self.max_body = settings.max_message_bytes
        self.callers = Callers(settings)
        self.submitted = 0
        slots = Slots(settings.http_streams_per_client)  # event streams and completions, per caller
        self.watch = WatchRoutes(
            self.client, self._known, (CLIENT, CALLER, OPERATOR), self.callers.scoped, slots,
            served_by(settings),
        )  # fmt: skip
        self.openai = OpenAIRoutes(
            self.client, lambda request: request[CLIENT], lambda request: request[CALLER], self.max_body,
            settings.sampling_temperature, slots,
        )  # fmt: skip
        self._runner: web.AppRunner | None = None  # listening once `prepare` ran
        self.busy = BusyRefusals()
        self.refusing = False  # Redis's last unavailability was a refusal of writes (not unreachable)
        self.log = structlog.get_logger().bind(service="ingress", consumer=settings.consumer)
        if not self.callers.tokens and self.host not in ("127.0.0.1", "localhost", "::1"):
            self.log.warning("ingress_unauthenticated", host=self.host, hint="set SPEX_AUTH_TOKENS_FILE")

    def summary(self) -> dict[str, int]:
        return {"submitted": self.submitted}

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.max_body, middlewares=[self._guard])
        app.add_routes(
            [
                web.post("/v1/questions", self.post),
                web.get("/v1/questions/{qid}", self.get),
                web.delete("/v1/questions/{qid}", self.delete),
                *self.watch.routes(),
                *self.openai.routes(),
                web.get("/openapi.json", self.describe),
            ]
        )
        return app

    async def describe(self, request: web.Request) -> web.Response:
        """The OpenAPI document of these routes."""
        return web.json_response(openapi.document(OPEN_PATHS))

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Authentication, then the handler; Redis trouble is a 503, never a crash."""
        status = 500  # a handler that raised (aiohttp answers it)
        try:
            response = await self._guarded(request, handler)
            status = response.status
            return response
        finally:
            route = request.match_info.route.resource
            HTTP_REQUESTS.labels(route.canonical if route is not None else "unmatched", str(status)).inc()

    async def _guarded(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        # The OpenAI face's refusals are OpenAI's shape, SPEX's own routes' one line.
        refuse = openai_error if serves(request.path) else _error
        request[OPERATOR] = request.path in OPERATOR_PATHS and self.callers.operator(request)
        client = "" if request.path in OPEN_PATHS or request[OPERATOR] else self.callers.client_of(request)
        if client is None:
            message = "authorization: a valid bearer token is required"
            return refuse(401, message, headers={"WWW-Authenticate": "Bearer"})
        request[CLIENT] = client
        request[CALLER] = self.callers.caller(request, client)
        try:
            response = await handler(request)
            # Redis is back once a write goes through, or a read while it was unreachable.
            if response.status < 300 and (request.method != "GET" or not self.refusing):
                REDIS.up(self, self.log)
            return response
        except PoolBusy as exc:  # back-pressure: Redis is not known to be away
            return refuse(503, self.busy.reason(exc))
        except AuthenticationError:  # the password changed under a running ingress: an operator's fix
            REDIS.down(self, "Redis refuses the ingress's password (SPEX_REDIS_PASSWORD_FILE)", self.log)
            return refuse(503, "the queue refuses the ingress's credentials (an operator's fix)")
        except (RedisError, RedisClusterException) as exc:  # unreachable, between primaries, refusing writes
            reason = unavailable(exc)
            if reason is None:
                raise
            REDIS.down(self, reason, self.log)
            self.refusing = refusal(exc) is not None  # reads go on while Redis refuses writes
            if not self.refusing:  # the address is in the log, not the reply; Retry-After 1 s
                return refuse(503, "the queue is unreachable; retry later")
            return refuse(503, f"{reason}; retry later", headers={"Retry-After": str(REFUSING_RETRY_AFTER_S)})
        except web.HTTPException as exc:  # aiohttp's own refusals (no such route, wrong method)
            if exc.status < 400:
                raise
            allow = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
            message = f"{request.method} {request.path[:64]}: {exc.reason.lower()}"
            return refuse(exc.status, message, headers=allow)

    async def post(self, request: web.Request) -> web.Response:
        if "Content-Type" in request.headers and request.content_type != "application/json":
            return _error(415, "body: send it as application/json", close=True)  # not read
        try:
            body = await read_json_object(request, self.max_body)
        except BodyRefused as exc:
            return _error(exc.status, str(exc), close=exc.close)
        try:
            fields = submission.check_fields(body)
            qid = await self.client.submit(fields.pop("question", ""), client=request[CLIENT], **fields)
        except SubmissionTooLarge as exc:
            return _error(413, str(exc))
        except SubmissionError as exc:
            return _error(400, str(exc))
        except KeyConflict as exc:
            return _error(409, str(exc))
        except MemoryFull as exc:  # Redis has no room for its search: the platform's, a 503
            return _error(503, str(exc), {"Retry-After": str(exc.retry_after_s)})
        except DataLost as exc:  # its client key may be one being stored again: the platform's too
            return _error(503, str(exc), {"Retry-After": str(exc.retry_after_s)})
        except Backpressure as exc:
            return _error(429, str(exc))
        self.submitted += 1
        return web.json_response({"query_id": qid}, status=202)

    async def _known(self, request: web.Request, qid: str) -> web.Response | None:
        """None if `qid` is a question of the caller's, else the 404 that says it is not."""
        try:
            submission.check_query_id(qid)
            await self.client.request(qid, request[CLIENT])
        except Recovering:  # Redis lost its data moments ago: a coordinator stores it again
            return None
        except (SubmissionError, UnknownQuery):
            return _error(404, f"query_id: no question {qid[:64]!r}")
        return None

    async def get(self, request: web.Request) -> web.Response:
        qid = request.match_info["qid"]
        refused = await self._known(request, qid)
        if refused is not None:
            return refused
        answer = await self.client.result(qid)
        if answer is None:
            return web.json_response({"status": "searching"}, status=202)
        body = answer_json(answer)
        with contextlib.suppress(UnknownQuery):  # its request expired since: the answer alone
            if (await self.client.request(qid, request[CLIENT])).baseline_twin:
                twin = twin_id(qid)
                body["baseline_twin"] = twin_json(twin, answer, await self.client.result(twin))
        return web.json_response(body)

    async def delete(self, request: web.Request) -> web.Response:
        qid = request.match_info["qid"]
        refused = await self._known(request, qid)
        if refused is not None:
            return refused
        try:
            await self.client.cancel(qid)
        except UnknownQuery:
            return _error(404, f"query_id: no question {qid[:64]!r}")
        except Answered as exc:
            return _error(409, str(exc))
        return web.json_response({"status": "cancelling"}, status=202)

    async def prepare(self) -> None:
        """Bind the port before the service says it started: a port in use is its one-line
        reason for not starting, not a crash loop after it."""
        self._runner = _Runner(self.app(), keepalive_timeout=IDLE_TIMEOUT_S, access_log=None)
        await self._runner.setup()
        try:
            await web.TCPSite(self._runner, self.host, self.port).start()
        except OSError as exc:
            await self._runner.cleanup()
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            where = f"{self.host}:{self.port}"
            raise OSError(f"SPEX_HTTP_PORT / --port: cannot listen on {where}: {reason}") from None

    async def run(self, stop: asyncio.Event) -> None:
        if self._runner is None:
            await self.prepare()
        assert self._runner is not None
        try:
            while not stop.is_set():
                await self._gauge()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), GAUGE_EVERY_S)
        finally:
            await self._runner.cleanup()
            await self.watch.aclose()

    async def _gauge(self) -> None:
        """The questions in flight and the backlog, for the metrics (Redis away: left as is)."""
        try:
            in_flight, held = await self.client.counts()
        except RedisError:
            return
        IN_FLIGHT.set(in_flight)
        BACKLOG.set(max(0, in_flight - held))


def _error(
    status: int, message: str, headers: dict[str, str] | None = None, close: bool = False
) -> web.Response:
    """A one-line JSON refusal (a 429 or 503 says when to retry); `close`: the connection too
    (a body left unread on it)."""
    response = web.json_response({"error": message}, status=status, headers=with_retry_after(status, headers))
    if close:
        response.force_close()
    return response


class _Handler(RequestHandler):
    """aiohttp's connection handler, but a request its parser refuses (or a handler's crash)
    is answered in JSON and logged in one line: aiohttp's own quotes the offending bytes in
    the reply and logs them with a traceback, and a malformed header may carry a token."""

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        structlog.get_logger().warning(
            "http_request_refused", service="ingress", status=status, error_type=type(exc).__name__
        )
        if request.writer.output_size > 0:
            raise ConnectionError("the response was sent already: cannot send the error")
        what = "malformed request" if status == 400 else HTTPStatus(status).phrase.lower()
        return _error(status, f"http: {what}", close=True)


class _Server(web.Server):
    def __call__(self) -> RequestHandler:
        return _Handler(self, loop=self._loop, **self._kwargs)


class _Runner(web.AppRunner):
    """An AppRunner whose connections are `_Handler`s."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = _Server  # the same server, its connections made by `_Server.__call__`
        return server


def main() -> int:
    # It serves requests: its Redis client retries a command once on a fresh connection, and
    # its pool is sized by its settings, a command waiting a moment for a connection.
    return run_service(
        "ingress", IngressService, retry_once=True, pool_size=lambda s: s.http_redis_connections
    )
