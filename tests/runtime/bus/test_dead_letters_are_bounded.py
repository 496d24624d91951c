"""Dead-letter streams are bounded, since a client's bad questions can fill them: an entry keeps
the first `DEAD_LETTER_BYTES` of its message (and says how long it was) with its reason, a
stream keeps about `DEAD_LETTERS_KEPT` entries, and it expires `DEAD_LETTER_TTL_S` after its
last one — the bus's and the coordinator's (an inbox entry it cannot read) alike. Real Redis."""

import asyncio

import pytest
import redis.asyncio as aioredis

from spex.proto.names import SINGLE, dead_letter, query_inbox
from spex.services.coordinator.store import QueryStore
from spex.shared.runtime.bus import DEAD_LETTER_BYTES, DEAD_LETTER_TTL_S, DEAD_LETTERS_KEPT, Bus

pytestmark = pytest.mark.every_redis  # scripts: where Redis versions differ

STREAM, GROUP = "gen:jobs:default", "gen"
BIG = b"\xc1" + b"x" * 400_000  # not MessagePack: dead-lettered as it is read


def test_a_400_kb_message_is_dead_lettered_truncated_with_its_reason_and_a_ttl(redis_url):
    async def go():
        r = aioredis.Redis.from_url(redis_url)
        bus = Bus(r, "gen-0", partitions=SINGLE)
        await bus.ensure_group(STREAM, GROUP)
        await r.xadd(STREAM, {"e": BIG})
        assert await bus.read([STREAM], GROUP, count=10, block_ms=100) == []
        ((_, fields),) = await r.xrange(dead_letter(STREAM))
        ttl = await r.ttl(dead_letter(STREAM))
        size = await r.memory_usage(dead_letter(STREAM), samples=0)
        await r.aclose()
        return fields, ttl, size

    fields, ttl, size = asyncio.run(go())
    assert fields[b"e"] == BIG[:DEAD_LETTER_BYTES] and int(fields[b"bytes"]) == len(BIG)
    assert b"MessagePack" in fields[b"reason"]
    assert DEAD_LETTER_TTL_S - 60 < ttl <= DEAD_LETTER_TTL_S
    assert size < 3 * DEAD_LETTER_BYTES  # not the 400 KB


def test_a_dead_letter_stream_keeps_about_its_cap(redis_url):
    async def go():
        r = aioredis.Redis.from_url(redis_url)
        bus = Bus(r, "gen-0", partitions=SINGLE)
        await bus.ensure_group(STREAM, GROUP)
        for start in range(0, 2 * DEAD_LETTERS_KEPT, 500):
            async with r.pipeline(transaction=False) as pipe:
                for i in range(start, start + 500):
                    pipe.xadd(STREAM, {"e": b"\xc1 bad %d" % i})
                await pipe.execute()
            while await bus.read([STREAM], GROUP, count=500, block_ms=None):
                pass
            await bus.read([STREAM], GROUP, count=500, block_ms=None)
        kept = await r.xlen(dead_letter(STREAM))
        await r.aclose()
        return kept

    kept = asyncio.run(go())
    assert DEAD_LETTERS_KEPT <= kept < 1.2 * DEAD_LETTERS_KEPT  # of 2,000 (MAXLEN ~: whole nodes)


def test_an_inbox_entry_the_coordinator_parks_is_bounded_too(redis_url):
    async def go():
        r = aioredis.Redis.from_url(redis_url)
        await QueryStore(r, "coord-0", 30.0, 3_600, partitions=SINGLE).park(
            "q1", "1-0", "not MessagePack", BIG
        )
        parked = dead_letter(query_inbox("q1", SINGLE))
        ((_, fields),) = await r.xrange(parked)
        ttl = await r.ttl(parked)
        await r.aclose()
        return fields, ttl

    fields, ttl = asyncio.run(go())
    assert len(fields[b"e"]) == DEAD_LETTER_BYTES and int(fields[b"bytes"]) == len(BIG)
    assert fields[b"reason"] == b"not MessagePack" and fields[b"id"] == b"1-0"
    assert 0 < ttl <= DEAD_LETTER_TTL_S
