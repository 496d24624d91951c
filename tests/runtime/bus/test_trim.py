"""Work streams stay bounded: what every group delivered and had acknowledged is trimmed
(XTRIM MINID), what is pending or not yet delivered never is."""

import asyncio

import pytest
import redis.asyncio as aioredis

from spex.proto import ScoreResult, encode
from spex.proto.names import SCORE_JOBS, SINGLE, query_inbox
from spex.shared.runtime.bus import Bus
from tests.services.cluster import Cluster
from tests.services.helpers import job_streams
from tests.services.workload import submit_all

pytestmark = pytest.mark.every_redis  # where Redis versions differ: every server kind


def test_trim_drops_only_what_was_delivered_and_acknowledged(redis_url):
    async def go():
        r = aioredis.Redis.from_url(redis_url)
        bus = Bus(r, "c", partitions=SINGLE)
        await bus.ensure_group("s", "g")
        ids = [
            await r.xadd(
                "s",
                {"e": encode(ScoreResult(msg_id=f"m{i}", query_id="q", job_id="j", node_id="n", reward=0.0))},
            )
            for i in range(5)
        ]
        await r.xreadgroup("g", "c", {"s": ">"}, count=3)  # 3 delivered, 2 not yet
        await r.xack("s", "g", ids[0], ids[2])  # ids[1] still pending
        first = await bus.trim("s"), await r.xlen("s")
        await r.xack("s", "g", ids[1])
        second = await bus.trim("s"), await r.xlen("s")
        left = [i for i, _ in await r.xrange("s")]
        none = await bus.trim("no-such-stream")
        await r.aclose()
        return first, second, left, ids, none

    first, second, left, ids, none = asyncio.run(go())
    assert first == (1, 4)  # only the acknowledged entry before the pending one
    assert second == (2, 2) and left == ids[3:]  # the undelivered ones stay
    assert none == 0


def test_the_pipeline_keeps_its_work_streams_short(redis_url):
    async def go():
        cluster = Cluster(redis_url, "processes")
        await cluster.start_all()
        r = cluster.client.r
        try:
            answers = await submit_all(cluster, "rebase", 8, 3, "spex")
            # How many jobs went through: one result per job in the queries' inboxes (the
            # streams themselves may be trimmed already).
            results = [f for q in answers for _, f in await r.xrange(query_inbox(q, SINGLE))]
            published = len(results)
            await asyncio.sleep(11)  # one trimming period (TRIM_EVERY_S) and a heartbeat
            job_streams_len = sum([await r.xlen(s) for s in await job_streams(r)])
            return answers, published, (job_streams_len, await r.xlen(SCORE_JOBS))
        finally:
            await cluster.stop()

    answers, published, after = asyncio.run(go())
    assert all(a is not None for a in answers.values())
    assert published > 40
    assert after == (0, 0)
