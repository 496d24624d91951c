"""Submissions the coordinator rejects free their place in the ingress backlog, fail with the
reason, and show as failed over HTTP. Real service processes, a real Redis."""

import asyncio

from spex.proto.names import INGRESS_IN_FLIGHT
from spex.shared.runtime.redis_server import free_port
from tests.services.cluster import Cluster
from tests.services.helpers import http, wait_http


def test_rejected_submissions_free_their_place_in_the_backlog(redis_url):
    port = free_port()

    async def go():
        # The coordinator is stricter than the client that submitted: it rejects the question.
        cluster = Cluster(redis_url, "processes", http_port=port, backlog_limit=2)
        cluster.settings = cluster.settings.__class__(**{**cluster.settings.__dict__, "max_target": "4"})
        await cluster.start_all()
        await cluster.start("ingress", "ingress-0")
        base = f"http://127.0.0.1:{port}/v1/questions"
        await asyncio.to_thread(wait_http, base + "/x")
        r = cluster.client.r
        try:
            boolean = await asyncio.to_thread(http, "POST", base, {"question": "x", "target": True})
            rejected = [
                await cluster.client.submit(f"too big {i}", algorithm="rstar", target=8) for i in range(2)
            ]
            failed = [await cluster.client.result(q, timeout_s=20) for q in rejected]
            ok = await asyncio.to_thread(
                http, "POST", base, {"question": "1+1?", "algorithm": "rstar", "target": 3}
            )
            got = await cluster.client.result(ok[1]["query_id"], timeout_s=30)
            shown = await asyncio.to_thread(http, "GET", f"{base}/{rejected[0]}")
            return boolean, failed, ok, got, shown, await r.zcard(INGRESS_IN_FLIGHT)
        finally:
            await cluster.stop()

    boolean, failed, ok, got, shown, in_flight = asyncio.run(go())
    assert boolean == (400, {"error": "target: expected int"})
    assert all(a is not None and a.answer is None and "target: at most 4" in a.error for a in failed)
    assert ok[0] == 202 and got is not None and not got.error  # not 429: the rejected ones left
    assert shown[0] == 200 and shown[1]["status"] == "failed"
    assert in_flight == 0
