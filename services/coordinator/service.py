"""Tree coordinator: adopts questions from the ingress stream under a per-query lease with a
fencing epoch, and drives each query's pure state machine (`spex.shared.core.machine`) until
its answer is written.

Checkpointing is event sourcing: a query's inbox stream (never trimmed while the query runs)
holds every result it received, in order, and the machine is a deterministic function of
that sequence. Whoever holds the lease replays the inbox into a fresh machine and continues:
the same tree, the same job ids (so re-dispatched jobs are dropped by the idempotent
publish). A query joins the live inbox reader only once its replay is done, and every entry
is applied at most once (by id), so a restart never applies an event twice. The checkpoint
hash records the epoch, the last applied entry and the tree digest so far.

Its loop is five rounds, each a named method run by `loop_forever`: `intake_round` (new
questions), `inbox_round` (the results of every query it holds), `lease_round` (renewals, one
round trip for every lease held, and Redis-restart recovery), `takeover_round` (queries whose
holder stopped, questions a dead coordinator left pending, trimming) and `route_round` (the
live generators). Renewals have a round of their own so that no takeover, however many, delays
them; a coordinator whose renewals come late all the same adopts no new question until they are
on time again (it sheds new work before it would lose what it holds). The modules beside it
(the package's docstring lists them) hold the rest.

Faults: a query whose lease was not confirmed within `lease_s` (this process stalled) is not
worked on until a renewal succeeds — its fenced writes would fail anyway. A query whose
events were being applied when Redis went away is released (its commands may not all have
been published) and adopted again from its inbox once its lease lapses. A question that
cannot be searched, and a query whose job was given up on, get a failed answer (`error`), so
no client waits forever. If Redis lost a query's state (restarted without persistence), the
coordinator that held it searches it again from the request it holds.
"""

from __future__ import annotations

import asyncio
import time

import redis.asyncio as aioredis
import structlog
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from spex.proto import SubmitQuestionRequest, submission
from spex.proto.names import (
    ANSWERS,
    COORDINATOR_GROUP,
    DATA_KEPT,
    DEFAULT_POOL,
    GEN_CONTROL,
    INGRESS,
    QUERY_STATS,
    Partitions,
)
from spex.services.coordinator.adoption import Adopter
from spex.services.coordinator.driver import Driver
from spex.services.coordinator.holdings import Ending, Holdings
from spex.services.coordinator.observe import Observer
from spex.services.coordinator.query import HeldQuery, stats
from spex.services.coordinator.recovery import Recovery
from spex.services.coordinator.reports import Found, Submitted
from spex.services.coordinator.routing import REFRESH_S, Router
from spex.services.coordinator.store import QueryStore
from spex.shared.content.prompt_style import check_chat_template
from spex.shared.runtime.bus import TRIM_EVERY_S, Bus, Delivery
from spex.shared.runtime.data_loss import DataLoss
from spex.shared.runtime.service import Service, loop_forever, run_service
from spex.shared.runtime.settings import Settings

__all__ = ["Coordinator", "main"]

STATS_EVERY_S = 0.05  # how often per-query stats go to the allocator
# A coordinator whose leases come up for renewal later than this share of the lease after the
# last renewal (planned: a third) is too busy to hold more: it adopts no new question until
# they come back within it, and another coordinator (or this one, later) takes the new ones.
SHED_SHARE = 0.5
INBOX_BATCH = 256  # inbox entries read per XREAD
# A coordinator seen in its lease rounds within this many leases is alive: one a loss waits for.
MEMBERS_WINDOW_LEASES = 3
# Streams read as they come (no group), trimmed by age: gen:control's cancels and promotions
# matter to a generator reading live (one away longer loses some: work, not correctness);
# stats:queries to the allocator's next round.
CONTROL_KEEP_S = 60.0
STATS_KEEP_S = 60.0
# Why a question on the ingress stream is not searched (its entry is dead-lettered).
NOT_SUBMITTED = {
    Submitted.MISSING: "not submitted through the ingress: no request is stored under its id",
    Submitted.UNREADABLE: "the request stored under its id cannot be read",
    Submitted.OTHER: "its query id belongs to another request",
}


