"""A score job the scorer cannot run (an empty path) is dead-lettered with the field at fault;
the scorer keeps serving and never restarts. Real service processes, a real Redis."""

import asyncio

from spex.proto import encode
from spex.proto.names import SCORE_JOBS
from tests.services.cluster import Cluster
from tests.services.helpers import known_query, reasons, restarts, score_job, wait_for


def test_a_score_job_with_an_empty_path_is_dead_lettered_and_the_scorer_lives(redis_url):
    async def go():
        cluster = Cluster(redis_url, "processes")
        await cluster.start_all()
        r = cluster.client.r
        try:
            await known_query(r)
            await r.xadd(SCORE_JOBS, {"e": encode(score_job([]))})
            assert await wait_for(lambda: r.exists(f"dlq:{SCORE_JOBS}"))
            qid = await cluster.client.submit("still scoring?", algorithm="rstar", target=3)
            answer = await cluster.client.result(qid, timeout_s=30)
            return answer, await reasons(r, SCORE_JOBS), restarts(cluster, "scorer-0")
        finally:
            await cluster.stop()

    answer, why, restarted = asyncio.run(go())
    assert answer is not None and answer.nodes > 0
    assert len(why) == 1 and "prompt_node_ids" in why[0]
    assert restarted == 0  # it never crashed
