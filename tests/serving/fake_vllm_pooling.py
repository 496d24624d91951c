"""A small server speaking vLLM's pooling API (0.32) as a reward model served with `--runner
pooling` answers it, in the test's own event loop: `/v1/models` (`owned_by`), `/version`,
`/metrics`, and `POST /pooling` with rows of numbers in the shape the model's task gives.

Shapes (`rows`): "token" — a row of two logits a token (`token_classify`: SPEX's own PRM, or a
causal LM converted to classify by its good and bad tokens), "step" — a row of two at each
`step_tag` in the text only (a `Qwen2ForProcessRewardModel` on the STEP pooler; a text without
the tag gets no row), "sequence" — one row of two (`classify`), "score" — one row of one,
"embedding" — one row of 64 (an embedding model: not a reward). A token's logits are a function
of the token alone, so a test can say what the reward must be (`token_logits`).
Misconfigurations: `pooling=False` (a model served for generation: no `/pooling`),
`priority=False` (no `--scheduling-policy priority` on a vLLM that refuses a priority then: a
400), `owner="sglang"` (not vLLM at all), a `step_tag` other than the client's (no row).
A text starting `hold:` is answered only when its client goes away (recorded in `gone`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from spex.shared.runtime.redis_server import free_port

MODEL = "fake-prm"
# What vLLM before 0.32 answered a priority on a server that does not schedule by it.
PRIORITY_ERROR = "Got priority 1 but Priority scheduling is not enabled."


def tokens(text: str) -> list[str]:
    """Four characters a token."""
    return [text[i : i + 4] for i in range(0, len(text), 4)] or [""]


def token_logits(token: str) -> list[float]:
    """(wrong, right) logits of a token: a function of its characters."""
    code = sum(ord(c) for c in token)
    return [(code % 7) / 3.0 - 1.0, (code % 11) / 4.0 - 1.2]


def step_rows(text: str, tag: str) -> list[list[float]]:
    """A row at each tag: the logits of the four characters before it (its step's last token)."""
    ends = [i for i in range(len(text)) if text.startswith(tag, i)]
    return [token_logits(text[max(0, i - 4) : i]) for i in ends]


@dataclass
class FakePooling:
    rows: str = "token"
    pooling: bool = True
    priority: bool = True
    owner: str = "vllm"
    step_tag: str = "<extra_0>"  # rows="step": the tag the pooler rows at
    url: str = ""
    bodies: list[dict[str, Any]] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)  # request ids whose client left before the reply

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/version", self.version)
        app.router.add_get("/metrics", self.metrics)
        if self.pooling:
            app.router.add_post("/pooling", self.pool)
        return app

    async def version(self, _: web.Request) -> web.Response:
        return web.json_response({"version": "0.32.0-fake"})

    async def models(self, _: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL, "owned_by": self.owner}]})

    async def metrics(self, _: web.Request) -> web.Response:
        lines = [
            'vllm:cache_config_info{block_size="16",num_gpu_blocks="64"} 1.0',
            "vllm:num_requests_running 0",
            "vllm:num_requests_waiting 0",
            "vllm:kv_cache_usage_perc 0.0",
        ]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    async def pool(self, req: web.Request) -> web.Response:
        body = await req.json()
        self.bodies.append(body)
        if body.get("priority", 0) and not self.priority:
            error = {"message": PRIORITY_ERROR, "type": "BadRequestError", "param": None, "code": 400}
            return web.json_response({"error": error}, status=400)
        text = str(body["input"])
        if text.startswith("hold:"):
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:  # aiohttp cancels the handler when the client goes
                self.gone.append(str(body.get("request_id")))
                raise
        toks = tokens(text)
        data: Any = {
            "token": [token_logits(t) for t in toks],
            "step": step_rows(text, self.step_tag),
            "sequence": token_logits(toks[-1]),
            "score": token_logits(toks[-1])[1:],
            "embedding": [0.1] * 64,
        }[self.rows]
        return web.json_response(
            {
                "id": f"pooling-{body.get('request_id')}",
                "object": "list",
                "model": MODEL,
                "data": [{"index": 0, "object": "pooling", "data": data}],
                "usage": {"prompt_tokens": len(toks), "total_tokens": len(toks), "completion_tokens": 0},
            }
        )


@contextlib.asynccontextmanager
async def fake_pooling(**options: Any) -> AsyncIterator[FakePooling]:
    """The server on 127.0.0.1 (a free port) until the block ends."""
    server = FakePooling(**options)
    port = free_port()
    server.url = f"http://127.0.0.1:{port}"
    runner = web.AppRunner(server.app(), shutdown_timeout=0.5, handler_cancellation=True)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield server
    finally:
        await runner.cleanup()
