"""Admission by Redis's memory: the ingress refuses new questions (503, Retry-After, a reason that
names memory) before Redis, at its `maxmemory` with `noeviction`, would refuse the writes of
the questions it accepted.

Each submission reserves the bytes its search may hold in Redis (`reserve.request_bytes`, by its
algorithm, its target and its question's length) and its answer gives them back; the submit
script refuses a question whose reserve, with those of the searches in flight
(`ingress:reserved:total`), would pass the room Redis has left: `SPEX_MEMORY_HEADROOM` of its
`maxmemory`, less what it uses. The check and the reservation are one script, so concurrent
submissions, from one ingress or several, cannot together pass the room. A reserve counts on
top of what its search holds already (Redis cannot say which of its keys a search will still
write): conservative by what the searches in flight hold. A question whose reserve is more than
the whole of the headroom (`reserve.Room.total`) could never be admitted: it is refused for good
(HTTP 413), not told to retry.

Redis reports both figures in `INFO memory` (`used_memory`, `maxmemory`: 0 is no limit, and
then nothing is refused); they are read at most once every `READ_EVERY_S`. On a cluster every
primary is read and the fullest counts, its room shared among the partitions the most crowded
shard holds (a question's keys live on one shard, whichever it is). A Redis that will not say
(INFO denied by its ACL) admits everything, said once in the log.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, cast

import redis.asyncio as aioredis
import structlog
from redis.exceptions import NoPermissionError

from spex.proto import names
from spex.shared.runtime.reserve import Room
from spex.shared.runtime.streams import is_cluster

__all__ = ["READ_EVERY_S", "MemoryAdmission"]

READ_EVERY_S = 1.0  # how old Redis's memory figures may be


class MemoryAdmission:
    """The room Redis has for the searches in flight: `headroom` (a share) of its maxmemory,
    less what it uses."""

    def __init__(
        self, r: aioredis.Redis, headroom: float, clock: Callable[[], float] = time.monotonic, *,
        partitions: names.Partitions,
    ) -> None:  # fmt: skip
        self.r, self.headroom, self.clock, self.partitions = r, headroom, clock, partitions
        self._read_at = -1e9
        self._room: Room | None = None
        self._reading = asyncio.Lock()  # one read at a time; the requests behind it take its figure
        self._blind = False  # INFO denied: admit, said once

    async def room(self) -> Room | None:
        """The room the searches have (on one partition: its share of its shard's); None when
        nothing is refused (no maxmemory, or INFO denied)."""
        async with self._reading:
            if self.clock() - self._read_at >= READ_EVERY_S:
                used, most = await self._read()
                crowd = self._crowd()
                total = int(self.headroom * most)
                room = Room(max(0, total - used) // crowd, total // crowd)
                self._room, self._read_at = (room if most else None), self.clock()
        return self._room

    def _crowd(self) -> int:
        """The most partitions one shard holds (each partition's reserves are checked apart)."""
        parts = self.partitions.spread(names.INGRESS_RESERVED_TOTAL)
        if not is_cluster(self.r):
            return len(parts)
        cluster = cast(aioredis.RedisCluster, self.r)
        nodes = [cluster.get_node_from_key(part) for part in parts]
        shards = Counter(node.name if node is not None else "" for node in nodes)
        return max(shards.values())

    async def _read(self) -> tuple[int, int]:
        """(used_memory, maxmemory) of Redis, or of its fullest primary; (0, 0) if it will not say."""
        try:
            if not is_cluster(self.r):
                return _figures(cast(dict[str, object], await self.r.info("memory")))
            nodes = cast(aioredis.RedisCluster, self.r).PRIMARIES
            infos = cast(dict[str, object], await self.r.info("memory", target_nodes=nodes))  # type: ignore[call-arg]
        except NoPermissionError as exc:
            if not self._blind:
                self._blind = True
                structlog.get_logger().warning(
                    "memory_admission_off", error=str(exc), hint="allow INFO to the ingress's Redis user"
                )
            return 0, 0
        # One primary answers with its own figures; several, with a reply per node.
        per_node = [infos] if "used_memory" in infos else [i for i in infos.values() if isinstance(i, dict)]
        return max(map(_figures, per_node), key=lambda f: f[0] / f[1] if f[1] else 0.0, default=(0, 0))


def _figures(info: dict[str, Any]) -> tuple[int, int]:
    return int(info.get("used_memory", 0)), int(info.get("maxmemory", 0))
