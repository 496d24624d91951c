"""Jobs of queries the system does not know never run, and an answered query's keys expire
(`SPEX_RESULT_TTL_S`). Real service processes, a real Redis."""

import asyncio

from spex.proto import GenerateRequest, encode
from spex.proto.names import (
    ANSWERS,
    DEFAULT_POOL,
    GENERATOR_GROUP,
    SCORE_JOBS,
    SINGLE,
    gen_jobs,
    query_inbox,
    query_request,
)
from tests.services.cluster import Cluster
from tests.services.helpers import score_job


def test_jobs_of_unknown_queries_never_run_and_answered_queries_expire(redis_url):
    async def go():
        cluster = Cluster(redis_url, "processes")
        await cluster.start_all()
        r = cluster.client.r
        try:
            job = GenerateRequest(
                msg_id="m", query_id="ghost", job_id="j", node_id="n", parent_id="p", child_index=0,
                action="expand", prompt_node_ids=["ghost"], prompt_tokens=[10], seed=1,
            )  # fmt: skip
            await r.xadd(gen_jobs(DEFAULT_POOL), {"e": encode(job)})
            await r.xadd(SCORE_JOBS, {"e": encode(score_job(["ghost", "n"], query_id="ghost"))})
            qid = await cluster.client.submit("1+1?", algorithm="rstar", target=3)
            await cluster.client.result(qid, timeout_s=30)
            await asyncio.sleep(0.3)
            ghost = await r.exists(query_inbox("ghost", SINGLE))
            pending = (await r.xpending(gen_jobs(DEFAULT_POOL), GENERATOR_GROUP))["pending"]
            ttls = [
                await r.ttl(k)
                for k in (query_inbox(qid, SINGLE), query_request(qid, SINGLE), f"{{q:{qid}}}:answer")
            ]
            return ghost, pending, ttls, await r.xlen(ANSWERS)
        finally:
            await cluster.stop()

    ghost, pending, ttls, answered = asyncio.run(go())
    assert ghost == 0 and pending == 0
    assert all(0 < t <= 86_400 for t in ttls)  # SPEX_RESULT_TTL_S's default: a day
    assert answered == 1
