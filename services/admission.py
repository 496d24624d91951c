"""Admission by Redis's memory: the ingress refuses new questions (503, Retry-After, a reason that
names memory) once Redis's memory, with what the searches in flight may still write, reaches
`SPEX_MEMORY_HEADROOM` of its `maxmemory`. A Redis near full refuses questions at the door
instead of accepting them and then failing their writes (a Redis at `maxmemory` with
`noeviction` refuses every write).

Redis reports both figures in `INFO memory` (`used_memory`, `maxmemory`: 0 is no limit, and
then nothing is refused). What the searches in flight may still write is their reserve: each
question's submission reserves the bytes its search may hold (`reserve.search_bytes`, by its
algorithm and target), and its answer gives them back (`ingress:reserved:total`). A reserve
counts on top of what the search holds already (Redis cannot say which of its keys a search
will still write), so the questions accepted cannot outgrow the room they were admitted into:
conservative by what they hold. The figures are read at most once every `READ_EVERY_S`; what
the questions admitted meanwhile reserved counts too, so a burst is bounded as well. On a
cluster every primary is read and the fullest counts, against the reserve spread over the
primaries (a question's keys live on one shard, whichever it is). A Redis that will not say
(INFO denied by its ACL) admits everything, said once in the log.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

import redis.asyncio as aioredis
import structlog
from redis.exceptions import NoPermissionError

from spex.shared.runtime.streams import is_cluster

__all__ = ["READ_EVERY_S", "RETRY_AFTER_S", "MemoryAdmission"]

READ_EVERY_S = 1.0  # how old Redis's memory figures may be
RETRY_AFTER_S = 10  # what a refused client is told to wait: memory frees as answers expire


class MemoryAdmission:
    """Whether Redis has room for new questions: what it uses and what the searches in flight
    have reserved (`reserved()`, as of the last read, and `admitted()`, the bytes reserved here
    since), under `headroom` (a share) of its maxmemory."""

    def __init__(
        self,
        r: aioredis.Redis,
        headroom: float,
        reserved: Callable[[], Awaitable[int]],
        admitted: Callable[[], int],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.r, self.headroom = r, headroom
        self.reserved, self.admitted, self.clock = reserved, admitted, clock
        self._read_at = -1e9
        self.used, self.most, self.held = 0, 0, 0  # bytes, as last read (most 0: no maxmemory)
        self._blind = False  # INFO denied: admit, said once

    async def refusal(self) -> str | None:
        """None while Redis has room; else why a new question is refused."""
        if self.clock() - self._read_at >= READ_EVERY_S:
            self._read_at = self.clock()  # the requests meanwhile take the last figures
            self.used, self.most, shards = await self._read()
            self.held = await self.reserved() // shards if self.most else 0
        held = self.held + self.admitted()
        if not self.most or self.used + held < self.headroom * self.most:
            return None
        mib = 2**20
        return (
            f"redis memory: {self.used / mib:,.1f} MiB used and {held / mib:,.1f} MiB held for the searches "
            f"in flight, of its maxmemory {self.most / mib:,.1f} MiB: past the {self.headroom:.0%} new "
            "questions may fill (SPEX_MEMORY_HEADROOM); retry later"
        )

    async def _read(self) -> tuple[int, int, int]:
        """(used_memory, maxmemory) of Redis, or of its fullest primary, and how many primaries;
        (0, 0, 1) if it will not say."""
        try:
            if not is_cluster(self.r):
                return (*_figures(cast(dict[str, Any], await self.r.info("memory"))), 1)
            nodes = cast(aioredis.RedisCluster, self.r).PRIMARIES
            infos = cast(dict[str, Any], await self.r.info("memory", target_nodes=nodes))  # type: ignore[call-arg]
        except NoPermissionError as exc:
            if not self._blind:
                self._blind = True
                structlog.get_logger().warning(
                    "memory_admission_off", error=str(exc), hint="allow INFO to the ingress's Redis user"
                )
            return 0, 0, 1
        # One primary answers with its own figures; several, with a reply per node.
        per_node = [infos] if "used_memory" in infos else [i for i in infos.values() if isinstance(i, dict)]
        figures = [_figures(i) for i in per_node]
        fullest = max(figures, key=lambda f: f[0] / f[1] if f[1] else 0.0, default=(0, 0))
        return (*fullest, max(1, len(figures)))


def _figures(info: dict[str, Any]) -> tuple[int, int]:
    return int(info.get("used_memory", 0)), int(info.get("maxmemory", 0))
