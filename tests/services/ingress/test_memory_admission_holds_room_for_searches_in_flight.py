"""Admission by memory: each submission reserves what its search may hold in Redis (by algorithm
and target) and its answer, or its refusal, gives it back; the submit script refuses a question
whose reserve, with those in flight, would pass the room Redis has left (SPEX_MEMORY_HEADROOM
of its maxmemory, less what it uses). Checking and reserving are one script, so a burst of
concurrent submissions cannot together pass the room. A Redis whose ACL denies INFO admits
everything, said once; a cluster of one primary (whose INFO is not per node) is read like
several. A real Redis."""

import asyncio

import pytest
import redis.asyncio as aioredis
import structlog

from spex.proto import AnswerResult
from spex.proto.names import SINGLE
from spex.services.coordinator.store import QueryStore
from spex.services.ingress.admission import MemoryAdmission
from spex.shared.runtime.client import IngressClient
from spex.shared.runtime.refusals import MemoryFull
from spex.shared.runtime.reserve import BYTES_PER_TARGET, FIXED_BYTES, PROMPT_COPIES, Room, search_bytes

MIB = 2**20


def test_the_room_is_the_headroom_less_what_redis_uses(redis_url):
    async def go():
        r = aioredis.Redis.from_url(redis_url)
        try:
            used = int((await r.info("memory"))["used_memory"])
            await r.config_set("maxmemory", used + 50 * MIB)
            return used, await MemoryAdmission(r, 0.9, partitions=SINGLE).room()
        finally:
            await r.config_set("maxmemory", 0)
            await r.aclose()

    used, room = asyncio.run(go())
    assert room.free == pytest.approx(0.9 * (used + 50 * MIB) - used, abs=MIB)  # used moves a little
    assert room.total == int(0.9 * (used + 50 * MIB))


def test_a_burst_of_submissions_cannot_pass_the_room_together(redis_url):
    one = search_bytes("rebase", 16, question_bytes=len("10 + 10?"))  # the longest question asked

    async def go():
        r = aioredis.Redis.from_url(redis_url)
        await r.flushdb()

        async def room():
            return Room(5 * one + 10, 100 * one)  # five searches' reserves, not six

        client = IngressClient(r, room=room, partitions=SINGLE)

        async def ask(i):
            try:
                return await client.submit(f"{i} + {i}?", algorithm="rebase", target=16)
            except MemoryFull as exc:
                return exc

        try:
            return await asyncio.gather(*(ask(i) for i in range(20))), await client.reserved()
        finally:
            await r.aclose()

    outcomes, reserved = asyncio.run(go())
    refused = [o for o in outcomes if isinstance(o, MemoryFull)]
    assert len(refused) == 15 and 5 * one - 20 <= reserved <= 5 * one  # questions of 7 or 8 bytes
    assert "maxmemory" in str(refused[0]) and "SPEX_MEMORY_HEADROOM" in str(refused[0])


def test_a_submission_reserves_its_search_and_its_answer_gives_it_back(redis_url):
    async def go():
        r = aioredis.Redis.from_url(redis_url)
        await r.flushdb()
        client = IngressClient(r, partitions=SINGLE)
        store = QueryStore(r, "coord-0", lease_s=5.0, result_ttl_s=60, partitions=SINGLE)
        try:
            wide = await client.submit("1+1?", algorithm="rebase", target=64)
            narrow = await client.submit("2+2?", algorithm="rstar", target=10)
            both = await client.reserved()
            await store.reject(await client.request(wide), "a test's")
            one = await client.reserved()
            epoch = (await store.adopt(narrow, read_request=False)).epoch
            answer = AnswerResult(msg_id=f"{narrow}/answer", query_id=narrow, answer="4")
            answered = await store.answer(await client.request(narrow), epoch, answer)
            await store.reject(await client.request(narrow), "again")  # given back once only
            return both, one, answered, await client.reserved()
        finally:
            await r.aclose()

    both, one, answered, none = asyncio.run(go())
    assert both == search_bytes("rebase", 64, question_bytes=4) + search_bytes("rstar", 10, question_bytes=4)
    assert one == search_bytes("rstar", 10, question_bytes=4)
    assert answered and none == 0


