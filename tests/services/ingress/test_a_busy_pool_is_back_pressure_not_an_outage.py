"""A pool whose connections are all in use is back-pressure, not an outage: the requests that
find none within the wait are a 503 that says the ingress is busy (with Retry-After), never
"the queue is unreachable", the ones holding a connection are answered, and `/ready` stays 200
throughout (it pings Redis on its own connection). Redis pauses writes for a moment, so the
two pooled connections stay in use by submissions. A real ingress process, a real Redis."""

import asyncio

import redis

from spex.shared.runtime.redis_server import free_port
from tests.services.cluster import Cluster
from tests.services.helpers import http_headed, wait_http

PAUSE_MS = 4000  # longer than the pool's wait (2 s), so the waiting submissions give up


def test_submissions_beyond_a_full_pool_are_told_busy_and_ready_stays_200(redis_url):
    port = free_port()
    base = f"http://127.0.0.1:{port}"

    async def go():
        cluster = Cluster(redis_url, "processes", http_port=port, http_redis_connections=2)
        await cluster.start("ingress", "ingress-0")
        await asyncio.to_thread(wait_http, f"{base}/health")
        admin = redis.Redis.from_url(redis_url)
        try:
            admin.execute_command("CLIENT", "PAUSE", PAUSE_MS, "WRITE")  # reads still served
            posts = [
                asyncio.to_thread(
                    http_headed, "POST", f"{base}/v1/questions", {"question": f"{i}+1?"}, timeout_s=15
                )
                for i in range(10)
            ]
            probes = [asyncio.to_thread(http_headed, "GET", f"{base}/ready") for _ in range(5)]
            replies = await asyncio.gather(*posts, *probes)
            return replies[:10], replies[10:]
        finally:
            admin.close()
            await cluster.stop()

    posts, probes = asyncio.run(go())
    statuses = sorted(status for status, _, _ in posts)
    assert set(statuses) <= {202, 503} and 202 in statuses and 503 in statuses, statuses
    for status, body, headers in posts:
        if status == 503:
            assert body["error"].startswith("the ingress is busy: "), body
            assert "unreachable" not in body["error"] and headers["Retry-After"] == "1"
    assert [(status, body) for status, body, _ in probes] == [(200, {"status": "ready"})] * 5
