"""Redis losing its data is one marker every service reads (`data_loss`): whoever notices first
writes it with when the loss began and a new epoch token; a worker that saw the token gone
marks it, one that never saw a token does not; the first coordinator to mark it lists the
coordinators it saw alive, and the loss ends when the last of them has stored again what it
held — or at its bound. A real Redis."""

import asyncio

import redis.asyncio as aioredis

from spex.proto.names import DATA_KEPT, DATA_LOST, DATA_LOST_AWAITED, SINGLE
from spex.shared.runtime.data_loss import DataLoss


def test_the_loss_waits_for_every_coordinator_listed(redis_url):
    async def go():
        r = aioredis.Redis.from_url(redis_url)
        try:
            await r.set(DATA_KEPT, "q-first")
            worker, late = (
                DataLoss(r, "gen-0", 30.0, partitions=SINGLE),
                DataLoss(r, "gen-1", 30.0, partitions=SINGLE),
            )
            a, b = (
                DataLoss(r, "coord-a", 30.0, partitions=SINGLE),
                DataLoss(r, "coord-b", 30.0, partitions=SINGLE),
            )
            await worker.check()  # the token seen
            standing = await a.round("coord-a", 9.0)
            await b.round("coord-b", 9.0)
            await r.delete(DATA_KEPT)  # Redis lost its data
            noticed = await worker.check(), await late.check()  # late never saw a token
            marked = await r.hgetall(DATA_LOST), await r.get(DATA_KEPT)
            await a.mark(DATA_KEPT, "coord-a", ["coord-a", "coord-b"])  # the first coordinator lists both
            await b.mark(DATA_KEPT, "coord-b", ["coord-c"])  # listed already: coord-c is not added
            awaited = await r.smembers(DATA_LOST_AWAITED)
            waiting = (await b.round("coord-b", 9.0)).awaited
            first = await a.done("coord-a", DATA_KEPT), await r.exists(DATA_LOST)
            last = await b.done("coord-b", DATA_KEPT), await r.exists(DATA_LOST)
            await worker.mark(DATA_KEPT)  # a loss noticed again is marked anew, for its bound only
            ttl = await r.pttl(DATA_LOST)
            return standing, noticed, marked, awaited, waiting, first, last, ttl
        finally:
            await r.aclose()

    standing, noticed, marked, awaited, waiting, first, last, ttl = asyncio.run(go())
    assert standing.members == ["coord-a"] and standing.awaited == []
    assert noticed == (True, False)
    (fields, token) = marked
    assert fields[b"by"] == b"gen-0" and fields[b"began_ms"].isdigit()
    assert token == b"lost:" + fields[b"began_ms"]  # the data's new epoch
    assert awaited == {b"coord-a", b"coord-b"} and waiting == [DATA_KEPT]
    assert first == (False, 1) and last == (True, 0)  # the last one stored again ends it
    assert 0 < ttl <= 30_000
