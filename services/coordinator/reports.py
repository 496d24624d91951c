"""What the coordinator's store reports: whether a question is the request stored under its id,
what an adoption found, what a fenced write found, and inbox entries as read."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

__all__ = ["Adoption", "Entries", "Fence", "Found", "Submitted"]

# What XRANGE and XREAD give for one stream: (entry id, fields) in order.
Entries = list[tuple[bytes | str, dict[bytes, bytes]]]


class Submitted(enum.Enum):
    """Whether a question on the ingress stream is the request stored under its id."""

    THIS = "this"  # stored as the ingress queued it
    MISSING = "missing"  # nothing is stored under its id
    UNREADABLE = "unreadable"  # what is stored cannot be decoded (a newer version's, say)
    OTHER = "other"  # another request holds its id


class Fence(enum.IntEnum):
    """What a fenced write (a checkpoint, an answer) found: what the scripts return."""

    WRITTEN = 1  # the lease is ours at our epoch: written
    NOT_OURS = 0  # another coordinator holds the query now
    GONE = -1  # Redis has no epoch for it: it lost the query's state (nobody holds it)


class Found(enum.Enum):
    """What an adoption found (`scripts.ADOPT`)."""

    TAKEN = "taken"  # the lease is ours now: the inbox is read for the replay
    ANSWERED = "answered"  # nothing to adopt
    MISSING = "missing"  # no request is stored under the id (where one was asked for)
    HELD = "held"  # another holds the lease (or a process before this one, of the same name)


@dataclass(frozen=True)
class Adoption:
    found: Found
    stored: bytes | None = None  # the request stored under the id, where it was asked for
    epoch: int = 0  # the lease's fencing epoch, if taken
    inbox: Entries = field(default_factory=list)  # every inbox entry, in order, if taken
