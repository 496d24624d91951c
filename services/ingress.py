"""Ingress: the Python client that submits questions and waits for answers, and the same
over HTTP (`spex worker ingress`: POST /v1/questions, GET /v1/questions/{id}).

`submit` is one script — remember the client key, count the question in flight, append to
the ingress stream — so a retried submission with the same client key is answered once, and a
backlog over `SPEX_BACKLOG_LIMIT` questions in flight is refused (backpressure) instead of
queued without bound. Answers come back on the query's reply key.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import redis.asyncio as aioredis
from aiohttp import web

from proto import AnswerResult, SubmitQuestionRequest, decode, encode
from proto.streams import ANSWERS, INGRESS, reply_key
from shared.search import ALGORITHMS
from shared.service import run_service
from shared.settings import Settings

__all__ = ["Backpressure", "IngressClient", "IngressService", "main"]

INFLIGHT = "ingress:inflight"

_SUBMIT = """
local existing = redis.call('GET', KEYS[1])
if existing then return {0, existing} end
local inflight = tonumber(redis.call('GET', KEYS[3]) or '0')
if inflight >= tonumber(ARGV[3]) then return {-1, tostring(inflight)} end
redis.call('SET', KEYS[1], ARGV[1], 'EX', 86400)
redis.call('INCR', KEYS[3])
redis.call('XADD', KEYS[2], '*', 'e', ARGV[2])
return {1, ARGV[1]}
"""


class Backpressure(RuntimeError):
    """The ingress backlog is full. Recoverable: retry later."""


class IngressClient:
    def __init__(self, client: aioredis.Redis, backlog_limit: int = 10_000) -> None:
        self.r = client
        self.backlog_limit = backlog_limit
        self._submit = client.register_script(_SUBMIT)

    async def submit(
        self,
        question: str,
        *,
        query_id: str | None = None,
        client_key: str | None = None,
        algorithm: str = "rebase",
        target: int = 16,
        seed: int = 0,
        mode: str = "baseline",
        prompt_tokens: int = 0,
    ) -> str:
        """Submit a question; returns its query id (the first one's, for a repeated key)."""
        qid = query_id or uuid.uuid4().hex[:16]
        key = client_key or qid
        req = SubmitQuestionRequest(
            msg_id=f"submit/{key}",
            query_id=qid,
            trace_id=uuid.uuid4().hex,
            created_ms=int(time.time() * 1000),
            question=question,
            client_key=key,
            algorithm=algorithm,
            target=target,
            seed=seed,
            mode=mode,
            prompt_tokens=prompt_tokens,
        )
        status, value = await self._submit(
            keys=[f"submitted:{key}", INGRESS, INFLIGHT], args=[qid, encode(req), self.backlog_limit]
        )
        if int(status) == -1:
            raise Backpressure(
                f"{value.decode()} questions in flight (limit {self.backlog_limit}); retry later"
            )
        return value.decode() if isinstance(value, bytes) else str(value)

    async def result(self, query_id: str, timeout_s: float | None = None) -> AnswerResult | None:
        """The answer, waiting up to `timeout_s` (None: only look)."""
        deadline = time.monotonic() + (timeout_s or 0.0)
        while True:
            blob = await self.r.get(reply_key(query_id))
            if blob is not None:
                answer = decode(ANSWERS, bytes(blob) if isinstance(blob, bytes) else blob.encode())
                assert isinstance(answer, AnswerResult)
                return answer
            if timeout_s is None or time.monotonic() >= deadline:
                return None
            await asyncio.sleep(0.05)

    async def cancel(self, query_id: str) -> None:
        from proto import CancelRequest
        from proto.streams import query_inbox

        msg = CancelRequest(msg_id=f"{query_id}/cancel", query_id=query_id, reason="client cancelled")
        await self.r.xadd(query_inbox(query_id), {"e": encode(msg)})


class IngressService:
    """HTTP front door. POST /v1/questions {"question", "algorithm", "target", "mode",
    "client_key"} → 202 {"query_id"} (429 when the backlog is full, 400 naming a bad field);
    GET /v1/questions/{id} → 200 with the answer, or 202 while it is being searched."""

    FIELDS = {"question": str, "algorithm": str, "target": int, "mode": str, "client_key": str, "seed": int}

    def __init__(self, client: aioredis.Redis, settings: Settings) -> None:
        self.client = IngressClient(client, settings.backlog_limit)
        self.port = settings.http_port
        self.submitted = 0

    def summary(self) -> dict[str, int]:
        return {"submitted": self.submitted}

    def app(self) -> web.Application:
        app = web.Application()
        app.add_routes([web.post("/v1/questions", self.post), web.get("/v1/questions/{qid}", self.get)])
        return app

    async def post(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "body: not JSON")
        if not isinstance(body, dict):
            return _error(400, "body: expected a JSON object")
        unknown = sorted(set(body) - set(self.FIELDS))
        if unknown:
            return _error(400, f"{unknown[0]}: unknown field")
        for name, kind in self.FIELDS.items():
            if name in body and not isinstance(body[name], kind):
                return _error(400, f"{name}: expected {kind.__name__}")
        if not body.get("question"):
            return _error(400, "question: required")
        if body.get("algorithm", "rebase") not in ALGORITHMS:
            return _error(400, f"algorithm: unknown {body['algorithm']!r}")
        if body.get("mode", "spex") not in ("baseline", "spex") or body.get("target", 16) < 1:
            return _error(400, "mode/target: mode is baseline or spex, target at least 1")
        try:
            qid = await self.client.submit(
                body["question"],
                client_key=body.get("client_key"),
                algorithm=body.get("algorithm", "rebase"),
                target=body.get("target", 16),
                mode=body.get("mode", "spex"),
                seed=body.get("seed", 0),
            )
        except Backpressure as exc:
            return _error(429, str(exc))
        self.submitted += 1
        return web.json_response({"query_id": qid}, status=202)

    async def get(self, request: web.Request) -> web.Response:
        answer = await self.client.result(request.match_info["qid"])
        if answer is None:
            return web.json_response({"status": "searching"}, status=202)
        return web.json_response({"status": "answered", "answer": answer.answer, "nodes": answer.nodes})

    async def run(self, stop: asyncio.Event) -> None:
        runner = web.AppRunner(self.app())
        await runner.setup()
        await web.TCPSite(runner, "0.0.0.0", self.port).start()
        try:
            await stop.wait()
        finally:
            await runner.cleanup()


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def main() -> int:
    return run_service("ingress", IngressService)


if __name__ == "__main__":
    raise SystemExit(main())
