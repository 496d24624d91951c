"""The message bus: Redis Streams with consumer groups, at-least-once delivery, owner-checked
acknowledgement, heartbeats, reclaim of a dead consumer's entries, and a dead-letter stream.
Writing (idempotent by message id) is the `Publisher`'s (`spex.shared.runtime.publisher`),
which a `Bus` is too.

Semantics (measured on Redis 6.2 and 7.0; the tests in `tests/runtime/bus` hold them):

- Each entry has one field, `e`: a MessagePack `proto` message. Decoding failures (bad bytes,
  unknown type, unknown protocol version) go to `dlq:<stream>` at once, with the reason;
  dead-letter streams are bounded in entry size, length and age (`bus_scripts.DEAD_LETTER`).
- A consumer first re-reads its own pending entries (`0`), on start and after a reconnect, then
  new ones (`>`). Re-reading counts as a delivery: an entry re-read more than
  `max_deliveries` times (a handler that crashes the process on it) is dead-lettered.
- Partitions (`spex.proto.names`): a reader names the global stream and reads every part (on a
  Redis Cluster, one command per slot: `streams.read_streams`).
- A group that vanished (a Redis restarted without persistence) is re-created on the next
  call that finds it missing (`NOGROUP`), and own pending entries are re-read.
- `XACK` does not check the owner, so `ack` does, in one script: a stalled consumer whose entry
  was reclaimed by a peer cannot acknowledge it.
- Long jobs `heartbeat` (`XCLAIM … JUSTID` to oneself resets the idle time without counting a
  delivery) — owner-checked too, so a consumer that stalled past its heartbeats cannot take
  back entries a peer reclaimed meanwhile (it learns which it lost); peers `reclaim` entries
  idle past a few heartbeats; an entry delivered `max_deliveries` times is dead-lettered
  instead of retried forever.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TypeVar, cast

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.typing import KeyT, StreamIdT

from spex.proto import Message, ProtocolError, decode, encode
from spex.proto.codec import Envelope, envelope
from spex.proto.names import Partitions, dead_letter
from spex.proto.text import as_str
from spex.shared.runtime import bus_scripts
from spex.shared.runtime.availability import unavailable
from spex.shared.runtime.metrics import DEAD_LETTERS
from spex.shared.runtime.publisher import Publisher
from spex.shared.runtime.replies import GroupInfo, Pending, PendingSummary, Reread
from spex.shared.runtime.streams import parse_entry_id, read_streams

__all__ = [
    "DEAD_LETTERS_KEPT",
    "DEAD_LETTER_BYTES",
    "DEAD_LETTER_TTL_S",
    "TRIM_EVERY_S",
    "Bus",
    "Delivery",
    "dead_letter_fields",
]

T = TypeVar("T")
TRIM_EVERY_S = 10.0  # how often a consumer trims what its groups have finished with

# A dead-letter stream is bounded three ways, since a client's bad questions can fill it: an
# entry keeps the first DEAD_LETTER_BYTES of its message (`bytes`: how long it was) and the
# first REASON_CHARS of its reason; a stream keeps about DEAD_LETTERS_KEPT entries; and it
# expires DEAD_LETTER_TTL_S after its last entry.
DEAD_LETTER_BYTES = 4_096
REASON_CHARS = 1_000
DEAD_LETTERS_KEPT = 1_000
DEAD_LETTER_TTL_S = 7 * 86_400


def dead_letter_fields(reason: str, payload: bytes) -> dict[str, str | bytes | int]:
    """What a dead-letter entry keeps of a message: its reason and first bytes, bounded, and
    how long it was."""
    return {"reason": reason[:REASON_CHARS], "bytes": len(payload), "e": payload[:DEAD_LETTER_BYTES]}


@dataclass(frozen=True)
class Delivery:
    stream: str
    entry_id: str
    message: Message
    deliveries: int = 1


class Bus(Publisher):
    """One consumer's view of the streams, and a publisher. The Redis client is injected
    (constructors only assemble), so a service runs in-process or as its own OS process alike."""

    def __init__(
        self, client: aioredis.Redis, consumer: str, max_deliveries: int = 3, *, partitions: Partitions
    ) -> None:
        super().__init__(client, partitions=partitions)
        self.consumer = consumer
        self.max_deliveries = max_deliveries
        self._ack = client.register_script(bus_scripts.ACK_IF_OWNER)
        self._dead_letter = client.register_script(bus_scripts.DEAD_LETTER)
        self._heartbeat = client.register_script(bus_scripts.HEARTBEAT)
        self._own_pending_read: set[tuple[str, str]] = set()
        self._own_cursor: dict[tuple[str, str], str] = {}  # paging through own pending entries
        self._first_pass: set[tuple[str, str]] = set()  # own pending read once since we started
        self._reconnected_at = -1e9  # monotonic
        self._trimmed: dict[str, float] = {}  # stream -> when this consumer last trimmed it
        self._groups: set[tuple[str, str]] = set()
        self.dead_lettered = 0
        # Told of every message given up on (the service tells its query, so nothing hangs).
        self.on_dead: Callable[[Message | Envelope, str], Awaitable[None]] | None = None
        # Told when a group of ours has vanished, before it is made again (Redis may have lost
        # its data: the service checks, `data_loss`).
        self.on_regroup: Callable[[], Awaitable[object]] | None = None

    # ------------------------------------------------------------------ consuming
    async def ensure_group(self, stream: str, group: str) -> None:
        """Create the group (and the stream) unless it exists: safe to call on every start. With
        Redis unavailable (unreachable, or refusing writes) it is remembered, and created by the
        first call that finds it missing. A global stream's group is made on each of its parts."""
        for part in self.partitions.spread(stream):
            self._groups.add((part, group))
            try:
                await self._make_group(part, group)
            except (RedisConnectionError, RedisTimeoutError):
                pass
            except ResponseError as exc:
                if unavailable(exc) is None:
                    raise

    async def _make_group(self, part: str, group: str) -> None:
        try:
            await self.r.xgroup_create(part, group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def forget(self, stream: str) -> None:
        """Stop tracking `stream` (it was deleted): its groups are not re-created after a
        restart of Redis. A global stream: every part of it."""
        parts = set(self.partitions.spread(stream))
        self._groups = {(s, g) for s, g in self._groups if s not in parts}
        self._own_pending_read = {(s, g) for s, g in self._own_pending_read if s not in parts}
        self._first_pass = {(s, g) for s, g in self._first_pass if s not in parts}
        self._own_cursor = {k: v for k, v in self._own_cursor.items() if k[0] not in parts}
        self._trimmed.pop(stream, None)  # trims are timed by the name the caller gives

    def reconnected(self) -> None:
        """After a reconnect, re-read own pending entries first (a lost reply leaves them);
        for a few heartbeats, reclaim nothing (peers reconnect and heartbeat first — Redis
        counts its own downtime as idle time)."""
        self._own_pending_read.clear()
        self._own_cursor.clear()
        self._reconnected_at = time.monotonic()

    async def _regrouping(self, call: Callable[[], Awaitable[T]]) -> T:
        """`call()`, re-creating every group of this consumer once if Redis lost them."""
        try:
            return await call()
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
        if self.on_regroup is not None:
            await self.on_regroup()
        for stream, group in list(self._groups):  # Redis unavailable: raised (and waited out)
            await self._make_group(stream, group)
        self.reconnected()
        return await call()

    async def read(
        self,
        streams: Sequence[str],
        group: str,
        count: int,
        block_ms: int | None = 2000,
        held: Collection[str] = (),
    ) -> list[Delivery]:
        """Up to `count` deliveries: own pending entries first, then new ones. Undecodable
        entries are dead-lettered here and never returned. `held`: entry ids the caller is
        still working on — re-read after a reconnect, they are neither returned nor counted.
        `block_ms=None`: do not wait for new entries. A global stream is read on every part."""
        streams = [part for stream in streams for part in self.partitions.spread(stream)]
        out: list[Delivery] = []
        for stream in streams:
            if (stream, group) in self._own_pending_read:
                continue
            own: dict[KeyT, StreamIdT] = {stream: self._own_cursor.get((stream, group), "0")}
            replies = cast(
                list[tuple[bytes, list[Reread]]],
                await self._regrouping(
                    lambda: self.r.xreadgroup(group, self.consumer, own, count=count)  # noqa: B023 - awaited here
                ),
            )
            entries = replies[0][1] if replies else []
            # The first pass after a start re-reads what a crash left (each read a retry); a
            # later one follows a reconnect, which is no fault of the entries.
            retry = (stream, group) not in self._first_pass
            if len(entries) < count:
                self._own_pending_read.add((stream, group))
                self._first_pass.add((stream, group))
            else:  # a full page: the next read goes on after it
                self._own_cursor[(stream, group)] = as_str(entries[-1][0])
            out += await self._own_pending(stream, group, entries, held, retry)
            if out:
                return out
        if count <= 0:
            return out
        replies_new = await self._regrouping(
            lambda: read_streams(self.r, dict.fromkeys(streams, ">"), count, block_ms, (group, self.consumer))
        )
        for stream, new in replies_new:
            out += await self._decode_all(as_str(stream), group, new)
        return out

    async def _own_pending(
        self, stream: str, group: str, entries: list[Reread], held: Collection[str] = (), retry: bool = True
    ) -> list[Delivery]:
        """Own pending entries, re-read: each with its delivery count; those re-read more than
        `max_deliveries` times are dead-lettered (this consumer keeps dying on them). After a
        reconnect (`retry` False) every entry gets its count back, and those still `held` are
        not handed out again."""
        if not entries:
            return []
        ids = [as_str(entry_id) for entry_id, _ in entries]
        pending = await self._pending(stream, group, (ids[0], ids[-1]), len(ids), consumer=self.consumer)
        counts = {as_str(p["message_id"]): int(p["times_delivered"]) for p in pending}
        out: list[Delivery] = []
        for entry_id, fields in entries:
            deliveries = counts.get(as_str(entry_id), 1)
            if as_str(entry_id) in held or not retry:
                deliveries = max(1, deliveries - 1)
                await self.r.xclaim(
                    stream, group, self.consumer, 0, [entry_id], retrycount=deliveries, justid=True
                )
                if as_str(entry_id) in held:
                    continue
            if deliveries > self.max_deliveries:
                payload = (fields or {}).get(b"e", b"")
                await self._dead(
                    stream, group, as_str(entry_id), f"delivered {deliveries} times", deliveries, payload
                )
                continue
            out += await self._decode_all(stream, group, [(entry_id, fields)], deliveries)
        return out

    async def ack(self, delivery: Delivery, group: str) -> bool:
        """Acknowledge only if this consumer still owns the entry (False for a zombie)."""
        done = await self._ack(keys=[delivery.stream], args=[group, delivery.entry_id, self.consumer])
        return bool(done)

    async def heartbeat(self, stream: str, group: str, entry_ids: Sequence[str]) -> set[str]:
        """Reset the idle time of entries this consumer is still working on; returns those it
        no longer owns (a peer reclaimed them while this consumer was stalled)."""
        if not entry_ids:
            return set()
        lost: list[bytes] = await self._regrouping(
            lambda: self._heartbeat(keys=[stream], args=[group, self.consumer, *entry_ids])
        )
        return {as_str(entry_id) for entry_id in lost}

    async def reclaim(self, stream: str, group: str, min_idle_ms: int, count: int = 100) -> list[Delivery]:
        """Take over entries idle for `min_idle_ms` (their consumer stopped heartbeating);
        entries already delivered `max_deliveries` times go to the dead-letter stream. A
        global stream: on each part, up to `count` in all."""
        if time.monotonic() - self._reconnected_at < min_idle_ms / 1000:
            return []  # just reconnected: owners may not have heartbeated since Redis came back
        parts = self.partitions.spread(stream)
        if len(parts) > 1:
            out: list[Delivery] = []
            for part in parts:
                if len(out) < count:
                    out += await self.reclaim(part, group, min_idle_ms, count - len(out))
            return out
        pending = await self._regrouping(lambda: self._pending(stream, group, ("-", "+"), count, min_idle_ms))
        out = []
        for p in pending:
            entry_id, deliveries = as_str(p["message_id"]), int(p["times_delivered"])
            claimed = cast(
                list[Reread], await self.r.xclaim(stream, group, self.consumer, min_idle_ms, [entry_id])
            )
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

    async def trim_now_and_then(self, stream: str) -> int:
        """`trim` (each part of a global stream), at most every TRIM_EVERY_S."""
        now = time.monotonic()
        if now - self._trimmed.get(stream, -1e9) < TRIM_EVERY_S:
            return 0
        self._trimmed[stream] = now
        return sum([await self.trim(part) for part in self.partitions.spread(stream)])

    async def trim(self, stream: str) -> int:
        """Drop the entries every group of `stream` has delivered and had acknowledged
        (`XTRIM MINID` below the oldest one still pending or not yet delivered), so work
        streams stay bounded without ever losing work — never MAXLEN. Returns how many."""
        try:
            groups = cast(list[GroupInfo], await self.r.xinfo_groups(stream))
        except ResponseError:  # no such stream yet
            return 0
        floor: tuple[int, int] | None = None
        for g in groups:
            ms, seq = parse_entry_id(as_str(g["last-delivered-id"]))
            need = (ms, seq + 1)  # everything up to the last delivered entry, unless pending
            if int(g["pending"]):
                oldest = cast(PendingSummary, await self.r.xpending(stream, g["name"]))
                if oldest["min"] is not None:
                    need = min(need, parse_entry_id(as_str(oldest["min"])))
            floor = need if floor is None else min(floor, need)
        if floor is None or floor <= (0, 1):
            return 0
        return int(await self.r.xtrim(stream, minid=f"{floor[0]}-{floor[1]}", approximate=False))

    async def dead_letter(self, delivery: Delivery, group: str, reason: str) -> None:
        """Give up on an entry whose handler keeps failing: park it with the reason."""
        await self._dead(
            delivery.stream, group, delivery.entry_id, reason, delivery.deliveries, encode(delivery.message)
        )

    # ------------------------------------------ internals; first: XPENDING with a range, typed
    async def _pending(
        self, stream: str, group: str, span: tuple[str, str], count: int, idle: int | None = None,
        consumer: str | None = None,
    ) -> list[Pending]:  # fmt: skip
        return cast(list[Pending], await self.r.xpending_range(stream, group, *span, count, consumer, idle))

    async def _decode_all(
        self, stream: str, group: str, entries: Sequence[Reread], deliveries: int = 1
    ) -> list[Delivery]:
        out = []
        for entry_id, fields in entries:
            entry_id = as_str(entry_id)
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
        # Tell the query first (idempotent): if that fails, the entry stays pending and is
        # given up on again later — acknowledged first, its query would never hear of it.
        if self.on_dead is not None and payload:
            try:
                message: Message | Envelope | None = decode(stream, payload)
            except ProtocolError:  # e.g. a value outside its set: what its bytes name still tells
                message = envelope(payload)
            if message is not None:
                await self.on_dead(message, reason)
        self.dead_lettered += 1
        DEAD_LETTERS.labels(self.consumer, stream).inc()
        kept = dead_letter_fields(reason, payload)
        await self._dead_letter(
            keys=[stream, dead_letter(stream)],
            args=[group, entry_id, kept["reason"], deliveries, kept["e"], kept["bytes"], DEAD_LETTERS_KEPT,
                  DEAD_LETTER_TTL_S],
        )  # fmt: skip
