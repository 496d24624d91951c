"""Redis losing its data (a restart without persistence, a FLUSHALL, a failover that lost the
last writes) as one event every service sees: a marker in Redis, one a partition.

Noticing it. `DATA_KEPT` holds the data's epoch: a token the first submission leaves, and
whoever marks a loss anew. A process that saw a token and finds none knows Redis lost its data;
so does a coordinator whose held queries lost their epochs, and a worker whose consumer group
vanished while the token it saw is gone. Whoever notices first marks the loss (`MARK`):
`DATA_LOST` records when it began (Redis's clock, ms) and who noticed it, and `DATA_KEPT` takes
the new epoch (`lost:<began ms>`), so a process that finds another token knows the loss is
marked already; an ingress started after the loss reads the marker like any other.

While it stands, what a coordinator may be storing again is not taken for new or unknown: a
client key not found is refused (HTTP 503, Retry-After) instead of starting a second search,
and a query id not found reads as in flight (202), not unknown (404).

It ends when every coordinator seen alive in the rounds before the loss has stored again what it
held (`DATA_LOST_AWAITED`: the first coordinator to notice lists them, from the members it read
last, `COORD_MEMBERS`; each takes itself off once its questions, their client keys with them,
are stored again: `DONE`), or at the latest after SPEX_DATA_LOSS_WAIT_S. A coordinator stalled
past that finds its questions' client keys taken by questions posted again meanwhile: it answers
its own as superseded by them, and searches nothing twice (`services.coordinator.store`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import redis.asyncio as aioredis

from spex.proto import names
from spex.proto.text import as_str

__all__ = ["DONE", "MARK", "MARK_FUNCTION", "DataLoss", "Standing"]

# The Lua function both `MARK` and the ingress's submit script (`client_scripts.SUBMIT`) call:
# mark the loss unless it is marked (-> when it began), list `me` among those it waits for, and
# on the first coordinator's mark, the members it names.
MARK_FUNCTION = """
local function mark_lost(marker, awaited, kept, by, wait_ms, me, members)
  local began = redis.call('HGET', marker, 'began_ms')
  if not began then
    local t = redis.call('TIME')
    began = tostring(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
    redis.call('HSET', marker, 'began_ms', began, 'by', by)
    redis.call('PEXPIRE', marker, wait_ms)
    redis.call('SET', kept, 'lost:' .. began)
  end
  if me ~= '' then
    redis.call('SADD', awaited, me)
    if redis.call('HSETNX', marker, 'listed', '1') == 1 then
      for _, member in ipairs(members) do redis.call('SADD', awaited, member) end
    end
    redis.call('PEXPIRE', awaited, math.max(1, redis.call('PTTL', marker)))
  end
  return began
end
"""

# KEYS: marker, awaited, kept. ARGV: by, wait ms, me ('' for none), members... -> began ms
MARK = (
    MARK_FUNCTION
    + """
local members = {}
for i = 4, #ARGV do members[#members + 1] = ARGV[i] end
return mark_lost(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], members)
"""
)

# `me` has stored again what it held: off the list; the last one off ends the loss.
# KEYS: marker, awaited. ARGV: me. -> 1 if the loss ended, else 0
DONE = """
if redis.call('SREM', KEYS[2], ARGV[1]) == 1 and redis.call('SCARD', KEYS[2]) == 0 then
  redis.call('DEL', KEYS[1], KEYS[2])
  return 1
end
return 0
"""

MEMBERS_FORGOTTEN_MS = 600_000  # a coordinator not seen for ten minutes leaves the members


@dataclass
class Standing:
    """What a coordinator's round read of the loss markers."""

    members: list[str] = field(default_factory=list)  # coordinators seen alive lately (itself too)
    awaited: list[str] = field(default_factory=list)  # partitions whose loss waits for this one


class DataLoss:
    """Marks and ends losses for process `by`; a mark stands at most `wait_s`."""

    def __init__(self, r: aioredis.Redis, by: str, wait_s: float, *, partitions: names.Partitions) -> None:
        self.r, self.by, self.wait_ms = r, by, int(wait_s * 1000)
        self.partitions = partitions
        self._mark = r.register_script(MARK)
        self._done = r.register_script(DONE)
        self._seen: dict[str, bytes] = {}  # a DATA_KEPT part -> the token read there last

    @staticmethod
    def keys(part: str) -> list[str]:
        """The marker, its awaited set and the epoch token of `DATA_KEPT`'s part `part`."""
        tag = part.removeprefix(names.DATA_KEPT)  # the partition's tag, if any
        return [names.DATA_LOST + tag, names.DATA_LOST_AWAITED + tag, part]

    async def mark(self, part: str, me: str = "", members: Sequence[str] = ()) -> int:
        """Mark a loss on `part` (a `DATA_KEPT` part) unless it is marked; list `me` among the
        coordinators it waits for (and `members`, if it is the first to list). When it began."""
        args: list[Any] = [self.by, self.wait_ms, me, *members]
        return int(await self._mark(keys=self.keys(part), args=args))

    async def done(self, me: str, part: str) -> bool:
        """`me` stored again what it held on `part`: off its list; True if that ended the loss."""
        marker, awaited, _ = self.keys(part)
        return bool(await self._done(keys=[marker, awaited], args=[me]))

    @property
    def watching(self) -> bool:
        """An epoch token was read: a loss from now on is noticed by `check`."""
        return bool(self._seen)

    async def check(self) -> bool:
        """Read the epoch tokens; a loss nobody marked (a token seen, none there now) is marked.
        True if one was. The first read of a part only remembers its token."""
        parts = self.partitions.spread(names.DATA_KEPT)
        async with self.r.pipeline(transaction=False) as pipe:  # each part in its own slot
            for part in parts:
                pipe.get(part)
            tokens = cast(list[bytes | None], await pipe.execute())
        noticed = False
        for part, token in zip(parts, tokens, strict=True):
            if token is None and part in self._seen:
                await self.mark(part)
                noticed = True
            elif token is not None:
                self._seen[part] = token
        return noticed

    async def round(self, me: str, window_s: float) -> Standing:
        """A coordinator's round, one round trip: itself among the members (stamped with its
        clock: a window of several leases is wide beside the skew of clocks a fleet keeps), the
        members seen within `window_s`, and the partitions whose marker waits for it."""
        home, now_ms = self.partitions.home(names.COORD_MEMBERS), int(time.time() * 1000)
        parts = self.partitions.spread(names.DATA_KEPT)
        async with self.r.pipeline(transaction=False) as pipe:
            pipe.zadd(home, {me: now_ms})
            pipe.zremrangebyscore(home, 0, now_ms - MEMBERS_FORGOTTEN_MS)
            pipe.zrangebyscore(home, now_ms - int(window_s * 1000), "+inf")
            for part in parts:
                pipe.sismember(self.keys(part)[1], me)
            _, _, members, *waiting = await pipe.execute()
        return Standing(
            [as_str(m) for m in members],
            [part for part, mine in zip(parts, waiting, strict=True) if mine],
        )
