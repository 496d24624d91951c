"""A job whose result Redis refuses (out of memory under `maxmemory`) is kept by its worker and
written once memory is back: never redelivered for it, never dead-lettered, its query answered.
Each refused write used to leave the job to be reclaimed, every reclaim counted as a delivery,
and past `max_deliveries` the job was dead-lettered and its question failed ("delivered 4
times"; issue 40: 272 of 300 questions)."""

import asyncio

from spex.proto import GenerateResult, decode
from spex.proto.names import GENERATOR_GROUP, dead_letter, query_inbox
from spex.services.generator import Generator
from spex.shared.runtime.settings import Settings
from tests.services.helpers import generator_with_a_job, wait_for


def test_a_result_refused_for_memory_is_written_once_memory_is_back(redis_url):
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
            await asyncio.sleep(2.0)  # tens of reclaim rounds, were the job dropped
            assert not task.done(), "the generator stopped while Redis was out of memory"
            [pending] = await r.xpending_range(stream, GENERATOR_GROUP, "-", "+", 10)
            assert pending["times_delivered"] == 1  # kept and heartbeated, never redelivered
            await r.config_set("maxmemory", 0)
            inbox = query_inbox("q")
            assert await wait_for(lambda: _has_entries(r, inbox), timeout_s=10)
            [(_, fields)] = await r.xrange(inbox)
            assert isinstance(decode(inbox, fields[b"e"]), GenerateResult)
            assert await wait_for(lambda: _nothing_pending(r, stream), timeout_s=5)
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
