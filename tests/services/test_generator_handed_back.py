"""A job a peer took over while this generator stalled is stopped here; the engine drops the
request at its next step, and until then holds its id. Handed back in that window (the peer died
and we reclaim it), the job used to be refused by the engine as a duplicate request id, then
dead-lettered and its query failed. Now the start waits for the old run to leave."""

import asyncio

from spex.proto import GenerateRequest
from spex.proto.names import DEFAULT_POOL, GENERATOR_GROUP, dead_letter, query_request, worker_jobs
from spex.services.generator import Generator
from spex.shared.runtime.bus import Bus
from spex.shared.runtime.connect import redis_client
from spex.shared.runtime.settings import Settings


def test_a_job_handed_back_while_its_old_run_is_stopping_starts_again(redis_url):
    async def main() -> None:
        settings = Settings(redis_url=redis_url, consumer="gen-a", time_scale=5.0)
        r = redis_client(settings)
        stream = worker_jobs(DEFAULT_POOL, "gen-a")
        producer = Bus(r, "producer")
        await producer.ensure_group(stream, GENERATOR_GROUP)
        await r.set(query_request("q"), b"known")
        job = GenerateRequest(
            msg_id="q/j/gen", query_id="q", job_id="j", node_id="n", parent_id="root",
            child_index=0, action="expand", prompt_node_ids=["root"], prompt_tokens=[300], seed=0,
            max_new_tokens=64,
        )  # fmt: skip
        await producer.publish(stream, job)
        gen, stop = Generator(r, settings), asyncio.Event()
        engine = asyncio.create_task(gen.run_engine(stop))
        try:
            [d] = await gen.bus.read([stream], GENERATOR_GROUP, count=1, block_ms=None)
            await gen.dispatch(d)
            while gen.engine.load().running == 0:
                await asyncio.sleep(0.01)
            [taken] = await Bus(r, "gen-b").reclaim(stream, GENERATOR_GROUP, 0)  # a peer takes it
            await gen.heartbeat(stream)  # ours no more: stopped, at the engine's next step
            assert gen.jobs == {}
            [back] = await gen.bus.reclaim(stream, GENERATOR_GROUP, 0)  # the peer died: ours again
            assert back.entry_id == taken.entry_id == d.entry_id
            await gen.dispatch(back)
            assert list(gen.jobs) == ["j"]
            assert await r.xlen(dead_letter(stream)) == 0
        finally:
            stop.set()
            await engine
            await r.aclose()

    asyncio.run(main())
