"""The Redis replies the runtime parses, as redis-py hands them over from a client that keeps
bytes (SPEX's clients: `connect`): a stream's entries, a stream read, the pending entries of a
group, a group's and a stream's description. redis-py types its replies loosely; a reader
names the shape it reads here, where it awaits the reply."""

from __future__ import annotations

from typing import TypedDict

__all__ = ["Entry", "GroupInfo", "Pending", "PendingSummary", "Reread", "Scored", "StreamInfo", "StreamRead"]

# One entry of a stream (XRANGE, XREAD, a group's new entries): its id and its fields.
Entry = tuple[bytes | str, dict[bytes, bytes]]
# An entry of a group's pending list, read again or claimed (XREADGROUP from an id, XCLAIM):
# its fields are None once the entry was deleted or trimmed while pending.
Reread = tuple[bytes | str, dict[bytes, bytes] | None]
# A read of several streams (XREAD, XREADGROUP): each stream's name and its entries.
StreamRead = list[tuple[bytes | str, list[Entry]]]
# A sorted set's member with its score (ZRANGE ... WITHSCORES).
Scored = tuple[bytes, float]


class Pending(TypedDict):
    """One pending entry of a group (XPENDING with a range)."""

    message_id: bytes
    consumer: bytes
    time_since_delivered: int
    times_delivered: int


class PendingSummary(TypedDict):
    """A group's pending entries in sum (XPENDING without a range): None ids when none."""

    pending: int
    min: bytes | None
    max: bytes | None
    consumers: list[dict[str, bytes | int]]


# A consumer group of a stream (XINFO GROUPS); Redis's field names hold hyphens.
GroupInfo = TypedDict(
    "GroupInfo", {"name": bytes, "consumers": int, "pending": int, "last-delivered-id": bytes}
)
# A stream (XINFO STREAM): the fields the runtime reads.
StreamInfo = TypedDict("StreamInfo", {"length": int, "last-generated-id": bytes})
