"""The registry of generator workers: who registered (`GEN_WORKERS`, a zset of each worker's
last report, by Redis's clock) and what each one last reported (`worker_load`: its
WorkerLoadEvent, whose TTL is its liveness). Workers write it; the coordinators' routers, the
allocator, the ingress's overview and the benchmarks read it — all through a `WorkerRegistry`.
Its keys live in partition 0 (`Partitions.home`), so one script writes a worker's both and one
MGET reads every load.

A worker stays registered after it dies (its load key gone) while its stream may hold jobs, so
peers find the stream and drain it; one dead FORGET_S is then forgotten (`forget`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import redis.asyncio as aioredis

from spex.proto import ProtocolError, WorkerLoadEvent, decode, encode
from spex.proto.names import GEN_WORKERS, Partitions, worker_load
from spex.proto.text import as_str

__all__ = ["FORGET_S", "WorkerRegistry"]

FORGET_S = 60.0  # a worker dead this long, its stream drained, leaves the registry

# KEYS: the worker's load key, the registry. ARGV: its report, TTL ms, the worker.
# The report and the worker's entry, stamped with Redis's clock (no worker's clock skew matters).
_REPORT = """
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local t = redis.call('TIME')
redis.call('ZADD', KEYS[2], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), ARGV[3])
"""
# KEYS: the registry, the worker's load key. ARGV: the worker, dead ms.
# Forget a dead worker: still dead (no load key), last seen ARGV[2] ago by Redis's clock.
# Checked and done at once, so a worker that comes back meanwhile keeps its entry.
_FORGET = """
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
local seen = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not seen then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now - tonumber(seen) < tonumber(ARGV[2]) then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
return 1
"""

# Told of a load report that does not decode: the worker, the reason.
OnMalformed = Callable[[str, str], None]


class WorkerRegistry:
    """The generator workers' registry on one Redis (the client is injected)."""

    def __init__(self, r: aioredis.Redis, partitions: Partitions) -> None:
        self.r, self.partitions = r, partitions
        self._report = r.register_script(_REPORT)
        self._forget = r.register_script(_FORGET)
        self._workers = partitions.home(GEN_WORKERS)

    def _load_key(self, worker: str) -> str:
        return self.partitions.home(worker_load(worker))

    # ------------------------------------------------------------------ a worker's
    async def report(self, event: WorkerLoadEvent, ttl_ms: int) -> None:
        """Register `event.worker` (again) and store its load, live for `ttl_ms`."""
        keys = [self._load_key(event.worker), self._workers]
        await self._report(keys=keys, args=[encode(event), ttl_ms, event.worker])

    async def forget(self, worker: str, dead_s: float = FORGET_S) -> bool:
        """Forget `worker` if it is still dead and was last seen `dead_s` ago (Redis's clock):
        whether it was forgotten."""
        keys = [self._workers, self._load_key(worker)]
        return bool(await self._forget(keys=keys, args=[worker, int(dead_s * 1000)]))

    # ------------------------------------------------------------------ readers'
    async def reports(self) -> list[tuple[str, bytes | None]]:
        """Every registered worker, the stalest report first, with its load report (None: it
        died, or never reported)."""
        members = cast(list[bytes], await self.r.zrange(self._workers, 0, -1))
        workers = [as_str(m) for m in members]
        raws = (
            cast(list[bytes | None], await self.r.mget([self._load_key(w) for w in workers]))
            if workers
            else []
        )
        return list(zip(workers, raws, strict=True))

    async def dead(self, besides: str = "") -> list[str]:
        """The registered workers whose load key expired (but `besides`): their streams may
        still hold jobs."""
        return [w for w, raw in await self.reports() if raw is None and w != besides]

    async def live(self, on_malformed: OnMalformed | None = None) -> dict[str, WorkerLoadEvent]:
        """Each live worker's last load, in the registry's order (a report that does not decode
        counts the worker as not live, and is told to `on_malformed`)."""
        loads: dict[str, WorkerLoadEvent] = {}
        for worker, raw in await self.reports():
            if raw is None:
                continue
            try:
                event = decode(worker_load(worker), raw)
            except ProtocolError as exc:
                if on_malformed is not None:
                    on_malformed(worker, str(exc))
                continue
            if isinstance(event, WorkerLoadEvent):
                loads[worker] = event
        return loads
