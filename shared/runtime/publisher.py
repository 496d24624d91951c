"""Writing to the bus: each message appended once, to its query's part of a stream.

- Each entry has one field, `e`: a MessagePack `proto` message, stamped with the time it is
  published (`created_ms`) unless its publisher set one.
- `publish` is idempotent by message id: a retried write (redis-py retries after a lost reply),
  or a command a coordinator replays after a takeover, never adds a second entry. The ids are
  kept per query (`{q:<id>}:sent`) while it is searched (`SENT_TTL_S` at most); its answer lets
  them go soon after (one published after the answer expires with the answer).
  Work streams are never trimmed with MAXLEN; a fan-out stream (no group) may be published
  with `keep_s`, which trims it to what is younger. A result for a query is published only
  while the query exists and is not answered (`require`): nothing re-creates the inbox of a
  query that was never submitted, has expired, or was answered (its answer deletes it).
- A query's own messages (`require`) are written even by a Redis at its maxmemory: the work of a
  question admitted drains rather than wedges (`_PUBLISH`).
- Partitions (`spex.proto.names`): a message goes to its query's part of a global stream.
- On a cluster, `publish` (a job's result, which its worker acknowledges the job after) is
  durable: on a replica before it returns (`durable.Durable`). A cluster's pipelines cannot
  run scripts, so `publish_many` runs each slot's calls in order, the slots side by side.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

import msgspec
import redis.asyncio as aioredis
from redis.crc import key_slot

from spex.proto import Message, encode
from spex.proto.names import Partitions, logical, query_sent, reply_key
from spex.proto.text import as_str
from spex.shared.runtime.durable import Durable
from spex.shared.runtime.streams import ScriptCall, is_cluster

__all__ = ["SENT_TTL_S", "Publisher"]

SENT_TTL_S = 86_400  # a query's published message ids, while it has no answer (then its answer's TTL)

# KEYS: stream, the query's sent ids, its answer[, a key that must exist, and the answer not].
# ARGV: payload, message id, sent TTL s, keep ms (0: no trim).
# A message that requires its query (a job's result, a coordinator's job: work a question
# admitted does) is written even by a Redis at its maxmemory: its first write is one Redis
# allows there (PERSIST of the stream, which has no TTL: it changes nothing), after which Redis
# lets a script's writes through. Admission counted what the question holds
# (`services.admission`): its search finishes, and its answer compacts it, rather than wedge.
_PUBLISH = """
if KEYS[4] then
  if redis.call('EXISTS', KEYS[4]) == 0 or redis.call('EXISTS', KEYS[3]) == 1 then return false end
  redis.call('PERSIST', KEYS[1])
end
if redis.call('HSETNX', KEYS[2], ARGV[2], '1') == 0 then return false end
if redis.call('TTL', KEYS[2]) == -1 then
  local answered = redis.call('TTL', KEYS[3])
  redis.call('EXPIRE', KEYS[2], answered > 0 and answered or ARGV[3])
end
local keep = tonumber(ARGV[4])
if keep > 0 then
  local now = redis.call('TIME')
  local floor = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) - keep
  return redis.call('XADD', KEYS[1], 'MINID', tostring(math.max(0, floor)), '*', 'e', ARGV[1])