def test_a_search_reserves_by_its_algorithm_target_and_question():
    assert search_bytes("rstar", 256) == FIXED_BYTES + 256 * BYTES_PER_TARGET["rstar"]
    assert search_bytes("ets", 16, per_target=100_000) == FIXED_BYTES + 1_600_000  # the operator's rate
    long = search_bytes("rebase", 16, question_bytes=98_000) - search_bytes("rebase", 16)
    assert long == PROMPT_COPIES * 98_000  # the question held once (and on the ingress stream)
    assert BYTES_PER_TARGET["rstar"] > 24_500  # above what rStar was measured to hold


def test_info_denied_admits_and_says_so_once(redis_url):
    async def go():
        admin = aioredis.Redis.from_url(redis_url)
        await admin.acl_setuser(
            "noinfo", enabled=True, passwords=["+secret-pass-1"], keys=["*"], commands=["+@all", "-info"]
        )
        r = aioredis.Redis.from_url(redis_url, username="noinfo", password="secret-pass-1")
        memory = MemoryAdmission(
            r, 0.9, clock=iter(range(0, 100, 2)).__next__, partitions=SINGLE
        )  # a read each time
        try:
            with structlog.testing.capture_logs() as logs:
                rooms = [await memory.room() for _ in range(3)]
            return rooms, logs
        finally:
            await r.aclose()
            await admin.acl_deluser("noinfo")
            await admin.aclose()

    rooms, logs = asyncio.run(go())
    assert rooms == [None, None, None]
    assert [entry["event"] for entry in logs] == ["memory_admission_off"]


class _OnePrimary(aioredis.RedisCluster):
    """A cluster client of one primary: redis-py answers INFO with that node's reply alone."""

    def __init__(self) -> None:  # no connection: only `info` is asked
        pass

    async def info(self, section=None, *args, **kwargs):
        return {"used_memory": 80 * MIB, "maxmemory": 100 * MIB}

    def get_node_from_key(self, key, replica=False):
        return None  # one shard: every partition on it


def test_a_cluster_of_one_primary_is_read():
    assert asyncio.run(MemoryAdmission(_OnePrimary(), 0.9, partitions=SINGLE).room()) == Room(
        10 * MIB, int(0.9 * 100 * MIB)
    )


def test_a_drifted_total_is_recounted_from_the_questions_in_flight(redis_url):
    """A reserve whose question left flight without giving it back (an ingress newer than the
    coordinator that answered it) is dropped, and the total set to the rest, by a coordinator's
    round."""

    async def go():
        r = aioredis.Redis.from_url(redis_url)
        await r.flushdb()
        client = IngressClient(r, partitions=SINGLE)
        store = QueryStore(r, "coord-0", lease_s=5.0, result_ttl_s=60, partitions=SINGLE)
        try:
            kept = await client.submit("1+1?", algorithm="rebase", target=16)
            await r.hset("ingress:reserved", "gone", 5_000_000)  # its question no longer in flight
            await r.incrby("ingress:reserved:total", 5_000_123)
            total = await store.recount_reserves()
            return kept, total, await client.reserved(), await r.hkeys("ingress:reserved")
        finally:
            await r.aclose()

    kept, total, reserved, entries = asyncio.run(go())
    assert total == reserved == search_bytes("rebase", 16, question_bytes=4)
    assert entries == [kept.encode()]


class _SlowInfo:
    """A Redis whose INFO takes a while, counting how often it is asked."""

    def __init__(self) -> None:
        self.asked = 0

    async def info(self, section=None):
        self.asked += 1
        await asyncio.sleep(0.05)
        return {"used_memory": 10 * MIB, "maxmemory": 100 * MIB}


def test_requests_at_start_wait_for_the_first_figure():
    """No request is admitted unchecked while the first INFO is on its way: they share it."""

    async def go():
        r = _SlowInfo()
        memory = MemoryAdmission(r, 0.9, partitions=SINGLE)  # type: ignore[arg-type]
        return await asyncio.gather(*(memory.room() for _ in range(10))), r.asked

    rooms, asked = asyncio.run(go())
    assert rooms == [Room(80 * MIB, 90 * MIB)] * 10 and asked == 1
