"""The answer and the refusal scripts run on a Redis at its maxmemory: their first write is one
Redis allows when out of memory, so the answer is written and the query compacted (which frees
memory) instead of the script being refused and the answer waiting on memory only it would
free. A real Redis at `maxmemory 1`."""

import redis

from spex.services.coordinator import scripts

ANSWER_KEYS = [
    "lease", "epoch", "reply", "answers", "inflight", "active", "client-inflight", "inbox",
    "request", "ckpt", "client-key", "sent", "cancelled", "tree", "tree.z", "reserved", "reserved-total",
]  # fmt: skip
REJECT_KEYS = [
    "reply", "answers", "inflight", "client-inflight", "request", "active", "lease", "epoch",
    "inbox", "ckpt", "client-key", "sent", "cancelled", "reserved", "reserved-total",
]  # fmt: skip


def _full(r):
    r.set("lease", "coord-0")
    r.set("epoch", 3)
    r.zadd("inflight", {"q1": 1})
    r.hset("reserved", "q1", 1000)
    r.set("reserved-total", 1500)  # another query's 500 besides
    r.xadd("tree", {"e": b"x" * 1000})
    r.config_set("maxmemory", 1)
    try:
        r.set("probe", 1)
    except redis.exceptions.OutOfMemoryError:
        return
    raise AssertionError("Redis at maxmemory 1 took a write: the test shows nothing")


def test_the_answer_script_writes_on_a_full_redis(redis_url):
    r = redis.Redis.from_url(redis_url)
    try:
        r.flushdb()
        _full(r)
        args = ("coord-0", 3, b"answer", "q1", 60, b"rec", 60)
        done = r.eval(scripts.ANSWER, len(ANSWER_KEYS), *ANSWER_KEYS, *args)
        reply, record, tree, flying = r.get("reply"), r.get("tree.z"), r.exists("tree"), r.zcard("inflight")
        reserve = r.hlen("reserved"), r.get("reserved-total")
    finally:
        r.config_set("maxmemory", 0)
        r.flushdb()
        r.close()
    assert done == 1 and reply == b"answer" and record == b"rec"
    assert tree == 0 and flying == 0  # compacted, and out of flight
    assert reserve == (0, b"500")  # its reserve given back


def test_the_refusal_script_writes_on_a_full_redis(redis_url):
    r = redis.Redis.from_url(redis_url)
    try:
        r.flushdb()
        _full(r)
        done = r.eval(scripts.REJECT, len(REJECT_KEYS), *REJECT_KEYS, b"failed", "q1", 60, 60)
        reply, flying = r.get("reply"), r.zcard("inflight")
        reserve = r.hlen("reserved"), r.get("reserved-total")
    finally:
        r.config_set("maxmemory", 0)
        r.flushdb()
        r.close()
    assert done == 1 and reply == b"failed" and flying == 0
    assert reserve == (0, b"500")
