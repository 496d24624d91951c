"""A generator takes at most its slots from its streams (its own, the shared one, a dead
peer's) — XREADGROUP counts per stream, so a careless read takes a multiple — and stops
reporting itself live while its engine cannot be reached."""

import asyncio

import msgspec

from spex.proto import GenerateRequest
from spex.proto.names import (
    DEFAULT_POOL,
    GEN_WORKERS,
    GENERATOR_GROUP,
    SINGLE,
    gen_jobs,
    query_request,
    worker_jobs,
    worker_load,
)
from spex.services.generator.service import Generator
from spex.shared.runtime.bus import Bus
from spex.shared.runtime.connect import redis_client
from spex.shared.runtime.settings import Settings


def _job(i: int) -> GenerateRequest:
    return GenerateRequest(
        msg_id=f"qs/j{i}/gen", query_id="qs", job_id=f"j{i}", node_id=f"n{i}", parent_id="root",
        child_index=i, action="expand", prompt_node_ids=["root"], prompt_tokens=[300], seed=i,
        max_new_tokens=256,
    )  # fmt: skip


def test_a_generator_never_holds_more_jobs_than_its_slots(redis_url):
    async def main() -> None:
        # A slow simulated GPU: nothing finishes while we look.
        settings = Settings(
            redis_url=redis_url, consumer="gen-a", worker_slots=3, time_scale=100.0, block_ms=50
        )
        r = redis_client(settings)
        producer = Bus(r, "producer", partitions=SINGLE)
        await r.set(query_request("qs", SINGLE), b"known")
        dead_peer = worker_jobs(DEFAULT_POOL, "gen-gone")
        await r.zadd(GEN_WORKERS, {"gen-gone": 0})  # registered once, no load key: dead
        for stream in (worker_jobs(DEFAULT_POOL, "gen-a"), gen_jobs(DEFAULT_POOL), dead_peer):
            await producer.ensure_group(stream, GENERATOR_GROUP)
        for i in range(30):
            stream = (worker_jobs(DEFAULT_POOL, "gen-a"), gen_jobs(DEFAULT_POOL), dead_peer)[i % 3]
            await producer.publish(stream, msgspec.structs.replace(_job(i)))
        gen = Generator(r, settings)
        stop = asyncio.Event()
        task = asyncio.create_task(gen.run(stop))
        try:
            peak = 0
            for _ in range(60):  # 3 s: the intake, the dead peer's drain, reclaims
                peak = max(peak, len(gen.jobs))
                await asyncio.sleep(0.05)
            assert peak == 3
            assert await r.exists(worker_load("gen-a"))
            # The engine becomes unreachable: the worker stops renewing its liveness.
            gen.engine.healthy = False
            await r.delete(worker_load("gen-a"))
            await asyncio.sleep(0.3)
            assert not await r.exists(worker_load("gen-a"))
        finally:
            stop.set()
            await task
            await r.aclose()

    asyncio.run(main())
