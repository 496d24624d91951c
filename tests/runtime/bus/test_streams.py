"""The bus against a real Redis server: idempotent publish, groups, own-pending re-read,
owner-checked ack, heartbeats, reclaim and dead letters."""

import asyncio
import time

import msgspec
import pytest
import redis.asyncio as aioredis

from spex.proto import ScoreResult, encode
from spex.proto.names import COORDINATOR_GROUP, SINGLE, dead_letter, query_inbox
from spex.shared.runtime.bus import Bus

pytestmark = pytest.mark.every_redis  # where Redis versions differ: every server kind

STREAM, GROUP = query_inbox("q1", SINGLE), COORDINATOR_GROUP


def msg(i, **kw):
    # Stamped already (the bus stamps a message it publishes unstamped), so what is read back
    # equals what was published.
    kw.setdefault("created_ms", 1)
    return ScoreResult(msg_id=f"m{i}", query_id="q1", job_id=f"j{i}", node_id=f"n{i}", reward=0.5, **kw)


def run(coro):
    return asyncio.run(coro)


async def _bus(url, name, **kw):
    bus = Bus(aioredis.Redis.from_url(url), name, **kw, partitions=SINGLE)
    await bus.ensure_group(STREAM, GROUP)
    return bus


def test_publish_is_idempotent_by_message_id(redis_url):
    async def go():
        bus = await _bus(redis_url, "a")
        first = await bus.publish(STREAM, msg(1))
        again = await bus.publish(STREAM, msg(1))
        assert first and again is None
        assert await bus.r.xlen(STREAM) == 1
        await bus.ensure_group(STREAM, GROUP)  # creating the group twice is fine

    run(go())


def test_a_restarted_consumer_rereads_its_own_pending_entries(redis_url):
    async def go():
        a = await _bus(redis_url, "worker-1")
        await a.publish(STREAM, msg(1))
        (d,) = await a.read([STREAM], GROUP, count=10, block_ms=100)  # then "crashes" before ack
        again = await _bus(redis_url, "worker-1")  # same stable consumer name
        (d2,) = await again.read([STREAM], GROUP, count=10, block_ms=100)
        assert d2.entry_id == d.entry_id and d2.message == msg(1)
        assert await again.ack(d2, GROUP)
        assert await again.read([STREAM], GROUP, count=10, block_ms=50) == []

    run(go())


def test_a_zombie_cannot_ack_an_entry_a_peer_reclaimed(redis_url):
    async def go():
        a, b = await _bus(redis_url, "a"), await _bus(redis_url, "b")
        await a.publish(STREAM, msg(1))
        (mine,) = await a.read([STREAM], GROUP, count=1, block_ms=100)
        await asyncio.sleep(0.05)
        (taken,) = await b.reclaim(STREAM, GROUP, min_idle_ms=20)
        assert taken.entry_id == mine.entry_id and taken.deliveries == 2
        assert not await a.ack(mine, GROUP)  # stalled owner: refused
        assert await b.ack(taken, GROUP)

    run(go())


def test_heartbeat_keeps_a_long_job_from_being_reclaimed(redis_url):
    async def go():
        a, b = await _bus(redis_url, "a"), await _bus(redis_url, "b")
        await a.publish(STREAM, msg(1))
        (d,) = await a.read([STREAM], GROUP, count=1, block_ms=100)
        for _ in range(3):
            await asyncio.sleep(0.04)
            await a.heartbeat(STREAM, GROUP, [d.entry_id])
        assert await b.reclaim(STREAM, GROUP, min_idle_ms=60) == []
        assert await a.ack(d, GROUP)

    run(go())


def test_malformed_and_unknown_version_go_to_the_dead_letter_stream(redis_url):
    async def go():
        bus = await _bus(redis_url, "a")
        await bus.r.xadd(STREAM, {"e": b"\xc1 not msgpack"})
        raw = msgspec.msgpack.decode(encode(msg(2)))
        raw["v"] = 9
        await bus.r.xadd(STREAM, {"e": msgspec.msgpack.encode(raw)})
        await bus.publish(STREAM, msg(3))
        got = await bus.read([STREAM], GROUP, count=10, block_ms=100)
        assert [d.message for d in got] == [msg(3)]  # the service keeps serving
        dead = await bus.r.xrange(dead_letter(STREAM))
        reasons = [fields[b"reason"].decode() for _, fields in dead]
        assert len(reasons) == 2
        assert "MessagePack" in reasons[0] and "unknown protocol version 9" in reasons[1]
        pending = await bus.r.xpending(STREAM, GROUP)
        assert pending["pending"] == 1  # the dead-lettered entries were acknowledged

    run(go())


def test_an_entry_that_keeps_failing_is_dead_lettered_after_max_deliveries(redis_url):
    async def go():
        bus = await _bus(redis_url, "a", max_deliveries=3)
        await bus.publish(STREAM, msg(1))
        await bus.read([STREAM], GROUP, count=1, block_ms=100)  # delivery 1, never acked
        for expected in (2, 3):
            await asyncio.sleep(0.03)
            (d,) = await bus.reclaim(STREAM, GROUP, min_idle_ms=20)
            assert d.deliveries == expected
        await asyncio.sleep(0.03)
        assert await bus.reclaim(STREAM, GROUP, min_idle_ms=20) == []
        (entry,) = await bus.r.xrange(dead_letter(STREAM))
        assert b"delivered 3 times" in entry[1][b"reason"]

    run(go())


def test_the_bus_stamps_a_message_with_when_it_was_published(redis_url):
    async def go():
        r = aioredis.Redis.from_url(redis_url)
        bus = Bus(r, "c1", partitions=SINGLE)
        await bus.ensure_group(STREAM, GROUP)
        before = int(time.time() * 1000)
        await bus.publish(STREAM, msg(1, created_ms=0))  # unstamped: the bus stamps it
        await bus.publish(STREAM, msg(2, created_ms=42))  # stamped by its publisher: kept
        got = await bus.read([STREAM], GROUP, count=10, block_ms=50)
        await r.aclose()
        return before, [d.message.created_ms for d in got]

    before, stamps = run(go())
    assert stamps[0] >= before and stamps[1] == 42
