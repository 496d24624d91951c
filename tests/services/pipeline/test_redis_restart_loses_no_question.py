"""A Redis restart with questions in flight loses none, with and without persistence, and the
services stay up. Real service processes, a real Redis killed and started again."""

import asyncio

import pytest

from tests.services.cluster import Cluster
from tests.services.helpers import alive, all_adopted, answers_by_query, wait_for
from tests.services.workload import submit_all, virtual_time


@pytest.mark.parametrize("persistent", [True, False], ids=["aof", "no-persistence"])
def test_a_redis_restart_loses_no_question(tmp_path, persistent):
    """With AOF the data survive and every question is answered; without persistence the
    groups are re-created and the coordinator searches what it held again from its request."""
    from spex.shared.runtime.redis_server import RedisServer

    server = RedisServer(data_dir=tmp_path / "redis" if persistent else None, fsync="always").start()
    questions = 4

    async def go():
        cluster = Cluster(server.url, "processes", time_scale=0.01)
        await cluster.start_all()
        r = cluster.client.r
        try:
            task = asyncio.create_task(submit_all(cluster, "rebase", 8, questions, "spex"))
            assert await wait_for(lambda: all_adopted(r, questions))
            server.kill()
            await asyncio.sleep(0.5)
            server.start()
            answers = await asyncio.wait_for(task, 90)
            fresh = await cluster.client.submit("after the restart", algorithm="rstar", target=3)
            after = await cluster.client.result(fresh, timeout_s=30)
            down = [n for n in cluster.procs if not alive(cluster, n)]
            return answers, after, await answers_by_query(r), down
        finally:
            await cluster.stop()
            server.stop()

    answers, after, counts, down = asyncio.run(go())
    assert {q: (a.answer, a.tree_digest) for q, a in answers.items()} == virtual_time(
        "rebase", 8, questions, "spex"
    )
    assert after is not None and not down
    if persistent:
        assert all(n == 1 for n in counts.values())
