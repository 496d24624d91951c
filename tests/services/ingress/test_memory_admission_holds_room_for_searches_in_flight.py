"""Admission by memory counts what the searches in flight may still write: each submission
reserves its search's bytes (by algorithm and target) and its answer, or its refusal, gives them
back, so a burst accepted while Redis is nearly empty cannot outgrow the room it was admitted
into; between two reads, what the questions admitted reserved counts too. A Redis
whose ACL denies INFO admits everything, said once; a cluster of one primary (whose INFO is not
per node) is read like several. A real Redis."""

import asyncio

import redis.asyncio as aioredis
import structlog

from spex.services.admission import MemoryAdmission
from spex.services.coordinator.store import QueryStore
from spex.shared.runtime.client import IngressClient
from spex.shared.runtime.reserve import search_bytes

MIB = 2**20


def _admission(r, reserved, admitted=lambda: 0, clock=None):
    async def read():
        return reserved()

    return MemoryAdmission(r, 0.9, read, admitted, **({"clock": clock} if clock else {}))


def test_searches_in_flight_hold_room_until_answered(redis_url):
    async def go():
        r = aioredis.Redis.from_url(redis_url)
        held = {"bytes": 0}
        clock = {"t": 0.0}
        memory = _admission(r, lambda: held["bytes"], clock=lambda: clock["t"])
        try:
            used = int((await r.info("memory"))["used_memory"])
            await r.config_set("maxmemory", used + 50 * MIB)
            seen = []
            for mib in (0, 30, 60):  # 60 MiB of searches would not fit: 90% of used + 50 MiB
                held["bytes"], clock["t"] = mib * MIB, clock["t"] + 2  # fresh figures each time
                seen.append(await memory.refusal())
            return seen
        finally:
            await r.config_set("maxmemory", 0)
            await r.aclose()

    empty, some, many = asyncio.run(go())
    assert empty is None and some is None
    assert many is not None and "60.0 MiB held for the searches in flight" in many
    assert "SPEX_MEMORY_HEADROOM" in many


def test_a_submission_reserves_its_search_and_its_answer_gives_it_back(redis_url):
    async def go():
        r = aioredis.Redis.from_url(redis_url)
        await r.flushdb()
        client = IngressClient(r)
        store = QueryStore(r, "coord-0", lease_s=5.0, result_ttl_s=60)
        try:
            wide = await client.submit("1+1?", algorithm="rebase", target=64)
            narrow = await client.submit("2+2?", algorithm="rstar", target=10)
            admitted = client.admitted
            both, since = await client.reserved(), client.admitted
            await store.reject(await client.request(wide), "a test's")
            one = await client.reserved()
            epoch = await store.acquire(narrow)
            answer = await store.answer(await client.request(narrow), epoch, _answer(narrow))
            again = await store.answer(await client.request(narrow), epoch, _answer(narrow))  # idempotent
            return admitted, both, since, one, answer, again, await client.reserved()
        finally:
            await r.aclose()

    admitted, both, since, one, answered, again, none = asyncio.run(go())
    assert (
        admitted
        == both
        == search_bytes("rebase", 64) + search_bytes("rstar", 10)
        == 64 * 11_500 + 10 * 23_000
    )
    assert since == 0  # counted afresh from the read
    assert one == search_bytes("rstar", 10)
    assert answered and none == 0


def _answer(qid):
    from spex.proto import AnswerResult

    return AnswerResult(msg_id=f"{qid}/answer", query_id=qid, answer="2")


def test_a_search_reserves_by_its_algorithm_and_target():
    assert search_bytes("rstar", 256) == 256 * 23_000 and search_bytes("ets", 16) == 16 * 8_500
    assert search_bytes("ets", 16, per_target=100_000) == 1_600_000  # the operator's figure


def test_a_burst_between_reads_counts_what_it_reserved(redis_url):
    """The figures are read once a second; what the questions admitted meanwhile reserved counts."""

    async def go():
        r = aioredis.Redis.from_url(redis_url)
        admitted = {"n": 0}
        memory = _admission(r, lambda: 0, lambda: admitted["n"] * 10 * MIB, clock=lambda: 0.0)
        try:
            used = int((await r.info("memory"))["used_memory"])
            await r.config_set("maxmemory", used + 40 * MIB)
            said = []
            for _ in range(6):  # one read: the clock stands still
                said.append(await memory.refusal())
                admitted["n"] += said[-1] is None
            return said
        finally:
            await r.config_set("maxmemory", 0)
            await r.aclose()

    said = asyncio.run(go())
    assert [s is None for s in said] == [True] * 4 + [False] * 2, said  # 4 × 10 MiB under 90% of +40


def test_info_denied_admits_and_says_so_once(redis_url):
    async def go():
        admin = aioredis.Redis.from_url(redis_url)
        await admin.acl_setuser(
            "noinfo", enabled=True, passwords=["+secret-pass-1"], keys=["*"], commands=["+@all", "-info"]
        )
        r = aioredis.Redis.from_url(redis_url, username="noinfo", password="secret-pass-1")
        memory = _admission(r, lambda: 1_000 * MIB, clock=iter(range(0, 100, 2)).__next__)
        try:
            with structlog.testing.capture_logs() as logs:
                said = [await memory.refusal() for _ in range(3)]
            return said, logs
        finally:
            await r.aclose()
            await admin.acl_deluser("noinfo")
            await admin.aclose()

    said, logs = asyncio.run(go())
    assert said == [None, None, None]
    assert [entry["event"] for entry in logs] == ["memory_admission_off"]


class _OnePrimary(aioredis.RedisCluster):
    """A cluster client of one primary: redis-py answers INFO with that node's reply alone."""

    def __init__(self) -> None:  # no connection: only `info` is asked
        pass

    async def info(self, section=None, *args, **kwargs):
        return {"used_memory": 95 * MIB, "maxmemory": 100 * MIB}


def test_a_cluster_of_one_primary_is_read():
    refused = asyncio.run(_admission(_OnePrimary(), lambda: 0).refusal())
    assert refused is not None and "95.0 MiB used" in refused
