"""On a Redis Cluster, one lease round renews the leases a coordinator holds in every slot:
one script per partition (a query's keys and its part of the active set share its slot), all
sent at once — none refused for touching two slots."""

import asyncio

import redis.asyncio as aioredis

from spex.proto import names
from spex.services.coordinator.store import QueryStore
from tests.cluster.conftest import PARTITIONS

QUERIES = 40


def test_every_lease_is_renewed_in_every_slot(cluster_url):
    parts = names.Partitions(PARTITIONS)

    async def go():
        r = aioredis.RedisCluster.from_url(cluster_url)
        store = QueryStore(r, "coord-0", lease_s=2.0, result_ttl_s=60, partitions=parts)
        qids = [f"q{i}" for i in range(QUERIES)]
        epochs = [(await store.adopt(q, read_request=False)).epoch for q in qids]
        other = QueryStore(r, "coord-1", lease_s=2.0, result_ttl_s=60, partitions=parts)
        renewed = await store.renew_all(qids)
        not_theirs = await other.renew_all(qids[:5])
        await r.aclose()
        return qids, epochs, renewed, not_theirs

    qids, epochs, renewed, not_theirs = asyncio.run(go())
    assert len({parts.partition(q) for q in qids}) == PARTITIONS  # every partition held
    assert epochs == [1] * QUERIES
    assert renewed == dict.fromkeys(qids, 1)
    assert not_theirs == dict.fromkeys(qids[:5], 0)  # another's lease is not renewed
