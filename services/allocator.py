"""Budget allocator (T2): one active instance under a lease turns the coordinators' per-query
stats (the values of their speculative jobs and candidates) into speculative shares and
publishes them to each query's inbox. Coordinators fall back to a static local share while
none is published.

Each worker's queries are admitted by the controller (`spex.shared.roofline.admission`) under
SPEX_OBJECTIVE, on the step curve the worker published (measured at its start, or from
SPEX_PROFILE_FILE) or else the catalog's SPEX_PROFILE, at the worker's live load. Under `slo`
the slack is what a `TpotGovernor` steers, per worker, from the step times its generator
reports, so speculation grows primary TPOT by SPEX_TPOT_TARGET (SPEX_TPOT_FIXED=1:
SPEX_TPOT_SLACK as it is)."""

from __future__ import annotations

import asyncio
import json
import math
import time

import redis.asyncio as aioredis
import structlog

from spex.proto import BudgetUpdateEvent, Message, ProtocolError, QueryStatsEvent, WorkerLoadEvent, decode
from spex.proto.names import (
    ALLOCATOR_LEASE,
    ALLOCATOR_STATUS,
    QUERY_STATS,
    Partitions,
    query_inbox,
    query_request,
    worker_curve,
)
from spex.proto.text import as_str
from spex.shared.core.search import SEARCHES
from spex.shared.roofline.admission import DEFAULT_STEP_TOKENS, Admission, Offer, admit, divide
from spex.shared.roofline.capacity import TpotGovernor, kv_room, spare_concurrency
from spex.shared.roofline.hardware import parse_profile
from spex.shared.roofline.measured import MeasuredProfile, parse_measured
from spex.shared.runtime.bus import Bus
from spex.shared.runtime.metrics import GOVERNOR_SLACK, SPEC_BUDGET, SPEC_POOL
from spex.shared.runtime.service import Service, loop_forever, run_service
from spex.shared.runtime.settings import Settings
from spex.shared.runtime.streams import read_streams
from spex.shared.runtime.workers import WorkerRegistry

__all__ = ["Allocator", "main"]

MAX_STEP_TOKENS = 256  # the longest step a speculative job may generate
STALE_S = 2.0  # stats older than this belong to a finished query
PUBLISH_BATCH = 1000  # budget updates sent in one pipeline


