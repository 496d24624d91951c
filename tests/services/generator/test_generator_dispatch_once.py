"""A job delivered twice at once — after a reconnect the intake re-reads the generator's own
pending entries while its heartbeat round reclaims the same ones, idle while Redis was away —
starts once. Both dispatches used to pass the "already ours" check before either started the
job, and the engine refused the second as a duplicate request id: the job was dead-lettered
and its query failed (the cluster test's failover found it)."""

import asyncio

from spex.proto.names import GENERATOR_GROUP, dead_letter
from tests.services.helpers import generator_with_a_job


def test_a_job_dispatched_twice_at_once_starts_once(redis_url):
    async def main() -> None:
        r, gen, stream = await generator_with_a_job(redis_url, time_scale=100.0)
        try:
            [d] = await gen.bus.read([stream], GENERATOR_GROUP, count=1, block_ms=None)
            await asyncio.gather(gen.dispatch(d), gen.dispatch(d))
            assert list(gen.jobs) == ["j"]
            assert await r.xlen(dead_letter(stream)) == 0
        finally:
            await r.aclose()

    asyncio.run(main())
