"""HTTP ingress (`spex worker ingress`): POST /v1/questions, GET /v1/questions/{id}.

A thin HTTP face on the ingress client (`spex.shared.runtime.client`): the body's fields are
checked and validated by `spex.proto.submission`, the one validator every way in shares.
"""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis
from aiohttp import web

from spex.proto import SubmissionError, submission
from spex.shared.runtime.client import Backpressure, IngressClient
from spex.shared.runtime.service import run_service
from spex.shared.runtime.settings import Settings

__all__ = ["IngressService", "main"]


class IngressService:
    """POST /v1/questions {"question", "algorithm", "target", "seed", "mode", "client_key"} →
    202 {"query_id"} (429 when the backlog is full, 400 naming a bad field);
    GET /v1/questions/{id} → 200 with the answer, or 202 while it is being searched."""

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
        try:
            fields = submission.check_fields(body)
            qid = await self.client.submit(fields.pop("question", ""), **fields)
        except SubmissionError as exc:
            return _error(400, str(exc))
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
