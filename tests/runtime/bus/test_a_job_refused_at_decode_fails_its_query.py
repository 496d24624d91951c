"""A job whose bytes do not decode (a value outside its set: a producer of another version, or
a bug) is dead-lettered with the reason, and its query still hears that the job was given up
on — from the ids its bytes name — so it fails instead of waiting forever."""

import asyncio

import msgspec
import pytest

from spex.proto import GenerateRequest, JobFailedEvent, ScoreRequest, decode, encode
from spex.proto.names import (
    DEFAULT_POOL,
    GENERATOR_GROUP,
    SCORE_JOBS,
    SCORER_GROUP,
    SINGLE,
    dead_letter,
    gen_jobs,
    query_inbox,
    query_request,
)
from spex.shared.runtime.bus import Bus
from spex.shared.runtime.connect import redis_client
from spex.shared.runtime.jobs import tell_query
from spex.shared.runtime.settings import Settings

pytestmark = pytest.mark.every_redis  # where Redis versions differ: every server kind

GENERATE = GenerateRequest(
    msg_id="q/j/gen", query_id="q", epoch=3, job_id="j", node_id="n", parent_id="r", child_index=0,
    action="expand", prompt_node_ids=["r"], prompt_tokens=[10], seed=1,
)  # fmt: skip
SCORE = ScoreRequest(
    msg_id="q/n2/score", query_id="q", epoch=3, job_id="n2", node_id="n2", prompt_node_ids=["r", "n2"],
    prompt_tokens=[10, 5],
)  # fmt: skip


def _with(message, **fields) -> bytes:
    return msgspec.msgpack.encode({**msgspec.msgpack.decode(encode(message)), **fields})


def test_a_job_that_does_not_decode_fails_its_query(redis_url):
    async def go():
        r = redis_client(Settings(redis_url=redis_url))
        bus = Bus(r, "worker-0", partitions=SINGLE)
        bus.on_dead = lambda message, reason: tell_query(bus, message, reason)
        await r.set(query_request("q", SINGLE), b"known")
        cases = [
            (gen_jobs(DEFAULT_POOL), GENERATOR_GROUP, _with(GENERATE, content="bogus")),
            (SCORE_JOBS, SCORER_GROUP, _with(SCORE, content="bogus")),
        ]
        for stream, group, payload in cases:
            await bus.ensure_group(stream, group)
            await r.xadd(stream, {"e": payload})
            assert await bus.read([stream], group, count=5, block_ms=100) == []
        parked = [await r.xrange(dead_letter(stream)) for stream, _, _ in cases]
        inbox = [
            decode(query_inbox("q", SINGLE), f[b"e"]) for _, f in await r.xrange(query_inbox("q", SINGLE))
        ]
        await r.aclose()
        return parked, inbox

    parked, inbox = asyncio.run(go())
    assert all(len(p) == 1 and p[0][1][b"reason"].startswith(b"content:") for p in parked)
    told = [(e.kind, e.job_id, e.node_id, e.epoch) for e in inbox]
    assert told == [("generate", "j", "n", 3), ("score", "n2", "n2", 3)]
    assert all(isinstance(e, JobFailedEvent) and e.reason.startswith("content:") for e in inbox)