class Coordinator(Service):
    def __init__(self, client: aioredis.Redis, settings: Settings) -> None:
        self.partitions = parts = Partitions(settings.partitions)  # the deployment's: every key built here
        self.bus = Bus(client, settings.consumer, settings.max_deliveries, partitions=parts)
        self.settings = settings
        self.limits = settings.limits  # what a question is held to (computed once)
        self.owner = settings.consumer
        self.log = structlog.get_logger().bind(service="coordinator", consumer=settings.consumer)
        per_target, ttl_s = settings.memory_per_target, settings.result_ttl_s
        self.store = QueryStore(client, self.owner, settings.lease_s, ttl_s, per_target, partitions=parts)
        self.recovery = Recovery(self.store)
        self.router = Router(client, parts, DEFAULT_POOL, settings.affinity)
        self.holdings = Holdings(self.owner, self.recovery, self.log)
        self.observer = Observer(self.store, settings.tree_events)
        self.driver = Driver(
            self.bus, self.store, self.router, self.holdings, self.observer, settings, self.log,
            keep_s={GEN_CONTROL: CONTROL_KEEP_S},
        )  # fmt: skip
        self.adopter = Adopter(self.store, self.holdings, self.driver, settings, self.log)
        self.bus.on_dead = self.adopter.on_dead
        self._stats_sent = 0.0
        self._fan_out_trimmed = -1e9  # monotonic: when gen:control, stats:queries and answers were trimmed
        self._renewed_at = time.monotonic()  # when the last lease round renewed our leases
        self.shedding = False  # leases renewed too late: no new question is adopted
        self.loss = DataLoss(client, settings.consumer, settings.data_loss_wait_s, partitions=parts)
        self.members = [self.owner]  # coordinators seen alive in the last rounds (`data_loss`)
        self._marked: set[str] = set()  # partitions whose loss this round marked and waits for us

    @property
    def queries(self) -> dict[str, HeldQuery]:
        """The queries held here, by id."""
        return self.holdings.queries

    def summary(self) -> dict[str, int]:
        d = self.driver
        return {"events": d.events, "answered": d.answered, "dead_lettered": self.bus.dead_lettered}

    async def run(self, stop: asyncio.Event) -> None:
        await self.bus.ensure_group(INGRESS, COORDINATOR_GROUP)
        rounds = [
            self.intake_round, self.inbox_round, self.lease_round, self.takeover_round, self.route_round
        ]  # fmt: skip
        await asyncio.gather(*(loop_forever(stop, body, self.log, self.bus.reconnected) for body in rounds))

    # ------------------------------------------------------------------ the five rounds
    # Each is one pass that returns the pause before its next (`run` paces them; a test drives
    # passes in any order). They share the held queries; what each writes is its own below.
    async def intake_round(self) -> float:
        """New questions from the ingress stream: each adopted (none while shedding)."""
        if self.shedding:
            return self.settings.block_ms / 1000
        for d in await self.bus.read([INGRESS], COORDINATOR_GROUP, count=8, block_ms=self.settings.block_ms):
            await self._on_submitted(d)
        return 0.0

    async def inbox_round(self) -> float:
        """The new inbox entries of every query we hold (leases confirmed, replays done)."""
        fresh = time.monotonic() - self.settings.lease_s
        live = {q: h for q, h in self.queries.items() if h.renewed > fresh and not h.replaying}
        if not live:  # none held, or every lease is unconfirmed (we stalled): wait
            return self.settings.block_ms / 1000
        after = {q: h.last_id for q, h in live.items()}
        await self.driver.apply_read(
            live, await self.store.read_inboxes(after, INBOX_BATCH, self.settings.block_ms)
        )
        if time.monotonic() - self._stats_sent >= STATS_EVERY_S:
            self._stats_sent = time.monotonic()
            await self._publish_stats()
        await self.observer.send_due(self.queries.values())
        return 0.0

    async def lease_round(self) -> float:
        """Renew our leases (one round trip for all), a third of a lease apart; recover from a
        Redis restart or a loss of its data: what we held, stored again before the loss's
        marker lets go of us."""
        standing = await self.loss.round(self.owner, MEMBERS_WINDOW_LEASES * self.settings.lease_s)
        self.members = standing.members
        released = self.holdings.released
        await self.recover()
        held = list(self.queries.items())
        epochs = await self.store.renew_all([qid for qid, _ in held])
        self._shed(time.monotonic() - self._renewed_at, len(held))
        self._renewed_at = time.monotonic()
        forgotten = []
        for qid, query in held:
            epoch = epochs[qid]
            if epoch and epoch == query.epoch:
                query.renewed = time.monotonic()
            elif not await self.store.known(qid):  # Redis lost the query's state
                self.holdings.end(query, Ending.FORGOTTEN)
                forgotten.append(query)
            else:
                self.holdings.end(query, Ending.LOST)
        await self._search_again(forgotten)
        # All we held is stored again — unless a query was let go since `recover` looked (a
        # fenced write that found Redis without its state): the next round looks again.
        if self.holdings.released == released:
            for part in {*standing.awaited, *self._marked}:
                await self.loss.done(self.owner, part)
            self._marked.clear()
        return self.settings.lease_s / 3

    async def takeover_round(self) -> float:
        """Take over queries whose holder stopped renewing and questions a coordinator that
        died left pending, a third of a lease apart; trim the streams read as they come."""
        # A coordinator that died between reading a question and taking its lease left the
        # question pending in the ingress group: take it over (unless shedding new work).
        if not self.shedding:
            for d in await self.bus.reclaim(INGRESS, COORDINATOR_GROUP, 2 * self.store.lease_ms):
                await self._on_submitted(d)
        await self.bus.trim_now_and_then(INGRESS)
        if time.monotonic() - self._fan_out_trimmed >= TRIM_EVERY_S:
            self._fan_out_trimmed = time.monotonic()
            keep = {
                GEN_CONTROL: CONTROL_KEEP_S,
                QUERY_STATS: STATS_KEEP_S,
                ANSWERS: self.settings.result_ttl_s,
            }
            await self.store.trim_fan_out(keep)
            await self.store.recount_reserves()  # no drift in memory admission outlives a round
        if not self.shedding:  # queries whose leases lapsed are new work too: another takes them
            for qid in await self.store.expired():
                await self.adopter.take_over(qid)
        return self.settings.lease_s / 3

    def _shed(self, since_s: float, held: int) -> None:
        """Stop adopting new questions while our leases are renewed later than `SHED_SHARE`
        of the lease (`since_s` after the last renewal), before any could lapse."""
        shedding = held > 0 and since_s > SHED_SHARE * self.settings.lease_s
        if shedding != self.shedding:
            event = "intake_paused" if shedding else "intake_resumed"
            self.log.warning(event, held=held, renewal_gap_s=round(since_s, 3))
        self.shedding = shedding

    async def route_round(self) -> float:
        """Re-read the live generators and their loads (where each job goes)."""
        await self.router.refresh(self.queries.keys())
        return REFRESH_S

    # ------------------------------------------------------------------ intake
    async def _on_submitted(self, d: Delivery) -> None:
        req = d.message
        if not isinstance(req, SubmitQuestionRequest):
            await self.bus.dead_letter(d, COORDINATOR_GROUP, f"no handler for {type(req).__name__}")
            return
        try:
            submission.validate(req, self.limits)
            if req.chat_template:  # compiled here too: a client may write the stream directly
                check_chat_template(req.chat_template)
        except ValueError as exc:
            await self.bus.dead_letter(d, COORDINATOR_GROUP, str(exc))
            return
        with structlog.contextvars.bound_contextvars(query_id=req.query_id, trace_id=req.trace_id):
            try:
                # The ingress stores the request as it queues the question (one script): the
                # stored request is the query's record, and only that request is searched.
                submitted, found = await self.adopter.submitted(req)
            except (RedisConnectionError, RedisTimeoutError, ResponseError):
                raise  # Redis's trouble, not the message's: retried
            except Exception as exc:  # the question itself cannot be searched: park it
                self.log.error("question_unsearchable", error=repr(exc))
                await self.bus.dead_letter(d, COORDINATOR_GROUP, "the question could not be searched")
                return
            if submitted in NOT_SUBMITTED and found is not Found.ANSWERED:
                await self.bus.dead_letter(d, COORDINATOR_GROUP, NOT_SUBMITTED[submitted])
                return
        await self.bus.ack(d, COORDINATOR_GROUP)

    # ------------------------------------------------------------------ recovery
    async def recover(self) -> None:
        """After a Redis restart, release every held query and adopt it again from its inbox
        (or search it again if Redis lost it); search again the released queries Redis lost."""
        held = list(self.queries.values())  # before any search-again below adopts one
        lost = await self.recovery.lost_releases(self.holdings.busy)  # their requests went with Redis's data
        plan = await self.recovery.after_restart(held)
        if plan.search_again or plan.adopt_again:
            self.log.warning("redis_restarted", queries=len(held))
        for query in plan.search_again:
            self.holdings.end(query, Ending.FORGOTTEN)  # lost with Redis's data: only we hold the request
        await self._search_again(lost + plan.search_again)
        for query in plan.adopt_again:
            self.holdings.end(query, Ending.RELEASED)
            await self.store.release(query.query_id)
        # Only now: a round that failed midway (Redis still loading, gone again) sees the
        # restart again next time and finishes the plan (releasing twice is harmless).
        self.recovery.handled(plan)

    async def _search_again(self, queries: list[HeldQuery]) -> None:
        """Redis lost these queries (no epoch, no answer: it lost its data). Their requests are
        here: the loss marked (`data_loss`), each stored again — its client key first — and
        searched from the start (the same seeds give the same tree); one whose client key a
        question posted again since holds is answered as superseded by that one instead."""
        if not queries:
            return
        parts = {self.partitions.placed(DATA_KEPT, q.query_id) for q in queries}
        for part in parts:
            await self.loss.mark(part, self.owner, self.members)
        self._marked |= parts
        for query in queries:
            self.recovery.remember(query)  # until stored again: a round that fails here retries
            self.log.warning("query_state_lost", query_id=query.query_id)
            by = await self.store.in_flight_again(query.request)
            if by:
                self.log.warning("query_superseded", query_id=query.query_id, by=by)
                reason = (
                    f"Redis lost its data; its client key was posted again as query {by}, which answers it"
                )
                await self.store.reject(query.request, reason, verdict="superseded", keyed=False)
                self.recovery.forget(query.query_id)
            else:
                self.adopter.adopt_again(query.request)

    async def _publish_stats(self) -> None:
        """What the budget allocator needs per speculating query (C_q, P_q, S_KV, load)."""
        held = [q for q in self.queries.values() if q.speculates]
        await self.store.publish_stats([stats(q, self.router.owner(q.query_id)) for q in held])


def main() -> int:
    return run_service("coordinator", Coordinator)