class Allocator(Service):
    def __init__(self, client: aioredis.Redis, settings: Settings) -> None:
        self.partitions = parts = Partitions(settings.partitions)  # the deployment's
        self.bus = Bus(client, settings.consumer, partitions=parts)
        self.r = client
        self.registry = WorkerRegistry(client, parts)
        self.settings = settings
        profile = parse_profile(settings.profile)
        self.profile = profile
        # k_total: the engine's roofline knee at a typical node context (+10% step time).
        self.k_total = 1 + spare_concurrency(profile, 1, 512, 512, 0.10)
        self.latest: dict[str, tuple[float, QueryStatsEvent]] = {}
        self.published: dict[str, int] = {}  # last share sent per query
        self.rounds = 0
        self._last = dict.fromkeys(parts.spread(QUERY_STATS), "$")  # each part: where we are
        self.governors: dict[str, TpotGovernor] = {}  # per worker
        self.curves: dict[str, MeasuredProfile | None] = {}  # per live worker: its published curve
        self._gauged: set[str] = set()  # workers whose gauges this allocator set
        self.log = structlog.get_logger().bind(service="allocator", consumer=settings.consumer)

    def summary(self) -> dict[str, object]:
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

    async def run(self, stop: asyncio.Event) -> None:
        await loop_forever(stop, self._round, self.log, lambda: None)

    async def _round(self) -> None:
        lease_ms = int(self.settings.lease_s * 1000)
        mine = await self.r.set(ALLOCATOR_LEASE, self.settings.consumer, nx=True, px=lease_ms)
        holder: bytes | str | None = await self.r.get(ALLOCATOR_LEASE)
        if not mine and as_str(holder or b"") != self.settings.consumer:
            self._clear_gauges()  # the active one reports, not a standby
            await asyncio.sleep(self.settings.lease_s / 3)  # another allocator is active
            return
        await self.r.pexpire(ALLOCATOR_LEASE, lease_ms)
        replies = await read_streams(self.r, self._last, 1000, self.settings.block_ms)
        now = time.monotonic()
        for part, entries in replies:
            for entry_id, fields in entries:
                self._last[part] = as_str(entry_id)
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
        registry knows."""

        def malformed(worker: str, error: str) -> None:
            self.log.warning("worker_load_malformed", worker=worker, error=error)

        return list((await self.registry.live(malformed)).values())

    def _offer(self, m: QueryStatsEvent, sharing: int = 1) -> Offer:
        """A query's speculative jobs and candidates on an engine `sharing` queries share, its
        telemetry clamped to sane ranges (at most MAX_CANDIDATES of each, values in [0, 1], a
        NaN counted as 0, a step of 1 to MAX_STEP_TOKENS tokens)."""
        prefix = min(max(0, m.prefix_tokens), MAX_PREFIX_TOKENS)
        search = SEARCHES.get(m.algorithm)
        scale = search.spec_saving(sharing) / search.spec_saving(1) if search is not None else 1.0
        prompts = tuple(min(max(0, t), MAX_PREFIX_TOKENS) for t in m.offer_prompts[:MAX_CANDIDATES])
        step = m.step_tokens if math.isfinite(m.step_tokens) and m.step_tokens >= 1 else DEFAULT_STEP_TOKENS
        offers = _values(m.offers, scale)
        return Offer(
            m.query_id, _values(m.running, scale), offers, float(prefix), prompts, min(step, MAX_STEP_TOKENS)
        )

    def _admit(self, w: WorkerLoadEvent, offers: list[Offer]) -> Admission:
        """Worker `w`'s admission of `offers` under the objective, on its curve (the one it
        published, else the catalog's SPEX_PROFILE) at its live load, within its KV room."""
        capacity = w.kv_capacity if w.kv_capacity > 0 else self.profile.kv_capacity_tokens
        room = kv_room(capacity, w.kv_held, w.spec, MAX_STEP_TOKENS)
        curve = self.curves.get(w.worker) or self.profile
        objective = self.settings.objective
        return admit(curve, w.primary, w.primary_ctx, offers, objective, self.slack(w.worker), room)

    async def _publish(self) -> None:
        """Each worker's controller admits the candidates of the queries routed to it (prefix
        affinity); queries not routed to a live worker share, in value order, what the other
        workers would admit; with no worker reporting, a static k_total."""
        if not self.latest:  # nothing speculates: nothing granted, no pool used
            SPEC_BUDGET.set(0)
            for worker in self._gauged:
                SPEC_POOL.labels(worker).set(0)
            return
        stats = [m for _, m in self.latest.values()]
        loads = {w.worker: w for w in await self._worker_loads()}
        await self._fetch_curves(loads)
        if not self.settings.tpot_fixed:
            self._govern(loads)
        groups: dict[str, list[QueryStatsEvent]] = {}
        for m in stats:
            groups.setdefault(m.worker if m.worker in loads else "", []).append(m)
        shares: dict[str, int] = {}
        pools: dict[str, int] = {}
        for worker, members in groups.items():
            offers = [self._offer(m, len(members)) for m in members]
            running = sum(len(o.running) for o in offers)
            demand = running + sum(len(o.candidates) for o in offers)
            if worker:
                admission = self._admit(loads[worker], offers)
                shares |= admission.shares
                pools[worker] = running + admission.admitted
                self._note(worker, demand, pools[worker], admission.bound)
                continue
            # Unplaced queries get what the workers nobody is placed on would admit — nothing
            # when every live worker has its own queries (not the static k_total on top).
            idle = [w for name, w in loads.items() if name not in groups]
            if idle:
                pool = running + sum(self._admit(w, offers).admitted for w in idle)
            else:
                pool = 0 if loads else max(0, self.k_total - sum(m.active_jobs for m in members))
            shares |= divide(offers, pool)
            for w in idle:
                pools[w.worker] = pool
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
            updates.append((query_inbox(m.query_id, self.partitions), event))
        parts = self.partitions
        for start in range(0, len(updates), PUBLISH_BATCH):  # every update of the round at once
            batch = updates[start : start + PUBLISH_BATCH]
            await self.bus.publish_many(batch, require=lambda message: query_request(message.query_id, parts))

    def _note(self, worker: str, demand: int, pool: int, bound: str) -> None:
        """Tell `worker`'s governor what its admission met: the slack may rise only if it bound."""
        if worker in self.governors:
            self.governors[worker].note_pool(demand, pool, bound == "slack")

    async def _fetch_curves(self, loads: dict[str, WorkerLoadEvent]) -> None:
        """The step curve each live worker published (`worker_curve`), read once per worker;
        one that does not parse is logged and the catalog profile used for that worker."""
        for gone in set(self.curves) - set(loads):
            del self.curves[gone]
        for name in loads:
            if name in self.curves:
                continue
            raw: bytes | str | None = await self.r.get(self.partitions.home(worker_curve(name)))
            curve = None
            if raw is not None:
                try:
                    curve = parse_measured(raw, f"worker {name}'s curve")
                except ValueError as exc:
                    self.log.warning("worker_curve_malformed", worker=name, error=str(exc))
            self.curves[name] = curve

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
        status = {
            "slack": slack, "pool": pools, "granted": granted, "tpot_target": self.settings.tpot_target,
            "objective": self.settings.objective, "curve": {w: self._curve_name(w) for w in loads},
        }  # fmt: skip
        await self.r.set(ALLOCATOR_STATUS, json.dumps(status), px=int(self.settings.lease_s * 3000))

    def _curve_name(self, worker: str) -> str:
        curve = self.curves.get(worker)
        return curve.name if curve is not None else f"catalog {self.settings.profile}"

    def _clear_gauges(self) -> None:
        if self._gauged:
            GOVERNOR_SLACK.clear()
            SPEC_POOL.clear()
            SPEC_BUDGET.set(0)
            self._gauged = set()


MAX_CANDIDATES = 1024  # more speculative branches than any engine runs for one query
MAX_PREFIX_TOKENS = 10_000_000


def _values(values: list[float], scale: float) -> tuple[float, ...]:
    return tuple(min(1.0, v) * scale if v > 0.0 else 0.0 for v in values[:MAX_CANDIDATES])


def main() -> int:
    return run_service("allocator", Allocator)


if __name__ == "__main__":
    raise SystemExit(main())
