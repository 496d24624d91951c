"""Budget allocator (T2): one active instance under a lease turns the coordinators' per-query
stats into speculative shares (`spex.shared.core.spec.budget.allocate`) and publishes them to
each query's inbox. Coordinators fall back to a static local share while none is published.

Each worker's pool is its roofline's spare capacity at a slack that a `TpotGovernor` steers,
per worker, from the step times its generator reports, so speculation grows primary TPOT by
SPEX_TPOT_TARGET (SPEX_TPOT_FIXED=1: SPEX_TPOT_SLACK as it is)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import redis.asyncio as aioredis
import structlog

from spex.proto import BudgetUpdateEvent, Message, ProtocolError, QueryStatsEvent, WorkerLoadEvent, decode
from spex.proto.names import (
    ALLOCATOR_LEASE,
    ALLOCATOR_STATUS,
    GEN_WORKERS,
    QUERY_STATS,
    home,
    query_inbox,
    query_request,
    spread,
    worker_load,
)
from spex.shared.core.spec.budget import Demand, allocate
from spex.shared.roofline.capacity import TpotGovernor, kv_room, spare_concurrency
from spex.shared.roofline.hardware import parse_profile
from spex.shared.runtime.bus import Bus, read_streams
from spex.shared.runtime.metrics import GOVERNOR_SLACK, SPEC_BUDGET, SPEC_POOL
from spex.shared.runtime.service import loop_forever, run_service
from spex.shared.runtime.settings import Settings

__all__ = ["Allocator", "main"]

MAX_STEP_TOKENS = 256  # the longest step a speculative job may generate
STALE_S = 2.0  # stats older than this belong to a finished query
PUBLISH_BATCH = 1000  # budget updates sent in one pipeline


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
        self._last = dict.fromkeys(spread(QUERY_STATS), "$")  # each part: where we are
        self.governors: dict[str, TpotGovernor] = {}  # per worker
        self._slack_bound: dict[str, bool] = {}  # the slack set its last pool (not KV)
        self._gauged: set[str] = set()  # workers whose gauges this allocator set
        self.log = structlog.get_logger().bind(service="allocator", consumer=settings.consumer)

    def summary(self) -> dict[str, Any]:
        slack = {w: round(g.slack, 3) for w, g in self.governors.items()}
        return {"rounds": self.rounds, "k_total": self.k_total, "slack": slack}

    def slack(self, worker: str) -> float:
        """The roofline slack `worker`'s pool is computed at now."""
        if self.settings.tpot_fixed or worker not in self.governors:
            return self.settings.tpot_slack
        return self.governors[worker].slack

    def _govern(self, loads: dict[str, WorkerLoadEvent]) -> None:
        """Feed each worker's governor the step counters its generator reports."""
        for name, w in loads.items():
            g = self.governors.get(name)
            if g is None:
                g = self.governors[name] = TpotGovernor(self.settings.tpot_target, self.settings.tpot_slack)
            g.feed(w.primary_steps, w.primary_step_s, w.primary_alone_s)
        for gone in set(self.governors) - set(loads):
            del self.governors[gone]
            self._slack_bound.pop(gone, None)

    async def run(self, stop: asyncio.Event) -> None:
        await loop_forever(stop, self._round, self.log, lambda: None)

    async def _round(self) -> None:
        lease_ms = int(self.settings.lease_s * 1000)
        mine = await self.r.set(ALLOCATOR_LEASE, self.settings.consumer, nx=True, px=lease_ms)
        holder: Any = await self.r.get(ALLOCATOR_LEASE)
        if not mine and (holder or b"").decode() != self.settings.consumer:
            self._clear_gauges()  # the active one reports, not a standby
            await asyncio.sleep(self.settings.lease_s / 3)  # another allocator is active
            return
        await self.r.pexpire(ALLOCATOR_LEASE, lease_ms)
        replies = await read_streams(self.r, self._last, 1000, self.settings.block_ms)
        now = time.monotonic()
        for part, entries in replies:
            for entry_id, fields in entries:
                self._last[part] = entry_id
                try:
                    msg = decode(QUERY_STATS, (fields or {}).get(b"e", b""))
                except ProtocolError as exc:  # telemetry: a bad sample is dropped, not parked
                    self.log.warning("query_stats_malformed", entry_id=str(entry_id), error=str(exc))
                    continue
                if isinstance(msg, QueryStatsEvent):
                    self.latest[msg.query_id] = (now, msg)
        self.latest = {q: v for q, v in self.latest.items() if now - v[0] < STALE_S}
        self.published = {q: v for q, v in self.published.items() if q in self.latest}
        await self._publish()

    async def _worker_loads(self) -> list[WorkerLoadEvent]:
        """The load of every live generator (a worker's key expires when it dies): those the
        registry knows, one MGET (their keys share partition 0's slot)."""
        out = []
        members: Any = await self.r.zrange(home(GEN_WORKERS), 0, -1)
        keys = [home(worker_load(m.decode() if isinstance(m, bytes) else str(m))) for m in members]
        raws: Any = await self.r.mget(keys) if keys else []
        for key, raw in zip(keys, raws, strict=True):
            if raw is None:
                continue
            try:
                load = decode(key, raw)
            except ProtocolError as exc:
                self.log.warning("worker_load_malformed", key=key, error=str(exc))
                continue
            if isinstance(load, WorkerLoadEvent):
                out.append(load)
        return out

    def _pool(self, stats: list[QueryStatsEvent], loads: list[WorkerLoadEvent]) -> int:
        """Σ over `loads`' generators of what their roofline and KV leave for speculation (the
        same rule as the virtual-time bench); a static k_total while none reports its load."""
        spec_ctx = sum(min(max(0, m.prefix_tokens), MAX_PREFIX_TOKENS) for m in stats) / len(stats)
        if not loads:
            return max(0, self.k_total - sum(m.active_jobs for m in stats))
        total = 0
        for w in loads:
            spare = spare_concurrency(self.profile, w.primary, w.primary_ctx, spec_ctx, self.slack(w.worker))
            room = kv_room(self.profile, w.kv_held, w.spec, MAX_STEP_TOKENS)
            self._slack_bound[w.worker] = spare < room  # the slack, not the KV pool, sets it
            total += min(spare, room)
        return total

    async def _publish(self) -> None:
        """Each worker's spare capacity goes to the queries routed to it (prefix affinity);
        queries not routed to a live worker share what the other workers leave."""
        if not self.latest:  # nothing speculates: nothing granted, no pool used
            SPEC_BUDGET.set(0)
            for worker in self._gauged:
                SPEC_POOL.labels(worker).set(0)
            return
        stats = [m for _, m in self.latest.values()]
        loads = {w.worker: w for w in await self._worker_loads()}
        if not self.settings.tpot_fixed:
            self._govern(loads)
        groups: dict[str, list[QueryStatsEvent]] = {}
        for m in stats:
            groups.setdefault(m.worker if m.worker in loads else "", []).append(m)
        shares: dict[str, int] = {}
        pools: dict[str, int] = {}
        for worker, members in groups.items():
            mine = [loads[worker]] if worker else [w for name, w in loads.items() if name not in groups]
            # Unplaced queries get what the workers nobody is placed on leave — nothing when
            # every live worker has its own queries (not the static k_total on top).
            pool = self._pool(members, mine) if mine or not loads else 0
            demands = [_demand(m, self.kv_bytes) for m in members]
            shares |= allocate(demands, pool, self.weight_bytes)
            demand = sum(d.candidates for d in demands)
            for w in mine:
                pools[w.worker] = pool
                if w.worker in self.governors:
                    self.governors[w.worker].note_pool(demand, pool, self._slack_bound.get(w.worker, False))
        self.rounds += 1
        await self._report(loads, pools, sum(shares.values()))
        updates: list[tuple[str, Message]] = []
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
            updates.append((query_inbox(m.query_id), event))
        for start in range(0, len(updates), PUBLISH_BATCH):  # every update of the round at once
            batch = updates[start : start + PUBLISH_BATCH]
            await self.bus.publish_many(batch, require=lambda message: query_request(message.query_id))

    async def _report(self, loads: dict[str, WorkerLoadEvent], pools: dict[str, int], granted: int) -> None:
        """The governors' slack and the pools, as gauges and for the ingress's overview (a
        key that expires when no allocator is active)."""
        slack = {w: round(self.slack(w), 4) for w in loads}
        for worker, value in slack.items():
            GOVERNOR_SLACK.labels(worker).set(value)
            SPEC_POOL.labels(worker).set(pools.get(worker, 0))
        for gone in self._gauged - set(slack):  # a worker that left: its series go with it
            GOVERNOR_SLACK.remove(gone)
            SPEC_POOL.remove(gone)
        self._gauged = set(slack)
        SPEC_BUDGET.set(granted)
        status = {"slack": slack, "pool": pools, "granted": granted, "tpot_target": self.settings.tpot_target}
        await self.r.set(ALLOCATOR_STATUS, json.dumps(status), px=int(self.settings.lease_s * 3000))

    def _clear_gauges(self) -> None:
        if self._gauged:
            GOVERNOR_SLACK.clear()
            SPEC_POOL.clear()
            SPEC_BUDGET.set(0)
            self._gauged = set()


MAX_CANDIDATES = 1024  # more speculative branches than any engine runs for one query
MAX_PREFIX_TOKENS = 10_000_000


def _demand(m: QueryStatsEvent, kv_bytes: float) -> Demand:
    """A query's demand, its telemetry clamped to sane ranges (a NaN hit rate counts as 0)."""
    hit_rate = m.hit_rate if 0.0 <= m.hit_rate <= 1.0 else (1.0 if m.hit_rate > 1.0 else 0.0)
    candidates = min(max(0, m.candidates), MAX_CANDIDATES)
    prefix = min(max(0, m.prefix_tokens), MAX_PREFIX_TOKENS)
    return Demand(m.query_id, candidates, hit_rate, prefix * kv_bytes)


def main() -> int:
    return run_service("allocator", Allocator)


if __name__ == "__main__":
    raise SystemExit(main())
