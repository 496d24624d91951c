"""Nothing the pipeline writes outlives what it is for: a query's keys (its request, inbox,
checkpoint, sent message ids, cancel marks, tree record, client key) expire with its answer
(what only its search read, sooner: `test_an_answer_compacts_its_query`); the answers
stream keeps what is younger than the result TTL and gen:control what is younger than its
window (60 s), trimmed while idle too. Real services, a real Redis."""

import asyncio

import pytest
import redis.asyncio as aioredis

from spex.proto import CancelRequest
from spex.proto.names import ANSWERS, SINGLE
from spex.shared.runtime.bus import Bus
from tests.services.cluster import Cluster
from tests.services.workload import submit_all

pytestmark = pytest.mark.every_redis  # where Redis versions differ: every server kind

INFRASTRUCTURE = ("gen:", "score:", "ingress", "stats:", "worker:", "allocator:", "coord:", "answers", "dlq:")
INFRASTRUCTURE += ("data:kept",)  # one token a partition (names.DATA_KEPT)


def test_after_the_ttl_only_the_pipelines_own_keys_are_left(redis_url):
    ttl_s = 2

    async def go():
        cluster = Cluster(redis_url, "inprocess", result_ttl_s=ttl_s)
        await cluster.start_all(generators=2)
        r = cluster.client.r
        try:
            # Width 16: speculation, and cancels, in every query or nearly (at width 8 a loaded
            # machine can end the searches before a budget cancels anything).
            first = await submit_all(cluster, "rebase", 16, 6, "spex")
            during = [k.decode() for k in await r.keys("*")]
            await asyncio.sleep(ttl_s + 1.5)
            left = sorted(k.decode() for k in await r.keys("*"))
            later = await submit_all(cluster, "rstar", 3, 1, "baseline", first=10)
            answers_kept = await r.xlen(ANSWERS)
            return first, later, during, left, answers_kept
        finally:
            await cluster.stop()

    first, later, during, left, answers_kept = asyncio.run(go())
    assert all(a is not None for a in [*first.values(), *later.values()])
    assert any(":sent" in k for k in during) and any(":cancelled" in k for k in during)  # they were there
    assert [k for k in left if not k.startswith(INFRASTRUCTURE)] == []  # ... and went with the answers
    assert answers_kept == 1  # the six older answers were trimmed by the seventh


def test_a_fan_out_stream_published_with_a_window_keeps_only_that_window(redis_url):
    async def go():
        r = aioredis.Redis.from_url(redis_url)
        bus = Bus(r, "c", partitions=SINGLE)
        for i in range(5):
            cancel = CancelRequest(msg_id=f"m{i}", query_id="q", job_id=f"j{i}")
            await bus.publish_many([("fan", cancel)], keep_s={"fan": 3.0})
        burst = await r.xlen("fan")  # five round trips: well inside the window on a loaded machine
        await asyncio.sleep(3.5)
        await bus.publish_many(
            [("fan", CancelRequest(msg_id="m9", query_id="q", job_id="j9"))], keep_s={"fan": 3.0}
        )
        after = await r.xlen("fan")
        await r.delete("fan")
        await r.aclose()
        return burst, after

    assert asyncio.run(go()) == (5, 1)


def test_an_idle_pipeline_trims_its_fan_out_streams_by_age(redis_url):
    from spex.services.coordinator.store import QueryStore

    async def go():
        r = aioredis.Redis.from_url(redis_url)
        for stream in ("ctl", "stats"):
            await r.xadd(stream, {"e": b"old"})
        await asyncio.sleep(1.2)
        await r.xadd("stats", {"e": b"new"})
        await QueryStore(r, "c", 2.0, 60, partitions=SINGLE).trim_fan_out({"ctl": 1.0, "stats": 1.0})
        lengths = await r.xlen("ctl"), await r.xlen("stats")
        await r.delete("ctl", "stats")
        await r.aclose()
        return lengths

    assert asyncio.run(go()) == (0, 1)  # nothing new is published: the old entries go anyway
