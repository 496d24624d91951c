"""A real Redis Cluster (Valkey, three primaries and three replicas) for the cluster tests."""

import pytest
import redis

from spex.shared.runtime.redis_cluster import RedisCluster

PARTITIONS = 8


@pytest.fixture(scope="session")
def redis_cluster():
    with RedisCluster(primaries=3, replicas=1, node_timeout_ms=1000) as cluster:
        yield cluster


@pytest.fixture
def cluster_url(redis_cluster):
    """The cluster's seed URL, every primary flushed and every node healthy before each test."""
    redis_cluster.await_healthy()
    client = redis.RedisCluster.from_url(redis_cluster.url)
    client.flushall(target_nodes=redis.RedisCluster.PRIMARIES)
    client.close()
    return redis_cluster.url
