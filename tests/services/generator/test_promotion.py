"""A promotion goes from the coordinator's effect table through the control stream to the
generator that has the job, whose engine then runs it as a primary; one published before the
job reaches the generator is applied when it does."""

import asyncio

from spex.proto import SPECULATIVE, GenerateRequest, SubmitQuestionRequest
from spex.proto.names import DEFAULT_POOL, GENERATOR_GROUP, SINGLE, gen_jobs, query_request, worker_jobs
from spex.services.coordinator.handlers import Outgoing, Publish, effects
from spex.services.generator.service import Generator
from spex.shared.core.commands import PromoteCommand
from spex.shared.core.machine import QueryMachine
from spex.shared.core.search import SearchConfig
from spex.shared.runtime.bus import Bus
from spex.shared.runtime.connect import redis_client
from spex.shared.runtime.settings import Settings


async def wait_for(predicate, timeout_s: float = 10.0) -> bool:
    for _ in range(int(timeout_s / 0.02)):
        if predicate():
            return True
        await asyncio.sleep(0.02)
    return False


QUESTION = SubmitQuestionRequest(msg_id="s", query_id="qp", question="2+2?")


def _speculative_job(job_id: str) -> GenerateRequest:
    return GenerateRequest(
        msg_id=f"qp/{job_id}/gen", query_id="qp", job_id=job_id, node_id=f"n-{job_id}", parent_id="root",
        child_index=0, action="expand", prompt_node_ids=["root"], prompt_tokens=[300], seed=1,
        max_new_tokens=256, priority=SPECULATIVE,
    )  # fmt: skip


async def _promote(bus: Bus, job_id: str) -> None:
    """As the coordinator does: the machine's command, its effects, published."""
    machine = QueryMachine("qp", 20, SearchConfig("rebase", 4), 0)
    (publish,) = effects(Outgoing(QUESTION, 1, machine), [PromoteCommand(job_id)])
    assert isinstance(publish, Publish)
    await bus.publish_many([(publish.stream, publish.message)], [])


def test_a_promoted_job_runs_as_a_primary_on_the_generator_that_has_it(redis_url):
    async def main() -> None:
        # A slow simulated GPU: the job is still running while we look.
        settings = Settings(redis_url=redis_url, consumer="gen-p", time_scale=100.0, block_ms=50)
        r = redis_client(settings)
        coordinator = Bus(r, "coordinator", partitions=SINGLE)
        await r.set(query_request("qp", SINGLE), b"known")
        for stream in (worker_jobs(DEFAULT_POOL, "gen-p"), gen_jobs(DEFAULT_POOL)):
            await coordinator.ensure_group(stream, GENERATOR_GROUP)
        gen = Generator(r, settings)
        stop = asyncio.Event()
        task = asyncio.create_task(gen.run(stop))
        try:
            await coordinator.publish(gen_jobs(DEFAULT_POOL), _speculative_job("j-running"))
            assert await wait_for(lambda: "j-running" in gen.jobs)
            load = gen.engine.load()
            assert (load.primary, load.spec) == (0, 1)

            await _promote(coordinator, "j-running")
            assert await wait_for(lambda: gen.engine.load().primary == 1)
            assert gen.engine.load().spec == 0

            # Promoted before it arrives (the control stream is read as it comes; the job
            # waited in a stream): it starts as a primary.
            await _promote(coordinator, "j-later")
            await asyncio.sleep(0.3)
            await coordinator.publish(gen_jobs(DEFAULT_POOL), _speculative_job("j-later"))
            assert await wait_for(lambda: "j-later" in gen.jobs)
            load = gen.engine.load()
            assert (load.primary, load.spec) == (2, 0)
        finally:
            stop.set()
            await asyncio.wait_for(task, 10.0)
            await r.aclose()

    asyncio.run(main())
