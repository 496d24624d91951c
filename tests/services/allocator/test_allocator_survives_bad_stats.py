"""A stats entry without a body, or one that does not decode, does not stop the allocator: the
pipeline still answers as virtual time does. Real service processes, a real Redis."""

import asyncio

from spex.proto.names import QUERY_STATS
from tests.services.cluster import Cluster
from tests.services.helpers import alive, restarts
from tests.services.workload import submit_all, virtual_time


def test_a_stats_entry_without_a_body_does_not_stop_the_allocator(redis_url):
    async def go():
        cluster = Cluster(redis_url, "processes")
        await cluster.start_all()
        r = cluster.client.r
        try:
            await r.xadd(QUERY_STATS, {"x": b"no e field"})
            await r.xadd(QUERY_STATS, {"e": b"\xc1"})
            await asyncio.sleep(0.5)
            answers = await submit_all(cluster, "rebase", 8, 2, "spex")
            return answers, restarts(cluster, "allocator-0"), alive(cluster, "allocator-0")
        finally:
            await cluster.stop()

    answers, restarted, up = asyncio.run(go())
    assert {q: (a.answer, a.tree_digest) for q, a in answers.items()} == virtual_time("rebase", 8, 2, "spex")
    assert restarted == 0 and up
