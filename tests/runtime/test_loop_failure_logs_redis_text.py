"""A service loop that fails on a Redis error logs Redis's own words, not a repr around them.
A real generator process, a real Redis."""

import asyncio

from spex.proto.names import GEN_CONTROL
from tests.services.cluster import Cluster
from tests.services.helpers import wait_for


def test_a_failing_loop_logs_redis_error_text(redis_url):
    async def go():
        cluster = Cluster(redis_url, "processes")
        r = cluster.client.r
        await r.set(GEN_CONTROL, "not a stream")  # the generator's cancel reader fails on it
        await cluster.start("generator", "gen-0")
        try:
            assert await wait_for(lambda: _logged(cluster, "gen-0", "loop_failed"))
            return cluster._read_log("gen-0")
        finally:
            await cluster.stop()

    log = asyncio.run(go())
    # Redis's own words, not a repr around them.
    assert '"error": "WRONGTYPE Operation against a key holding the wrong kind of value"' in log


async def _logged(cluster, name, text):
    return text in cluster._read_log(name)
