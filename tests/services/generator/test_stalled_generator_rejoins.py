"""A generator stalled past its heartbeats loses its jobs to its peer and, resumed, rejoins as a
full member that takes new work. Real service processes, a real Redis."""

import asyncio

from redis.exceptions import ResponseError

from spex.proto import decode
from spex.proto.names import DEFAULT_POOL, GENERATOR_GROUP, gen_jobs, worker_jobs, worker_load
from tests.services.cluster import Cluster
from tests.services.helpers import alive, restarts, wait_for
from tests.services.workload import submit_all, virtual_time


def test_a_generator_stalled_past_its_heartbeats_rejoins_when_resumed(redis_url):
    async def go():
        # Both generators on the shared stream (no affinity): the stalled one holds jobs of
        # every query, which its peer must take over. (With affinity its queries move to the
        # peer as soon as its liveness lapses, and what it held may be cancelled instead.)
        cluster = Cluster(
            redis_url, "processes", time_scale=0.02, heartbeat_s=0.2, lease_s=1.0, affinity=False
        )
        await cluster.start_all(generators=2)
        r = cluster.client.r
        try:
            task = asyncio.create_task(submit_all(cluster, "rebase", 8, 3, "spex"))
            assert await wait_for(lambda: _pending_of(r, "gen-0"))
            cluster.stall("gen-0")
            await asyncio.sleep(2.0)  # ten heartbeats: gen-1 reclaims its jobs
            cluster.resume("gen-0")
            answers = await asyncio.wait_for(task, 60)
            # The resumed worker is a full member again: it takes jobs of new questions.
            before = await _jobs_done(r, "gen-0")
            more = await submit_all(cluster, "rebase", 8, 3, "spex", first=3)
            worked = await _jobs_done(r, "gen-0") - before
            log = cluster._read_log("gen-0")
            return answers, more, log, worked, alive(cluster, "gen-0"), restarts(cluster, "gen-0")
        finally:
            await cluster.stop()

    answers, more, log, worked, up, restarted = asyncio.run(go())
    assert {q: (a.answer, a.tree_digest) for q, a in answers.items()} == virtual_time("rebase", 8, 3, "spex")
    expected = virtual_time("rebase", 8, 6, "spex")
    assert {q: (a.answer, a.tree_digest) for q, a in more.items()} == {q: expected[q] for q in more}
    assert up and restarted == 0
    assert "job_taken_over" in log  # it learnt which jobs a peer had taken
    assert worked > 0 and "service_stopped" not in log  # working again, not idle


async def _jobs_done(r, consumer):
    raw = await r.get(worker_load(consumer))
    return decode(worker_load(consumer), raw).jobs_done if raw else 0


async def _pending_of(r, consumer):
    """Whether `consumer` holds jobs, from the shared stream or its own (affinity routing)."""
    for stream in (gen_jobs(DEFAULT_POOL), worker_jobs(DEFAULT_POOL, consumer)):
        try:
            info = await r.xpending(stream, GENERATOR_GROUP)
        except ResponseError:  # no group yet
            continue
        if any(c["name"].decode() == consumer and c["pending"] > 0 for c in info["consumers"] or []):
            return True
    return False
