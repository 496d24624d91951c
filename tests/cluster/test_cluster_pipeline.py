"""The pipeline on a Redis Cluster (issue #23): services as real processes on three primaries
and three replicas, the global streams split into partitions. Every question is answered once
with the tree virtual time grows, the work spread over every shard — and so when a primary is
SIGKILLed (its replica promoted) or stalled past the failover timeout while questions run."""

import asyncio

import pytest
import redis

from spex.proto import AnswerResult, decode, names
from spex.proto.names import Partitions
from spex.shared.runtime.settings import Settings
from tests.cluster.conftest import PARTITIONS
from tests.services.cluster import Cluster
from tests.services.workload import budgets_received, submit_all, virtual_time

ALGORITHM, TARGET, MODE, QUESTIONS = "rebase", 8, "spex", 6
RUNS: list[int] = []  # budget updates each run's queries received


def test_a_cluster_needs_partitions():
    with pytest.raises(ValueError, match="SPEX_PARTITIONS"):
        Settings(redis_cluster=True)


async def answers_counted(r) -> dict[str, int]:
    counts: dict[str, int] = {}
    for part in Partitions(PARTITIONS).spread(names.ANSWERS):
        for _, fields in await r.xrange(part):
            answer = decode(names.ANSWERS, fields[b"e"])
            assert isinstance(answer, AnswerResult)
            counts[answer.query_id] = counts.get(answer.query_id, 0) + 1
    return counts


def run(url, fault=None, **settings):
    async def go():
        options = {"redis_cluster": True, "partitions": PARTITIONS, "heartbeat_s": 0.5, "lease_s": 2.0}
        cluster = Cluster(url, "processes", **{**options, **settings})
        await cluster.start_all(generators=2, coordinators=2)
        try:
            task = asyncio.create_task(submit_all(cluster, ALGORITHM, TARGET, QUESTIONS, MODE))
            if fault is not None:
                await asyncio.sleep(1.0)  # work under way on every shard
                assert not task.done(), "the questions were answered before the fault"
                await asyncio.to_thread(fault)
            answers = await task
            await asyncio.sleep(0.3)
            RUNS.append(await budgets_received(cluster, answers))
            return answers, await answers_counted(cluster.client.r), cluster.logs()
        finally:
            await cluster.stop()

    return asyncio.run(go())


def assert_once_with_fault_free_trees(answers, counts):
    assert all(a is not None for a in answers.values()), "a question was not answered"
    failed = {q: a.error for q, a in answers.items() if a.error}
    assert not failed, f"failed answers: {failed}"
    assert {q: (a.answer, a.tree_digest) for q, a in answers.items()} == virtual_time(
        ALGORITHM, TARGET, QUESTIONS, MODE
    )
    assert {q: counts.get(q) for q in answers} == dict.fromkeys(answers, 1)


def test_the_pipeline_answers_on_a_cluster_with_every_shard_used(cluster_url, redis_cluster):
    answers, counts, _ = run(cluster_url)
    assert_once_with_fault_free_trees(answers, counts)
    assert RUNS[-1] > 0  # the allocator read every part of the stats stream and sent shares
    sizes = [redis.Redis(port=port).dbsize() for port in redis_cluster.primary_ports()]
    assert len(sizes) == 3 and all(sizes), sizes  # the partitions spread the keys over every shard


def test_a_primary_sigkilled_mid_search_its_replica_promoted(cluster_url, redis_cluster):
    victim = redis_cluster.primary_ports()[1]

    def fault():
        redis_cluster.kill(victim)
        redis_cluster.await_healthy()  # the replica took its slots over

    try:
        answers, counts, logs = run(cluster_url, fault)
    finally:
        redis_cluster.revive(victim)  # back as a replica of its successor
    assert_once_with_fault_free_trees(answers, counts)
    assert victim not in redis_cluster.primary_ports()


def test_a_primary_cut_off_past_the_failover_timeout(cluster_url, redis_cluster):
    """SIGSTOP: the shard's primary answers nobody (clients nor its peers) until its replica
    is promoted; when it comes back it learns it was replaced and follows the new primary."""
    victim = redis_cluster.primary_ports()[0]

    def fault():
        redis_cluster.stall(victim)
        try:
            redis_cluster.await_healthy()
        finally:
            redis_cluster.resume(victim)

    answers, counts, _ = run(cluster_url, fault)
    assert_once_with_fault_free_trees(answers, counts)
    redis_cluster.await_healthy()


def test_a_node_whose_port_was_taken_meanwhile_starts_on_fresh_ports(monkeypatch):
    import socket

    from spex.shared.runtime import redis_server
    from spex.shared.runtime.redis_cluster import RedisCluster

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    ports = [taken.getsockname()[1]]  # the first port handed out is someone else's by now
    real = redis_server.free_port
    monkeypatch.setattr(redis_server, "free_port", lambda: ports.pop() if ports else real())
    node = RedisCluster(primaries=1, replicas=0)._new_node()
    try:
        assert node.running() and node.port != taken.getsockname()[1]
    finally:
        node.stop()
        taken.close()
