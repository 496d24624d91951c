"""An entry that kills its consumer is dead-lettered after `max_deliveries`: re-reading one's own
pending entries after each crash-restart counts as a delivery. A real Redis."""

import asyncio

import pytest

from spex.proto import encode
from spex.proto.names import SCORE_JOBS, SCORER_GROUP, SINGLE
from spex.shared.runtime.bus import Bus
from tests.services.helpers import known_query, reasons, score_job

pytestmark = pytest.mark.every_redis  # where Redis versions differ: every server kind


def test_an_entry_that_kills_its_consumer_is_dead_lettered_after_max_deliveries(redis_url):
    """Re-reading one's own pending entries (after each crash-restart) counts deliveries."""

    async def go():
        import redis.asyncio as aioredis

        r = aioredis.Redis.from_url(redis_url)
        first = Bus(r, "scorer-0", max_deliveries=3, partitions=SINGLE)
        await first.ensure_group(SCORE_JOBS, SCORER_GROUP)
        await known_query(r)
        await r.xadd(SCORE_JOBS, {"e": encode(score_job(["q", "n"]))})
        seen = []
        for _ in range(5):  # a consumer that dies on the entry, restarted under the same name
            bus = Bus(r, "scorer-0", max_deliveries=3, partitions=SINGLE)
            seen.append([d.deliveries for d in await bus.read([SCORE_JOBS], SCORER_GROUP, 8, block_ms=10)])
        pending = (await r.xpending(SCORE_JOBS, SCORER_GROUP))["pending"]
        why = await reasons(r, SCORE_JOBS)
        await r.aclose()
        return seen, pending, why

    seen, pending, why = asyncio.run(go())
    assert seen == [[1], [2], [3], [], []]
    assert pending == 0 and why == ["delivered 4 times"]
