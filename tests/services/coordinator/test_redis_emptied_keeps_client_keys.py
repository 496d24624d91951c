"""Redis emptied (FLUSHALL: a restart without persistence) with questions in flight under
client keys: the coordinator searches them again from the requests it holds, and meanwhile a
GET of each reads as in flight (202), never 404, and a re-post of its client key gets its
query id, not a new one and a second search (issue 40: 137 GETs answered 404 for ~2 s, and
the keys were not restored)."""

import asyncio

from spex.shared.runtime.redis_server import free_port
from tests.services.cluster import Cluster
from tests.services.helpers import http, wait_for, wait_http

QUESTIONS = 5
WATCH_S = 4.0  # past the coordinator's next lease round (a third of the lease)


def test_a_flushall_keeps_client_keys_and_never_reads_404(redis_url):
    port = free_port()
    base = f"http://127.0.0.1:{port}/v1/questions"

    def post(i):
        return http("POST", base, {"question": f"{i} + {i}?", "client_key": f"key-{i}", "target": 4})

    async def go():
        cluster = Cluster(redis_url, "inprocess", http_port=port)
        await cluster.start("coordinator", "coord-0")  # no generator: every question stays in flight
        await cluster.start("ingress", "ingress-0")
        await asyncio.to_thread(wait_http, base + "/x")
        try:
            posted = [await asyncio.to_thread(post, i) for i in range(QUESTIONS)]
            qids = [body["query_id"] for _, body in posted]
            coordinator = cluster.service("coord-0")

            async def all_held():
                return set(coordinator.queries) == set(qids)

            assert await wait_for(all_held)
            await cluster.client.r.flushall()
            statuses = []
            end = asyncio.get_running_loop().time() + WATCH_S
            while asyncio.get_running_loop().time() < end:
                for qid in qids:
                    statuses.append((await asyncio.to_thread(http, "GET", f"{base}/{qid}"))[0])
                await asyncio.sleep(0.05)
            reposted = [await asyncio.to_thread(post, i) for i in range(QUESTIONS)]
            return qids, statuses, reposted
        finally:
            await cluster.stop()

    qids, statuses, reposted = asyncio.run(go())
    assert 404 not in statuses, f"{statuses.count(404)} of {len(statuses)} GETs said 404"
    assert [status for status, _ in reposted] == [202] * QUESTIONS
    assert [body["query_id"] for _, body in reposted] == qids  # the same queries, not new ones
