"""The coordinator's view of the generator workers: who is live and how loaded (their load
keys, refreshed every REFRESH_S), and which stream each job goes to (`spex.shared.core.routing`:
the query's worker on the hash ring, spilling when it is saturated)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import redis.asyncio as aioredis

from spex.proto import ProtocolError, WorkerLoadEvent, decode
from spex.proto.names import GEN_WORKERS, gen_jobs, home, worker_jobs, worker_load
from spex.shared.core.routing import SHARED, Load, Ring, route

__all__ = ["REFRESH_S", "Router"]

REFRESH_S = 0.1


class Router:
    def __init__(self, r: aioredis.Redis, pool: str, affinity: bool) -> None:
        self.r = r
        self.pool = pool
        self.affinity = affinity
        self.ring = Ring()
        self.loads: dict[str, Load] = {}
        self.placed: dict[str, str] = {}  # query id -> the worker its jobs go to
        self.spilled = 0  # jobs that did not go to their query's worker
        self.rebalances = 0

    async def refresh(self, queries: Collection[str] = ()) -> None:
        """Re-read the live workers and their loads; the ring follows who is live. Placements
        of queries no longer in `queries` (ours) are forgotten."""
        if not self.affinity:
            return
        self.placed = {q: w for q, w in self.placed.items() if q in queries}
        members: Any = await self.r.zrange(home(GEN_WORKERS), 0, -1)  # live: those whose load key exists
        names = [m.decode() if isinstance(m, bytes) else str(m) for m in members]
        raws: Any = await self.r.mget([home(worker_load(n)) for n in names]) if names else []
        loads: dict[str, Load] = {}
        for name, raw in zip(names, raws, strict=True):
            if raw is None:  # its key expired: dead (or not yet reporting)
                continue
            try:
                event = decode(worker_load(name), raw)
            except ProtocolError:
                continue  # a malformed report: treat the worker as not live
            if isinstance(event, WorkerLoadEvent):
                loads[name] = Load(event.jobs, event.slots, event.queries)
        if self.ring.update(loads):
            self.rebalances += 1
        self.loads = loads

    def stream(self, query_id: str) -> str:
        """Where the next job of `query_id` goes; counted against that worker until its next
        load report, so one burst does not overfill it."""
        if not self.affinity:
            return gen_jobs(self.pool)
        current = self.placed.get(query_id)
        if current is not None and current not in self.loads:  # its worker died: place it again
            current = None
            self.rebalances += 1
        worker = route(query_id, self.ring, self.loads, current=current)
        if worker == SHARED:
            self.spilled += 1
            return gen_jobs(self.pool)
        load = self.loads[worker]
        if current is None:  # placed: it counts as one more query there until the next report
            self.placed[query_id] = worker
            load = Load(load.jobs, load.slots, load.queries + 1)
        elif worker != current:
            self.spilled += 1
        self.loads[worker] = Load(load.jobs + 1, load.slots, load.queries)
        return worker_jobs(self.pool, worker)

    def owner(self, query_id: str) -> str:
        """The worker a query's jobs go to while it has room ("" without affinity)."""
        return self.placed.get(query_id, "") if self.affinity else ""
