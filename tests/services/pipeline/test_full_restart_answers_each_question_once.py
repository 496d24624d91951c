"""Every service killed at once with questions in flight and brought back by the supervisor:
each question is answered once, with the fault-free tree. Real service processes, a real Redis."""

import asyncio

from tests.services.cluster import Cluster
from tests.services.helpers import all_adopted, answers_by_query, wait_for
from tests.services.workload import submit_all, virtual_time


def test_a_full_restart_with_questions_in_flight_answers_each_once_with_the_same_tree(redis_url):
    questions = 12

    async def go():
        cluster = Cluster(redis_url, "processes", time_scale=0.01, heartbeat_s=0.3, lease_s=1.0)
        await cluster.start_all(generators=2, coordinators=2)
        r = cluster.client.r
        try:
            task = asyncio.create_task(submit_all(cluster, "rebase", 8, questions, "spex"))
            assert await wait_for(lambda: all_adopted(r, questions // 2))
            for name in list(cluster.procs):
                cluster.supervisor.hold(name, True)
                cluster.kill(name)
            await asyncio.sleep(0.5)
            for name in list(cluster.procs):
                cluster.supervisor.hold(name, False)  # the supervisor brings them all back
            answers = await asyncio.wait_for(task, 90)
            logs = cluster.logs()
            return answers, await answers_by_query(r), logs
        finally:
            await cluster.stop()

    answers, counts, logs = asyncio.run(go())
    assert {q: (a.answer, a.tree_digest) for q, a in answers.items()} == virtual_time(
        "rebase", 8, questions, "spex"
    )
    assert len(counts) == questions and set(counts.values()) == {1}
    assert "changed size during iteration" not in logs
