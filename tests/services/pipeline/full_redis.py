"""Long questions posted at once over HTTP to a pipeline whose Redis is capped (`maxmemory`,
noeviction) a few MB above what it holds: the harness of the full-Redis tests. Real service
processes, a real ingress, a real Redis; its memory sampled throughout."""

import asyncio
import time
from dataclasses import dataclass, field

import redis

from spex.bench.chaos.incidents import long_question
from spex.proto.names import SINGLE, reply_key
from spex.shared.runtime.redis_server import free_port
from tests.services.cluster import Cluster
from tests.services.helpers import http_headed, wait_http

MB = 1_000_000


@dataclass
class Outcome:
    cap: int  # Redis's maxmemory, bytes
    accepted: list[str] = field(default_factory=list)  # query ids
    refused: list[tuple[int, str, str | None]] = field(default_factory=list)  # status, error, Retry-After
    unanswered: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # answered with an error
    peak: int = 0  # Redis's used memory at its highest, bytes
    ready: list[int] = field(default_factory=list)  # /ready's statuses while they were searched
    logs: str = ""


def post_long_questions(
    redis_url: str, questions: int, chars: int, room_mb: float, target: int = 16, watch_s: float = 60.0,
    time_scale: float = 0.005, **settings,
) -> Outcome:  # fmt: skip
    """Cap Redis at what it holds plus `room_mb`, post `questions` ReBASE questions of `chars`
    characters each at once, and wait up to `watch_s` for every one accepted to be answered."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    sync = redis.Redis.from_url(redis_url)
    cluster = Cluster(redis_url, "processes", http_port=port, time_scale=time_scale, **settings)

    async def go() -> Outcome:
        await cluster.start_all()
        await cluster.start("ingress", "ingress-0")
        await asyncio.to_thread(wait_http, f"{base}/health")
        cap = int(sync.info("memory")["used_memory"]) + int(room_mb * MB)
        sync.config_set("maxmemory-policy", "noeviction")
        sync.config_set("maxmemory", cap)
        outcome = Outcome(cap)
        await asyncio.sleep(1.1)  # the ingress's memory figures: a second old at most
        sampling = asyncio.create_task(_sample(sync, outcome))
        try:
            for i in range(questions):
                body = {"question": long_question(i, chars), "target": target}
                status, said, headers = await asyncio.to_thread(
                    http_headed, "POST", f"{base}/v1/questions", body
                )
                if status == 202:
                    outcome.accepted.append(said["query_id"])
                else:
                    outcome.refused.append((status, str(said.get("error")), headers.get("Retry-After")))
            deadline = time.monotonic() + watch_s
            while time.monotonic() < deadline:
                outcome.ready.append((await asyncio.to_thread(http_headed, "GET", f"{base}/ready"))[0])
                if all(sync.exists(reply_key(q, SINGLE)) for q in outcome.accepted):
                    break
                await asyncio.sleep(0.5)
            outcome.unanswered = [q for q in outcome.accepted if not sync.exists(reply_key(q, SINGLE))]
            answers = [await cluster.client.result(q) for q in outcome.accepted]
            outcome.failed = [a.query_id for a in answers if a is not None and a.error]
            outcome.logs = cluster.logs()
            return outcome
        finally:
            sampling.cancel()
            sync.config_set("maxmemory", 0)

    async def run() -> Outcome:
        try:
            return await go()
        finally:
            await cluster.stop()
            sync.close()

    return asyncio.run(run())


async def _sample(sync: redis.Redis, outcome: Outcome) -> None:
    while True:
        outcome.peak = max(outcome.peak, int(sync.info("memory")["used_memory"]))
        await asyncio.sleep(0.02)
