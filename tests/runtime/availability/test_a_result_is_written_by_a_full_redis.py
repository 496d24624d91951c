"""A job's result is written even by a Redis out of memory (at its `maxmemory`, every other write
refused): it is the work of a question admitted, which drains rather than wedges (issue 52) —
delivered once, never dead-lettered. (Each refused write used to leave the job to be reclaimed,
every reclaim counted as a delivery, and past `max_deliveries` the job was dead-lettered and its
question failed: issue 40, "delivered 4 times", 272 of 300 questions.)"""

import asyncio
import contextlib

from redis.exceptions import ResponseError

from spex.proto import GenerateResult, decode
from spex.proto.names import GENERATOR_GROUP, SINGLE, dead_letter, query_inbox
from spex.services.generator.service import Generator
from spex.shared.runtime.settings import Settings
from tests.services.helpers import generator_with_a_job, wait_for


def test_a_result_is_written_by_a_redis_out_of_memory(redis_url):
    async def main() -> None:
        r, gen, stream = await generator_with_a_job(redis_url, time_scale=0.002)
        fast = Settings(redis_url=redis_url, consumer="gen-a", time_scale=0.002, heartbeat_s=0.05, lease_s=1)
        gen = Generator(r, fast)  # heartbeats every 50 ms: a dropped job is reclaimed within 150 ms
        for part in gen.streams:  # as a generator that ran before Redis filled left them
            await gen.bus.ensure_group(part, GENERATOR_GROUP)
        stop = asyncio.Event()
        await r.config_set("maxmemory", 1)  # every write refused: "OOM command not allowed"
        task = asyncio.create_task(gen.run(stop))
        try:
            inbox = query_inbox("q", SINGLE)
            assert await wait_for(lambda: _has_entries(r, inbox), timeout_s=10)
            [(_, fields)] = await r.xrange(inbox)
            assert isinstance(decode(inbox, fields[b"e"]), GenerateResult)
            assert await wait_for(lambda: _nothing_pending(r, stream), timeout_s=5)
            with contextlib.suppress(ResponseError):  # refused: Redis is still full
                await r.set("another-write", 1)
            assert not await r.exists("another-write"), "Redis was not full"
            assert not task.done(), "the generator stopped while Redis was out of memory"
            assert await r.xlen(dead_letter(stream)) == 0
            assert gen.done == 1 and gen.bus.dead_lettered == 0
        finally:
            await r.config_set("maxmemory", 0)
            stop.set()
            await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 10)
            await r.aclose()

    asyncio.run(main())


async def _has_entries(r, stream):
    return await r.exists(stream) and await r.xlen(stream) > 0


async def _nothing_pending(r, stream):
    return (await r.xpending(stream, GENERATOR_GROUP))["pending"] == 0
