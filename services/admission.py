"""Admission by Redis's memory: the ingress refuses new questions (503, Retry-After, a reason
that names memory) once Redis uses `SPEX_MEMORY_HEADROOM` of its `maxmemory`, so that a Redis
near full refuses questions at the door instead of accepting them and then failing their
writes (a Redis at `maxmemory` with `noeviction` refuses every write).

Redis reports both figures in `INFO memory` (`used_memory`, `maxmemory`: 0 is no limit, and
then nothing is refused). They are read at most once every `READ_EVERY_S`: the requests of
that second share one round trip. On a cluster, every primary is read and the fullest counts
(a question's keys live on one shard, whichever it is).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

import redis.asyncio as aioredis

from spex.shared.runtime.streams import is_cluster

__all__ = ["READ_EVERY_S", "RETRY_AFTER_S", "MemoryAdmission"]

READ_EVERY_S = 1.0  # how old Redis's memory figures may be
RETRY_AFTER_S = 10  # what a refused client is told to wait: memory frees as answers expire


class MemoryAdmission:
    """Whether Redis has room for new questions: under `headroom` (a share) of its maxmemory."""

    def __init__(
        self, r: aioredis.Redis, headroom: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.r, self.headroom, self.clock = r, headroom, clock
        self._read_at = -1e9
        self.used, self.most = 0, 0  # bytes, as last read (most 0: no maxmemory)

    async def refusal(self) -> str | None:
        """None while Redis has room; else why a new question is refused."""
        if self.clock() - self._read_at >= READ_EVERY_S:
            self._read_at = self.clock()  # the requests meanwhile take the last figures
            self.used, self.most = await self._read()
        if not self.most or self.used < self.headroom * self.most:
            return None
        return (
            f"redis memory: {self.used / 2**20:,.1f} MiB used of its maxmemory {self.most / 2**20:,.1f} MiB, "
            f"past the {self.headroom:.0%} new questions may fill (SPEX_MEMORY_HEADROOM); retry later"
        )

    async def _read(self) -> tuple[int, int]:
        """(used_memory, maxmemory) of Redis, or of its fullest primary."""
        if not is_cluster(self.r):
            info = cast(dict[str, Any], await self.r.info("memory"))
            return int(info.get("used_memory", 0)), int(info.get("maxmemory", 0))
        nodes = cast(aioredis.RedisCluster, self.r).PRIMARIES
        infos = cast(dict[str, Any], await self.r.info("memory", target_nodes=nodes))  # type: ignore[call-arg]
        figures = [(int(i.get("used_memory", 0)), int(i.get("maxmemory", 0))) for i in infos.values()]
        return max(figures, key=lambda f: f[0] / f[1] if f[1] else 0.0, default=(0, 0))
