"""Budget allocator (T2): one active instance under a lease turns the coordinators' per-query
stats into speculative shares (`shared.spec.budget.allocate`) and publishes them to each
query's inbox. Coordinators fall back to a static local share while none is published."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import redis.asyncio as aioredis

from proto import BudgetUpdateEvent, QueryStatsEvent, decode
from proto.streams import QUERY_STATS, query_inbox
from shared.bus import Bus
from shared.service import run_service
from shared.settings import Settings
from shared.sim.hardware import parse_profile, spare_concurrency
from shared.spec.budget import Demand, allocate, speculative_pool

__all__ = ["Allocator", "main"]

LEASE = "allocator:lease"
MAX_STEP_TOKENS = 256  # the longest step a speculative job may generate
STALE_S = 2.0  # stats older than this belong to a finished query


class Allocator:
    def __init__(self, client: aioredis.Redis, settings: Settings) -> None:
        self.bus = Bus(client, settings.consumer)
        self.r = client
        self.settings = settings
        profile = parse_profile(settings.profile)
        self.profile = profile
        self.weight_bytes = profile.model.resident_bytes
        self.kv_bytes = profile.model.kv_bytes_per_token
        # k_total: the engine's roofline knee at a typical node context (+10% step time).
        self.k_total = 1 + spare_concurrency(profile, 1, 512, 512, 0.10)
        self.latest: dict[str, tuple[float, QueryStatsEvent]] = {}
        self.published: dict[str, int] = {}  # last share sent per query
        self.rounds = 0

    def summary(self) -> dict[str, Any]:
        return {"rounds": self.rounds, "k_total": self.k_total}

    async def run(self, stop: asyncio.Event) -> None:
        last = "$"
        while not stop.is_set():
            lease_ms = int(self.settings.lease_s * 1000)
            mine = await self.r.set(LEASE, self.settings.consumer, nx=True, px=lease_ms)
            if not mine and (await self.r.get(LEASE) or b"").decode() != self.settings.consumer:
                await asyncio.sleep(self.settings.lease_s / 3)  # another allocator is active
                continue
            await self.r.pexpire(LEASE, lease_ms)
            replies: Any = await self.r.xread({QUERY_STATS: last}, count=1000, block=self.settings.block_ms)
            now = time.monotonic()
            for _, entries in replies or []:
                for entry_id, fields in entries:
                    last = entry_id
                    try:
                        msg = decode(QUERY_STATS, fields[b"e"])
                    except ValueError:
                        continue  # telemetry: a bad sample is dropped, not dead-lettered
                    if isinstance(msg, QueryStatsEvent):
                        self.latest[msg.query_id] = (now, msg)
            self.latest = {q: v for q, v in self.latest.items() if now - v[0] < STALE_S}
            self.published = {q: v for q, v in self.published.items() if q in self.latest}
            await self._publish()

    async def _pool(self, stats: list[QueryStatsEvent]) -> int:
        """Σ over live generators of what their roofline and KV leave for speculation (the
        same rule as the virtual-time bench); a static k_total while none reports its load."""
        spec_ctx = sum(m.prefix_tokens for m in stats) / len(stats)
        pool, workers = 0, 0
        async for key in self.r.scan_iter(match="worker:*:load"):
            raw: Any = await self.r.get(key)
            if raw is None:
                continue
            load = json.loads(raw)
            workers += 1
            pool += speculative_pool(
                self.profile, load["primary"], load["primary_ctx"], spec_ctx, self.settings.tpot_slack,
                load["kv_held"], load["spec"], MAX_STEP_TOKENS,
            )  # fmt: skip
        if not workers:
            return max(0, self.k_total - sum(m.active_jobs for m in stats))
        return pool

    async def _publish(self) -> None:
        if not self.latest:
            return
        stats = [m for _, m in self.latest.values()]
        pool = await self._pool(stats)
        demands = [
            Demand(m.query_id, m.candidates, m.hit_rate, m.prefix_tokens * self.kv_bytes) for m in stats
        ]
        shares = allocate(demands, pool, self.weight_bytes)
        self.rounds += 1
        for m in stats:
            if self.published.get(m.query_id) == shares[m.query_id]:
                continue  # unchanged: nothing to send
            self.published[m.query_id] = shares[m.query_id]
            event = BudgetUpdateEvent(
                msg_id=f"budget/{m.query_id}/{self.rounds}/{self.settings.consumer}",
                query_id=m.query_id,
                share=shares[m.query_id],
                k_total=self.k_total,
            )
            await self.bus.publish(query_inbox(m.query_id), event)


def main() -> int:
    return run_service("allocator", Allocator)


if __name__ == "__main__":
    raise SystemExit(main())