end
return redis.call('XADD', KEYS[1], '*', 'e', ARGV[1])
"""


# A mark (a job cancelled) on a query's hash, expiring as its sent ids do; its first write is an
# EXPIRE, which a Redis at its maxmemory allows (see `_PUBLISH`). KEYS: hash. ARGV: field, TTL s.
_MARK = """
redis.call('EXPIRE', KEYS[1], ARGV[2])
redis.call('HSET', KEYS[1], ARGV[1], 1)
return redis.call('EXPIRE', KEYS[1], ARGV[2])
"""


class Publisher:
    """Appends messages to streams. The Redis client is injected (constructors only assemble),
    so a service runs in-process or as its own OS process alike."""

    def __init__(self, client: aioredis.Redis, *, partitions: Partitions) -> None:
        self.r = client
        self.partitions = partitions  # the deployment's: every key it builds is of this count
        self._publish = client.register_script(_PUBLISH)
        self._mark = client.register_script(_MARK)
        self._durable = Durable(cast(aioredis.RedisCluster, client)) if is_cluster(client) else None

    async def publish(self, stream: str, message: Message, require: str | None = None) -> str | None:
        """Append `message`; None if a message with its id was already published, or if the
        key `require` (the query's request, for a result) does not exist or the query is
        answered."""
        qid = message.query_id
        parts = self.partitions
        keys = [parts.placed(stream, qid), query_sent(qid, parts), reply_key(qid, parts)]
        keys += [require] if require else []
        payload = encode(_stamped(message, int(time.time() * 1000)))
        args: list[Any] = [payload, message.msg_id, SENT_TTL_S, 0]
        if self._durable is not None:  # a result its job's ack follows: on a replica first
            entry = await self._durable.run(self._publish, keys, args)
        else:
            entry = await self._publish(keys=keys, args=args)
        return as_str(entry) if entry else None

    async def publish_many(
        self,
        items: Sequence[tuple[str, Message]],
        marks: Sequence[tuple[str, str]] = (),
        keep_s: dict[str, float] | None = None,
        require: Callable[[Message], str] | None = None,
        then: Sequence[ScriptCall] = (),
    ) -> tuple[list[str | None], list[Any]]:
        """`publish` each (stream, message) in order, and set each (hash, field) of `marks`
        (the hash expiring as the query's sent ids do), in one round trip (a pipeline, not a
        transaction: each publish stays deduplicated on its own), then run each script call
        of `then` (its first key names its slot) in the same round trip, after them. A stream
        in `keep_s` is trimmed to entries younger than that; a message is published only while
        the key `require(message)` exists and its query has no answer, when given. Every
        message is encoded first, so a ProtocolError sends nothing. Returns the entry ids
        (None: not published) and what each script call returned."""
        now_ms = int(time.time() * 1000)
        encoded = [
            (self.partitions.placed(stream, m.query_id), m.query_id, m.msg_id, encode(_stamped(m, now_ms)))
            for stream, m in items
        ]
        needs = [[require(m)] if require else [] for _, m in items]
        if not encoded and not marks and not then:
            return [], []
        keep_s, parts = keep_s or {}, self.partitions
        calls: list[ScriptCall] = [
            (self._publish, [stream, query_sent(qid, parts), reply_key(qid, parts), *need],
             [payload, msg_id, SENT_TTL_S, int(keep_s.get(logical(stream), 0) * 1000)])
            for (stream, qid, msg_id, payload), need in zip(encoded, needs, strict=True)
        ]  # fmt: skip
        calls += then
        marked: list[ScriptCall] = [(self._mark, [key], [name, SENT_TTL_S]) for key, name in marks]
        calls = marked + calls  # the marks first
        if is_cluster(self.r):
            results = (await self._by_slot(calls))[len(marks) :]
        else:
            pipe = self.r.pipeline(transaction=False)
            for script, keys, args in calls:
                await script(keys=keys, args=args, client=pipe)
            results = (await pipe.execute())[len(marks) :]
        entries = [as_str(entry) if entry else None for entry in results[: len(encoded)]]
        return entries, results[len(encoded) :]

    async def _by_slot(self, calls: list[ScriptCall]) -> list[Any]:
        """A pipeline's script calls on a cluster, whose pipelines cannot run scripts: each
        slot's in order, the slots side by side."""
        by_slot: dict[int, list[int]] = {}
        for i, (_, keys, _) in enumerate(calls):
            by_slot.setdefault(key_slot(keys[0].encode()), []).append(i)
        out: list[Any] = [None] * len(calls)

        async def one_slot(slot: int) -> None:
            for i in by_slot[slot]:
                script, keys, args = calls[i]
                out[i] = await script(keys=keys, args=args)

        await asyncio.gather(*(one_slot(slot) for slot in by_slot))
        return out


def _stamped(message: Message, now_ms: int) -> Message:
    """`message` with the time it is published (`created_ms`), unless its publisher set one:
    its reader's clock less this is its time on the bus (`metrics.BUS_HOP`)."""
    return message if message.created_ms else msgspec.structs.replace(message, created_ms=now_ms)
