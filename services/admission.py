"""Admission by Redis's memory: the ingress refuses new questions (503, Retry-After, a reason that
names memory) once Redis's memory, counting what the questions in flight will still write,
reaches `SPEX_MEMORY_HEADROOM` of its `maxmemory`. A Redis near full refuses questions at the
door instead of accepting them and then failing their writes (a Redis at `maxmemory` with
`noeviction` refuses every write).

Redis reports both figures in `INFO memory` (`used_memory`, `maxmemory`: 0 is no limit, and
then nothing is refused). Each question in flight is counted at what its search may grow to
(`SPEX_MEMORY_PER_QUESTION`; by default the largest search the limits allow, from the measured
bytes a unit of target, `docs/capacity.md`) on top of what it holds already (Redis cannot say
which keys a search will still write), so the questions accepted cannot outgrow the room they
were admitted into: conservative by up to what they hold. The figures are read at most once
every `READ_EVERY_S`: the requests of that second share them, each one admitted meanwhile
counting one more in flight. On a cluster every primary is read and the fullest counts (a
question's keys live on one shard, whichever it is). A Redis that will not say (INFO denied by
its ACL) admits everything, said once in the log.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

import redis.asyncio as aioredis
import structlog
from redis.exceptions import NoPermissionError

from spex.shared.runtime.settings import Settings
from spex.shared.runtime.streams import is_cluster

__all__ = ["BYTES_PER_TARGET", "READ_EVERY_S", "RETRY_AFTER_S", "MemoryAdmission", "per_question"]

READ_EVERY_S = 1.0  # how old Redis's memory figures may be
RETRY_AFTER_S = 10  # what a refused client is told to wait: memory frees as answers expire
# What a search holds in Redis while it runs, a unit of its target, by algorithm (docs/sizing.json:
# ReBASE-256 2.84 MB, rStar-10 220 KB, ETS-16 128 KB; ReST-MCTS, not measured, as rStar's).
BYTES_PER_TARGET = {"rebase": 11_500, "rstar": 23_000, "ets": 8_500, "rest": 23_000}


def per_question(settings: Settings) -> int:
    """Bytes a question in flight is counted to need (`SPEX_MEMORY_PER_QUESTION`; by default
    the largest search the limits allow: rStar at SPEX_MAX_TARGET 256, 5.9 MB)."""
    targets = settings.limits.max_target
    return settings.memory_per_question or max(BYTES_PER_TARGET[a] * n for a, n in targets.items())


class MemoryAdmission:
    """Whether Redis has room for new questions: what it uses, and `reserve` bytes for each of
    the questions `in_flight` counts, under `headroom` (a share) of its maxmemory."""

    def __init__(
        self,
        r: aioredis.Redis,
        headroom: float,
        reserve: int,
        in_flight: Callable[[], Awaitable[int]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.r, self.headroom, self.reserve, self.in_flight = r, headroom, reserve, in_flight
        self.clock = clock
        self._read_at = -1e9
        self.used, self.most, self.flying = 0, 0, 0  # as last read (most 0: no maxmemory)
        self._blind = False  # INFO denied: admit, said once

    async def refusal(self) -> str | None:
        """None while Redis has room; else why a new question is refused."""
        if self.clock() - self._read_at >= READ_EVERY_S:
            self._read_at = self.clock()  # the requests meanwhile take the last figures
            self.used, self.most = await self._read()
            self.flying = await self.in_flight() if self.most else 0
        needed = self.used + self.flying * self.reserve
        if not self.most or needed < self.headroom * self.most:
            self.flying += 1  # admitted: counted until the next read, so a burst is bounded too
            return None
        mib = 2**20
        return (
            f"redis memory: {self.used / mib:,.1f} MiB used and {self.flying * self.reserve / mib:,.1f} MiB "
            f"held for the {self.flying:,} questions in flight, of its maxmemory {self.most / mib:,.1f} MiB: "
            f"past the {self.headroom:.0%} new questions may fill (SPEX_MEMORY_HEADROOM); retry later"
        )

    async def _read(self) -> tuple[int, int]:
        """(used_memory, maxmemory) of Redis, or of its fullest primary; (0, 0) if it will not say."""
        try:
            if not is_cluster(self.r):
                return _figures(cast(dict[str, Any], await self.r.info("memory")))
            nodes = cast(aioredis.RedisCluster, self.r).PRIMARIES
            infos = cast(dict[str, Any], await self.r.info("memory", target_nodes=nodes))  # type: ignore[call-arg]
        except NoPermissionError as exc:
            if not self._blind:
                self._blind = True
                structlog.get_logger().warning(
                    "memory_admission_off", error=str(exc), hint="allow INFO to the ingress's Redis user"
                )
            return 0, 0
        # One primary answers with its own figures; several, with a reply per node.
        per_node = [infos] if "used_memory" in infos else list(infos.values())
        figures = [_figures(i) for i in per_node if isinstance(i, dict)]
        return max(figures, key=lambda f: f[0] / f[1] if f[1] else 0.0, default=(0, 0))


def _figures(info: dict[str, Any]) -> tuple[int, int]:
    return int(info.get("used_memory", 0)), int(info.get("maxmemory", 0))
