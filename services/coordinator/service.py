"""Tree coordinator: adopts questions from the ingress stream under a per-query lease with a
fencing epoch, drives each query's pure state machine (`spex.shared.core.machine`), performs
the effects of its commands (`handlers`), and publishes the answer.

Checkpointing is event sourcing: a query's inbox stream (never trimmed) holds every result it
received, in order, and the machine is a deterministic function of that sequence. Whoever
holds the lease replays the inbox into a fresh machine and continues: the same tree, the same
job ids (so re-dispatched jobs are dropped by the idempotent publish). The checkpoint hash
records the epoch, the last applied entry and the tree digest so far.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import msgspec
import redis.asyncio as aioredis
import structlog
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from spex.proto import (
    ProtocolError,
    QueryStatsEvent,
    SubmissionError,
    SubmitQuestionRequest,
    decode,
    encode,
    submission,
)
from spex.proto.names import (
    ANSWERS,
    COORDINATOR_GROUP,
    COORDINATORS_ACTIVE,
    INGRESS,
    INGRESS_IN_FLIGHT,
    QUERY_STATS,
    cancel_key,
    dead_letter,
    query_checkpoint,
    query_epoch,
    query_inbox,
    query_lease,
    query_request,
    reply_key,
)
from spex.services.coordinator import scripts
from spex.services.coordinator.handlers import (
    EVENT_HANDLERS,
    Answer,
    Effect,
    MarkCancelled,
    Outgoing,
    Publish,
    effects,
)
from spex.shared.content.grading import grade
from spex.shared.core.commands import Command
from spex.shared.core.machine import QueryMachine
from spex.shared.core.search import SearchConfig
from spex.shared.core.spec.budget import hit_rate_estimate
from spex.shared.core.speculation import SpecPolicy
from spex.shared.runtime.bus import Bus, Delivery
from spex.shared.runtime.metrics import EVENTS, QUERIES_OWNED
from spex.shared.runtime.service import loop_forever, run_service
from spex.shared.runtime.settings import Settings

__all__ = ["Coordinator", "main"]

LOCAL_SHARE = 4  # speculative jobs per query when no allocator publishes a share
STATS_EVERY_S = 0.05  # how often per-query stats go to the allocator
GRADE_TIMEOUT_S = 10.0  # math-verify on one answer


@dataclass
class _Query:
    request: SubmitQuestionRequest
    machine: QueryMachine
    epoch: int
    last_id: str = "0"
    started_wall: float = 0.0


class Coordinator:
    def __init__(self, client: aioredis.Redis, settings: Settings) -> None:
        self.bus = Bus(client, settings.consumer, settings.max_deliveries)
        self.r = client
        self.settings = settings
        self.owner = settings.consumer
        self.queries: dict[str, _Query] = {}
        self.log = structlog.get_logger().bind(service="coordinator", consumer=settings.consumer)
        self.events = 0
        self.answered = 0
        self._stats_sent = 0.0

    def summary(self) -> dict[str, Any]:
        return {"events": self.events, "answered": self.answered, "dead_lettered": self.bus.dead_lettered}

    async def run(self, stop: asyncio.Event) -> None:
        await self.bus.ensure_group(INGRESS, COORDINATOR_GROUP)
        await asyncio.gather(self._intake(stop), self._inboxes(stop), self._leases(stop))

    def _now(self) -> float:
        return time.monotonic()

    # ------------------------------------------------------------------ adoption
    async def _intake(self, stop: asyncio.Event) -> None:
        async def once() -> None:
            for d in await self.bus.read(
                [INGRESS], COORDINATOR_GROUP, count=8, block_ms=self.settings.block_ms
            ):
                await self._on_submitted(d)

        await loop_forever(stop, once, self.log, self.bus.reconnected)

    async def _on_submitted(self, d: Delivery) -> None:
        req = d.message
        if not isinstance(req, SubmitQuestionRequest):
            await self.bus.dead_letter(d, COORDINATOR_GROUP, f"no handler for {type(req).__name__}")
            return
        try:
            submission.validate(req)
        except SubmissionError as exc:
            await self.bus.dead_letter(d, COORDINATOR_GROUP, str(exc))
            return
        with structlog.contextvars.bound_contextvars(query_id=req.query_id, trace_id=req.trace_id):
            try:
                await self.r.set(query_request(req.query_id), encode(req), nx=True)
                await self.adopt(req)
            except (RedisConnectionError, RedisTimeoutError):
                raise  # not the message's fault: retried after the reconnect
            except Exception as exc:  # the question itself cannot be searched: park it
                self.log.error("question_rejected", error=repr(exc))
                await self.bus.dead_letter(d, COORDINATOR_GROUP, repr(exc))
                return
        await self.bus.ack(d, COORDINATOR_GROUP)

    async def adopt(self, req: SubmitQuestionRequest) -> bool:
        """Take the lease on a query and run it from its inbox (new or interrupted)."""
        qid = req.query_id
        if qid in self.queries or await self.r.exists(reply_key(qid)):
            return False
        lease_ms = int(self.settings.lease_s * 1000)
        expiry = int(time.time() * 1000) + lease_ms
        keys = [query_lease(qid), query_epoch(qid), COORDINATORS_ACTIVE]
        epoch = await self.r.eval(scripts.ACQUIRE, len(keys), *keys, self.owner, lease_ms, expiry, qid)
        if not epoch:
            return False
        speculate = req.mode == "spex"
        s = self.settings
        params = {"max_depth": float(s.max_depth)} if s.max_depth else {}
        machine = QueryMachine(
            qid,
            req.prompt_tokens or max(1, len(req.question) // 4),
            SearchConfig(req.algorithm, req.target, max_step_tokens=s.max_step_tokens, params=params),
            req.seed,
            # Real content without a reward model: the generator's own log-probabilities.
            reward="logprob" if s.content == "real" and not s.prm else "prm",
            speculation=SpecPolicy(enabled=speculate),
            share=LOCAL_SHARE if speculate else 0,
        )
        query = _Query(req, machine, int(epoch), started_wall=self._now())
        self.queries[qid] = query
        QUERIES_OWNED.labels(self.owner).set(len(self.queries))
        self.log.info("query_adopted", query_id=qid, epoch=int(epoch))
        await self._execute(query, machine.start(0.0))
        # Replay whatever the inbox already holds (a previous owner's results).
        entries: Any = await self.r.xrange(query_inbox(qid), "-", "+")
        await self._apply(query, entries)
        return True

    # ------------------------------------------------------------------ inbox events
    async def _inboxes(self, stop: asyncio.Event) -> None:
        async def once() -> None:
            if not self.queries:
                await asyncio.sleep(self.settings.block_ms / 1000)
                return
            streams: dict[Any, Any] = {query_inbox(q): s.last_id for q, s in self.queries.items()}
            replies: Any = await self.r.xread(streams, count=256, block=self.settings.block_ms)
            for stream, entries in replies or []:
                qid = query_inbox.parse(stream)
                query = self.queries.get(qid) if qid is not None else None
                if query is not None:
                    await self._apply(query, entries)
            if time.monotonic() - self._stats_sent >= STATS_EVERY_S:
                self._stats_sent = time.monotonic()
                await self._publish_stats()

        await loop_forever(stop, once, self.log, self.bus.reconnected)

    async def _apply(self, query: _Query, entries: Any) -> None:
        stream = query_inbox(query.request.query_id)
        for entry_id, fields in entries:
            query.last_id = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
            payload = (fields or {}).get(b"e", b"")
            try:
                message = decode(stream, payload)
            except ProtocolError as exc:
                # The inbox has no group: park the bad entry with its reason and go on.
                await self.r.xadd(
                    dead_letter(stream), {"id": query.last_id, "reason": str(exc), "e": payload}
                )
                self.bus.dead_lettered += 1
                continue
            handler = EVENT_HANDLERS.get(type(message))
            if handler is None:
                continue
            self.events += 1
            EVENTS.labels("coordinator", self.owner, type(message).__name__).inc()
            try:
                commands = handler(query.machine, message, self._now())
            except Exception as exc:  # a bad event must not take the query (or the service) down
                self.log.error("event_failed", query_id=query.request.query_id, error=repr(exc))
                continue
            await self._execute(query, commands)
            if query.machine.done:
                break
        if not query.machine.done:
            await self._checkpoint(query)

    # ------------------------------------------------------------------ effects
    async def _execute(self, query: _Query, commands: list[Command]) -> None:
        out = Outgoing(query.request, query.epoch, query.machine, self.settings.content)
        for effect in effects(out, commands):
            await self._perform(query, effect)

    async def _perform(self, query: _Query, effect: Effect) -> None:
        if isinstance(effect, Publish):
            await self.bus.publish(effect.stream, effect.message)
        elif isinstance(effect, MarkCancelled):
            await self.r.set(cancel_key(effect.job_id), 1, ex=3600)
        elif isinstance(effect, Answer):
            await self._answer(query, effect)

    async def _answer(self, query: _Query, effect: Answer) -> None:
        qid, m = query.request.query_id, query.machine
        keys = [
            query_lease(qid),
            query_epoch(qid),
            reply_key(qid),
            ANSWERS,
            INGRESS_IN_FLIGHT,
            COORDINATORS_ACTIVE,
        ]
        correct = await self._grade(effect.message.answer, query.request.reference_answer)
        # The latency is an I/O-time measurement: stamped here, as the answer is written.
        answer = msgspec.structs.replace(
            effect.message, latency_s=self._now() - query.started_wall, correct=correct
        )
        await self.r.eval(scripts.ANSWER, len(keys), *keys, self.owner, query.epoch, encode(answer), qid)
        self.queries.pop(qid, None)
        QUERIES_OWNED.labels(self.owner).set(len(self.queries))
        self.answered += 1
        self.log.info(
            "query_answered", query_id=qid, answer=m.answer, nodes=effect.message.nodes, cancelled=m.cancelled
        )

    async def _grade(self, answer: str | None, reference: str) -> bool | None:
        """math-verify in a worker thread, so a slow parse never stalls the leases; None when
        there is no reference, or grading took longer than GRADE_TIMEOUT_S."""
        if not reference:
            return None
        try:
            return await asyncio.wait_for(asyncio.to_thread(grade, answer, reference), GRADE_TIMEOUT_S)
        except TimeoutError:
            self.log.warning("grading_timed_out", reference=reference[:80])
            return None

    async def _checkpoint(self, query: _Query) -> None:
        qid, m = query.request.query_id, query.machine
        keys = [query_lease(qid), query_epoch(qid), query_checkpoint(qid)]
        args = (self.owner, query.epoch, query.last_id, m.tree.digest(), len(m.tree))
        if not await self.r.eval(scripts.CHECKPOINT, len(keys), *keys, *args):
            self._lost(qid)

    # ------------------------------------------------------------------ leases
    async def _leases(self, stop: asyncio.Event) -> None:
        await loop_forever(stop, self._lease_round, self.log, self.bus.reconnected)

    async def _lease_round(self) -> None:
        """Renew our leases; adopt queries whose owner stopped renewing (the reaper)."""
        lease_ms = int(self.settings.lease_s * 1000)
        await asyncio.sleep(self.settings.lease_s / 3)
        now_ms = int(time.time() * 1000)
        for qid in list(self.queries):
            keys = [query_lease(qid), query_epoch(qid), COORDINATORS_ACTIVE]
            epoch = await self.r.eval(
                scripts.RENEW, len(keys), *keys, self.owner, lease_ms, now_ms + lease_ms, qid
            )
            if not epoch or int(epoch) != self.queries[qid].epoch:
                self._lost(qid)
        # A coordinator that died between reading a question and taking its lease left the
        # question pending in the ingress group: take it over.
        for d in await self.bus.reclaim(INGRESS, COORDINATOR_GROUP, 2 * lease_ms):
            await self._on_submitted(d)
        expired: Any = await self.r.zrangebyscore(COORDINATORS_ACTIVE, 0, now_ms)
        for raw in expired:
            qid = raw.decode()
            if qid in self.queries or await self.r.exists(query_lease(qid)):
                continue
            key = query_request(qid)
            blob: Any = await self.r.get(key)
            if blob is not None:
                req = decode(key, blob)
                assert isinstance(req, SubmitQuestionRequest)
                if await self.adopt(req):
                    self.log.info("query_taken_over", query_id=qid)

    async def _publish_stats(self) -> None:
        """What the budget allocator needs per speculating query (C_q, P_q, S_KV, load)."""
        for qid, query in self.queries.items():
            m = query.machine
            if not m.speculation.enabled:
                continue
            stats = QueryStatsEvent(
                msg_id=f"stats/{qid}/{time.monotonic_ns()}",
                query_id=qid,
                candidates=m.spec_candidates(64),
                hit_rate=hit_rate_estimate(m.stats.spec_adopted, m.stats.spec_issued),
                prefix_tokens=m.context_tokens,
                active_jobs=m.jobs_in_flight,
            )
            await self.r.xadd(QUERY_STATS, {"e": encode(stats)}, maxlen=10_000, approximate=True)

    def _lost(self, qid: str) -> None:
        """Another coordinator holds the query now (our lease expired): stop working on it."""
        if self.queries.pop(qid, None) is not None:
            self.log.warning("lease_lost", query_id=qid)


def main() -> int:
    return run_service("coordinator", Coordinator)
