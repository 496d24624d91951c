"""Each service process serves Prometheus metrics over real HTTP."""

import asyncio
from dataclasses import replace

from spex.shared.runtime.redis_server import free_port
from tests.services.cluster import Cluster
from tests.services.helpers import scrape


def test_generator_process_serves_metrics_that_count_its_jobs(redis_url):
    port = free_port()

    async def go():
        cluster = Cluster(redis_url, "processes", metrics_port=port)
        await cluster.start("generator", "gen-0")  # the only process given the port
        cluster.settings = replace(cluster.settings, metrics_port=0)
        await cluster.start("coordinator", "coord-0")
        await cluster.start("scorer", "scorer-0")
        try:
            qid = await cluster.client.submit("2+3?", algorithm="rstar", target=3)
            await cluster.client.result(qid, timeout_s=30)
            return await asyncio.to_thread(scrape, port)
        finally:
            await cluster.stop()

    status, body = asyncio.run(go())
    assert status == 200
    assert 'spex_jobs_total{consumer="gen-0",outcome="finished",service="generator"}' in body
    assert "spex_messages_total" in body
