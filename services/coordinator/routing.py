"""The coordinator's view of the generator workers: who is live and how loaded (their load
keys, refreshed every REFRESH_S), and which stream each job goes to (`spex.shared.core.routing`:
the query's worker on the hash ring, spilling when it is saturated)."""

from __future__ import annotations

from collections.abc import Collection

import redis.asyncio as aioredis

from spex.proto.names import Partitions, gen_jobs, worker_jobs
from spex.shared.core.routing import SHARED, Load, Ring, route
from spex.shared.runtime.workers import WorkerRegistry

__all__ = ["REFRESH_S", "Router"]

REFRESH_S = 0.1


class Router:
    def __init__(self, r: aioredis.Redis, partitions: Partitions, pool: str, affinity: bool) -> None:
        self.registry = WorkerRegistry(r, partitions)
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
        live = await self.registry.live()  # live: those whose load key exists (and decodes)
        loads = {name: Load(event.jobs, event.slots, event.queries) for name, event in live.items()}
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
