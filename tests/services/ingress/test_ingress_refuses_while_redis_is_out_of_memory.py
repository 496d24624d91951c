"""While Redis refuses writes for want of memory (`maxmemory`), the ingress refuses new
questions with 503, Retry-After and a reason that names memory, and /ready says the same;
once memory is back both serve again. It used to answer 500 (its log said `ResponseError`)
while /ready stayed 200 (a PING passes when writes are refused). A real ingress, a real Redis,
real HTTP."""

import asyncio

from spex.services.ingress.readiness import FRESH_S
from spex.shared.runtime.redis_server import free_port
from tests.services.cluster import Cluster
from tests.services.helpers import http_retry_after, wait_http


def test_posts_and_ready_say_redis_is_out_of_memory(redis_url):
    port = free_port()
    base = f"http://127.0.0.1:{port}"

    async def go():
        cluster = Cluster(redis_url, "inprocess", http_port=port)
        await cluster.start("ingress", "ingress-0")
        r = cluster.client.r
        try:
            await asyncio.to_thread(wait_http, base + "/health")
            # Admission by memory (its own test) would refuse first: out of the way, so that
            # the writes themselves meet Redis's refusal.
            cluster.tasks["ingress-0"][2].client.room = None
            await r.config_set("maxmemory", 1)
            ask = base + "/v1/questions"
            post = await asyncio.to_thread(http_retry_after, "POST", ask, {"question": "1+1?"})
            chat = {"model": "spex:rebase", "messages": [{"role": "user", "content": "1+1?"}]}
            openai = await asyncio.to_thread(http_retry_after, "POST", base + "/v1/chat/completions", chat)
            ready = await asyncio.to_thread(http_retry_after, "GET", base + "/ready")
            await r.config_set("maxmemory", 0)
            after = await asyncio.to_thread(http_retry_after, "POST", ask, {"question": "2+2?"})
            await asyncio.sleep(FRESH_S)  # /ready reuses an outcome this long
            ready_after = await asyncio.to_thread(http_retry_after, "GET", base + "/ready")
            return post, openai, ready, after, ready_after
        finally:
            await r.config_set("maxmemory", 0)
            await cluster.stop()

    post, openai, ready, after, ready_after = asyncio.run(go())
    status, retry_after, body = post
    assert status == 503, post
    assert retry_after is not None and int(retry_after) > 0
    assert body["error"].startswith("Redis is out of memory (maxmemory): ")
    assert openai[0] == 503 and openai[1] is not None, openai
    assert "out of memory" in openai[2]["error"]["message"]
    assert ready[0] == 503 and ready[2]["error"].startswith("Redis is out of memory (maxmemory): "), ready
    assert after[0] == 202, after
    assert ready_after[0] == 200, ready_after
