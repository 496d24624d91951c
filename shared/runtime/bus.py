"""The message bus: Redis Streams with consumer groups, at-least-once delivery, owner-checked
acknowledgement, heartbeats, reclaim of a dead consumer's entries, and a dead-letter stream.

Semantics (measured on Redis 6.2 and 7.0, `../shared/reference/redis_streams.md`):

- Each entry has one field, `e`: a MessagePack `proto` message. Decoding failures (bad bytes,
  unknown type, unknown protocol version) go to `dlq:<stream>` at once, with the reason.
- `publish` is idempotent by message id: a retried write (redis-py retries after a lost reply)
  never adds a second entry. Work streams are never trimmed with MAXLEN.
- A consumer first re-reads its own pending entries (`0`), on start and after a reconnect, then
  new ones (`>`).
- `XACK` does not check the owner, so `ack` does, in one script: a stalled consumer whose entry
  was reclaimed by a peer cannot acknowledge it.
- Long jobs `heartbeat` (`XCLAIM … JUSTID` to oneself resets the idle time without counting a
  delivery); peers `reclaim` entries idle past a few heartbeats; an entry delivered
  `max_deliveries` times is dead-lettered instead of retried forever.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from spex.proto import Message, ProtocolError, decode, encode
from spex.proto.names import dead_letter, dedupe_key
from spex.shared.runtime.metrics import DEAD_LETTERS

__all__ = ["Bus", "Delivery"]

DEDUPE_TTL_S = 86_400  # how long a message id is remembered for idempotent publishing

_PUBLISH = """
if redis.call('SET', KEYS[2], '1', 'NX', 'EX', ARGV[2]) then
  return redis.call('XADD', KEYS[1], '*', 'e', ARGV[1])
end
return false
"""

_ACK_IF_OWNER = """
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #p == 1 and p[1][2] == ARGV[3] then
  return redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
end
return 0
"""

_DEAD_LETTER = """
redis.call('XADD', KEYS[2], '*', 'stream', KEYS[1], 'group', ARGV[1], 'id', ARGV[2],
           'reason', ARGV[3], 'deliveries', ARGV[4], 'e', ARGV[5])
return redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
"""


@dataclass(frozen=True)
class Delivery:
    stream: str
    entry_id: str
    message: Message
    deliveries: int = 1


class Bus:
    """One consumer's view of the streams. The Redis client is injected (constructors only
    assemble), so a service runs in-process or as its own OS process alike."""

    def __init__(self, client: aioredis.Redis, consumer: str, max_deliveries: int = 3) -> None:
        self.r = client
        self.consumer = consumer
        self.max_deliveries = max_deliveries
        self._publish = client.register_script(_PUBLISH)
        self._ack = client.register_script(_ACK_IF_OWNER)
        self._dead_letter = client.register_script(_DEAD_LETTER)
        self._own_pending_read: set[tuple[str, str]] = set()
        self.dead_lettered = 0

    # ------------------------------------------------------------------ producing
    async def publish(self, stream: str, message: Message) -> str | None:
        """Append `message`; None if a message with its id was already published."""
        entry = await self._publish(
            keys=[stream, dedupe_key(message.msg_id)], args=[encode(message), DEDUPE_TTL_S]
        )
        return _s(entry) if entry else None

    # ------------------------------------------------------------------ consuming
    async def ensure_group(self, stream: str, group: str) -> None:
        """Create the group (and the stream) unless it exists: safe to call on every start."""
        try:
            await self.r.xgroup_create(stream, group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def reconnected(self) -> None:
        """After a reconnect, re-read own pending entries first (a lost reply leaves them)."""
        self._own_pending_read.clear()

    async def read(
        self, streams: Sequence[str], group: str, count: int, block_ms: int = 2000
    ) -> list[Delivery]:
        """Up to `count` deliveries: own pending entries first, then new ones. Undecodable
        entries are dead-lettered here and never returned."""
        out: list[Delivery] = []
        for stream in streams:
            if (stream, group) in self._own_pending_read:
                continue
            replies: Any = await self.r.xreadgroup(group, self.consumer, {stream: "0"}, count=count)
            entries = replies[0][1] if replies else []
            if len(entries) < count:
                self._own_pending_read.add((stream, group))
            out += await self._decode_all(stream, group, entries)
            if out:
                return out
        if count <= 0:
            return out
        replies_new: Any = await self.r.xreadgroup(
            group, self.consumer, dict.fromkeys(streams, ">"), count=count, block=block_ms
        )
        for stream, entries in replies_new or []:
            out += await self._decode_all(_s(stream), group, entries)
        return out

    async def ack(self, delivery: Delivery, group: str) -> bool:
        """Acknowledge only if this consumer still owns the entry (False for a zombie)."""
        done = await self._ack(keys=[delivery.stream], args=[group, delivery.entry_id, self.consumer])
        return bool(done)

    async def heartbeat(self, stream: str, group: str, entry_ids: Sequence[str]) -> None:
        """Reset the idle time of entries this consumer is still working on."""
        if entry_ids:
            await self.r.xclaim(stream, group, self.consumer, 0, list(entry_ids), justid=True)

    async def reclaim(self, stream: str, group: str, min_idle_ms: int, count: int = 100) -> list[Delivery]:
        """Take over entries idle for `min_idle_ms` (their consumer stopped heartbeating);
        entries already delivered `max_deliveries` times go to the dead-letter stream."""
        pending: Any = await self.r.xpending_range(
            stream, group, min="-", max="+", count=count, idle=min_idle_ms
        )
        out: list[Delivery] = []
        for p in pending:
            entry_id, deliveries = _s(p["message_id"]), int(p["times_delivered"])
            claimed: Any = await self.r.xclaim(stream, group, self.consumer, min_idle_ms, [entry_id])
            if not claimed:
                continue  # a peer claimed it first
            _, fields = claimed[0]
            if deliveries >= self.max_deliveries:
                payload = (fields or {}).get(b"e", b"")
                await self._dead(
                    stream, group, entry_id, f"delivered {deliveries} times", deliveries, payload
                )
                continue
            out += await self._decode_all(stream, group, claimed, deliveries + 1)
        return out

    async def dead_letter(self, delivery: Delivery, group: str, reason: str) -> None:
        """Give up on an entry whose handler keeps failing: park it with the reason."""
        await self._dead(
            delivery.stream, group, delivery.entry_id, reason, delivery.deliveries, encode(delivery.message)
        )

    # ------------------------------------------------------------------ internals
    async def _decode_all(self, stream: str, group: str, entries: Any, deliveries: int = 1) -> list[Delivery]:
        out = []
        for entry_id, fields in entries:
            entry_id = _s(entry_id)
            payload = (fields or {}).get(b"e")
            if payload is None:  # deleted or trimmed while pending: nothing to do but clear it
                await self._dead(
                    stream, group, entry_id, "entry has no body (deleted while pending)", deliveries, b""
                )
                continue
            try:
                message = decode(stream, payload)
            except ProtocolError as exc:
                await self._dead(stream, group, entry_id, str(exc), deliveries, payload)
                continue
            out.append(Delivery(stream, entry_id, message, deliveries))
        return out

    async def _dead(
        self, stream: str, group: str, entry_id: str, reason: str, deliveries: int, payload: bytes
    ) -> None:
        self.dead_lettered += 1
        DEAD_LETTERS.labels(self.consumer, stream).inc()
        await self._dead_letter(
            keys=[stream, dead_letter(stream)], args=[group, entry_id, reason, deliveries, payload]
        )


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
