"""On a cluster, the writes nothing would redo are on a replica before they return
(`shared/runtime/durable.py`): a submission acknowledged to its client, a job's result. With
the slot's replica stalled for a moment, each waits for it."""

import asyncio

import redis

from spex.proto import GenerateResult, names
from spex.shared.runtime.bus import Bus
from spex.shared.runtime.client import IngressClient
from spex.shared.runtime.connect import redis_client
from spex.shared.runtime.settings import Settings
from tests.cluster.conftest import PARTITIONS

STALL_S = 0.4  # under the cluster's 1 s node timeout: no failover, only a slow replica


def replica_port(cluster_url: str, key: str) -> int:
    client = redis.RedisCluster.from_url(cluster_url)
    try:
        nodes = client.nodes_manager.slots_cache[client.keyslot(key)]
        (replica,) = [n for n in nodes if n.server_type == "replica"]
        return int(replica.port)
    finally:
        client.close()


def on_replica(port: int, key: str) -> bool:
    conn = redis.Redis(port=port)
    conn.execute_command("READONLY")
    return bool(conn.exists(key))


async def waits_for_the_replica(redis_cluster, port: int, write) -> bool:
    """Whether `write()` was still waiting while the replica on `port` was stalled."""
    redis_cluster.stall(port)
    try:
        task = asyncio.create_task(write())
        await asyncio.sleep(STALL_S)
        waiting = not task.done()
    finally:
        redis_cluster.resume(port)
    await task
    return waiting


def test_a_submission_and_a_result_are_on_a_replica_when_they_return(cluster_url, redis_cluster):
    async def go():
        settings = Settings(redis_url=cluster_url, redis_cluster=True, partitions=PARTITIONS)
        r, parts = redis_client(settings), names.Partitions(PARTITIONS)
        try:
            qid = "durable-q1"
            request, inbox = names.query_request(qid, parts), names.query_inbox(qid, parts)
            port = replica_port(cluster_url, request)
            client = IngressClient(r, partitions=parts)
            waited = [
                await waits_for_the_replica(
                    redis_cluster, port, lambda: client.submit("2 + 2?", query_id=qid)
                )
            ]
            seen = [on_replica(port, request)]
            result = GenerateResult(
                msg_id=f"{qid}/r1", query_id=qid, job_id="j1", node_id="n1", text="4", tokens=1
            )
            bus = Bus(r, "gen-t", partitions=parts)
            waited.append(
                await waits_for_the_replica(redis_cluster, port, lambda: bus.publish(inbox, result))
            )
            seen.append(on_replica(port, inbox))
            return waited, seen
        finally:
            await r.aclose()

    waited, seen = asyncio.run(go())
    assert waited == [True, True]  # neither returned while the replica could not have it
    assert seen == [True, True]
