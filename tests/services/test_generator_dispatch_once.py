"""A job delivered twice at once — after a reconnect the intake re-reads the generator's own
pending entries while its heartbeat round reclaims the same ones, idle while Redis was away —
starts once. Both dispatches used to pass the "already ours" check before either started the
job, and the engine refused the second as a duplicate request id: the job was dead-lettered
and its query failed (the cluster test's failover found it)."""

import asyncio

from spex.proto import GenerateRequest
from spex.proto.names import DEFAULT_POOL, GENERATOR_GROUP, dead_letter, query_request, worker_jobs
from spex.services.generator import Generator
from spex.shared.runtime.bus import Bus
from spex.shared.runtime.connect import redis_client
from spex.shared.runtime.settings import Settings


def test_a_job_dispatched_twice_at_once_starts_once(redis_url):
    async def main() -> None:
        settings = Settings(redis_url=redis_url, consumer="gen-a", time_scale=100.0)
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
        gen = Generator(r, settings)
        try:
            [d] = await gen.bus.read([stream], GENERATOR_GROUP, count=1, block_ms=None)
            await asyncio.gather(gen.dispatch(d), gen.dispatch(d))
            assert list(gen.jobs) == ["j"]
            assert await r.xlen(dead_letter(stream)) == 0
        finally:
            await r.aclose()

    asyncio.run(main())
