"""A job a peer took over while this generator stalled is stopped here; the engine drops the
request at its next step, and until then holds its id. Handed back in that window (the peer died
and we reclaim it), the job used to be refused by the engine as a duplicate request id, then
dead-lettered and its query failed. Now its dispatch waits for the old run to leave."""

import asyncio
import time

from spex.proto.names import GENERATOR_GROUP, SINGLE, dead_letter, query_cancelled
from spex.shared.runtime.bus import Bus
from tests.services.helpers import generator_with_a_job


async def handed_back(redis_url, meanwhile=None):
    """A generator runs job "j"; a peer takes it over (our heartbeat stops the run, which the
    engine drops at its next step); the peer dies and we reclaim it while that step runs; while
    its dispatch waits, `meanwhile(r)`. The generator's jobs after, and the dead letters."""
    r, gen, stream = await generator_with_a_job(redis_url, time_scale=5.0)
    stop = asyncio.Event()
    engine = asyncio.create_task(gen.run_engine(stop))
    try:
        [d] = await gen.bus.read([stream], GENERATOR_GROUP, count=1, block_ms=None)
        await gen.dispatch(d)
        deadline = time.monotonic() + 30
        while gen.engine.load().running == 0:
            assert time.monotonic() < deadline, "the job never started"
            await asyncio.sleep(0.01)
        [taken] = await Bus(r, "gen-b", partitions=SINGLE).reclaim(
            stream, GENERATOR_GROUP, 0
        )  # a peer takes it
        await gen.heartbeat(stream)  # ours no more: stopped, at the engine's next step
        assert gen.jobs == {}
        assert [job for job, _ in gen._aborting.values()] == ["j"]  # ... not yet stopped
        [back] = await gen.bus.reclaim(stream, GENERATOR_GROUP, 0)  # the peer died: ours again
        assert back.entry_id == taken.entry_id == d.entry_id
        dispatch = asyncio.create_task(gen.dispatch(back))
        await asyncio.sleep(0)
        if meanwhile is not None:
            await meanwhile(r)
        await dispatch
        return list(gen.jobs), await r.xlen(dead_letter(stream))
    finally:
        stop.set()
        await engine
        await r.aclose()


def test_a_job_handed_back_while_its_old_run_is_stopping_starts_again(redis_url):
    assert asyncio.run(handed_back(redis_url)) == (["j"], 0)


def test_a_job_cancelled_while_its_dispatch_waits_never_starts(redis_url):
    async def cancel(r):
        await r.hset(query_cancelled("q", SINGLE), "j", 1)

    assert asyncio.run(handed_back(redis_url, cancel)) == ([], 0)
