"""A question whose search could never fit in Redis — what it would hold, its prompt included,
is more than SPEX_MEMORY_HEADROOM of Redis's maxmemory even with nothing else in flight — is a
413 naming the limit, not a 503 to retry for ever (issue 52). A Redis whose maxmemory is below
what it holds already (lowered for a while) is full for now, not too small for good: a 503. A
real ingress, a real Redis."""

import asyncio

import redis

from spex.shared.runtime.redis_server import free_port
from tests.services.cluster import Cluster
from tests.services.helpers import http_headed, wait_http


def test_a_question_that_could_never_fit_is_refused_once_and_for_all(redis_url):
    port = free_port()
    base = f"http://127.0.0.1:{port}/v1/questions"
    sync = redis.Redis.from_url(redis_url)

    async def go():
        cluster = Cluster(redis_url, "inprocess", http_port=port)
        await cluster.start("ingress", "ingress-0")
        await asyncio.to_thread(wait_http, base + "/x")
        sync.config_set("maxmemory", int(sync.info("memory")["used_memory"]) + 3_000_000)
        try:
            await asyncio.sleep(1.1)  # the ingress's memory figures: a second old at most
            huge = {"question": "x" * 90_000 + " what is 2 + 2?", "algorithm": "rebase", "target": 256}
            small = {"question": "what is 2 + 2?", "algorithm": "rebase", "target": 4}
            said = [await asyncio.to_thread(http_headed, "POST", base, body) for body in (huge, small)]
            sync.config_set("maxmemory", 1)  # below what it holds: every write refused, for now
            await asyncio.sleep(1.1)
            return [*said, await asyncio.to_thread(http_headed, "POST", base, huge)]
        finally:
            sync.config_set("maxmemory", 0)
            await cluster.stop()

    (status, body, _), (fits, _, _), (full, said, headers) = asyncio.run(go())
    sync.close()
    assert status == 413, body
    assert body["error"].startswith("question: ") and "maxmemory" in body["error"], body
    assert "SPEX_MEMORY_HEADROOM" in body["error"] and "MB" in body["error"], body
    assert fits == 202
    assert full == 503 and "memory" in said["error"] and headers["Retry-After"], said
