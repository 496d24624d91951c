"""Admission by memory counts what the questions in flight will still write: a burst accepted
while Redis is nearly empty cannot outgrow the room it was admitted into (each question in
flight holds `reserve` bytes). A Redis whose ACL denies INFO admits everything, said once; a
cluster of one primary (whose INFO is not per node) is read like several. A real Redis."""

import asyncio

import redis.asyncio as aioredis
import structlog

from spex.services.admission import MemoryAdmission, per_question
from spex.shared.runtime.settings import Settings

MIB = 2**20


def test_questions_in_flight_hold_room_until_answered(redis_url):
    async def go():
        r = aioredis.Redis.from_url(redis_url)
        flying = {"n": 0}

        async def in_flight():
            return flying["n"]

        clock = {"t": 0.0}
        memory = MemoryAdmission(r, 0.9, reserve=MIB, in_flight=in_flight, clock=lambda: clock["t"])
        try:
            used = int((await r.info("memory"))["used_memory"])
            await r.config_set("maxmemory", used + 50 * MIB)
            seen = []
            for n in (0, 30, 60):  # 60 questions' searches would not fit: 90% of used + 50 MiB
                flying["n"], clock["t"] = n, clock["t"] + 2  # fresh figures each time
                seen.append(await memory.refusal())
            return seen
        finally:
            await r.config_set("maxmemory", 0)
            await r.aclose()

    empty, some, many = asyncio.run(go())
    assert empty is None and some is None
    assert many is not None and "60 questions in flight" in many and "SPEX_MEMORY_HEADROOM" in many


def test_the_reserve_defaults_to_the_largest_search_allowed():
    assert per_question(Settings(max_target="256")) == 256 * 23_000  # rStar's, the largest a unit
    assert per_question(Settings(max_target="rebase=64,rstar=10,ets=16,rest=8")) == 64 * 11_500
    assert per_question(Settings(memory_per_question=123)) == 123


def test_a_burst_between_reads_is_counted_as_it_is_admitted(redis_url):
    """The figures are read once a second; the questions admitted meanwhile count in flight."""

    async def go():
        r = aioredis.Redis.from_url(redis_url)

        async def in_flight():
            return 0  # as read: none yet

        memory = MemoryAdmission(r, 0.9, reserve=10 * MIB, in_flight=in_flight, clock=lambda: 0.0)
        try:
            used = int((await r.info("memory"))["used_memory"])
            await r.config_set("maxmemory", used + 40 * MIB)
            return [await memory.refusal() for _ in range(6)]  # one read: the clock stands still
        finally:
            await r.config_set("maxmemory", 0)
            await r.aclose()

    said = asyncio.run(go())
    admitted = [s is None for s in said]
    assert admitted == [True] * 4 + [False] * 2, said  # 4 × 10 MiB, not 5, under 90% of used + 40 MiB


def test_info_denied_admits_and_says_so_once(redis_url):
    async def go():
        admin = aioredis.Redis.from_url(redis_url)
        await admin.acl_setuser(
            "noinfo", enabled=True, passwords=["+secret-pass-1"], keys=["*"], commands=["+@all", "-info"]
        )
        r = aioredis.Redis.from_url(redis_url, username="noinfo", password="secret-pass-1")

        async def in_flight():
            return 1_000

        clock = iter(range(0, 100, 2)).__next__  # fresh figures each time
        memory = MemoryAdmission(r, 0.9, reserve=MIB, in_flight=in_flight, clock=clock)
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
    async def in_flight():
        return 0

    memory = MemoryAdmission(_OnePrimary(), 0.9, reserve=MIB, in_flight=in_flight)
    refused = asyncio.run(memory.refusal())
    assert refused is not None and "95.0 MiB used" in refused
