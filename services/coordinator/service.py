"""Tree coordinator: adopts questions from the ingress stream under a per-query lease with a
fencing epoch, drives each query's pure state machine (`spex.shared.core.machine`), performs
the effects of its commands (`handlers`), and publishes the answer.

Checkpointing is event sourcing: a query's inbox stream (never trimmed while the query runs)
holds every result it received, in order, and the machine is a deterministic function of
that sequence. Whoever holds the lease replays the inbox into a fresh machine and continues:
the same tree, the same job ids (so re-dispatched jobs are dropped by the idempotent
publish). A query joins the live inbox reader only once its replay is done, and every entry
is applied at most once (by id), so a restart never applies an event twice. The checkpoint
hash records the epoch, the last applied entry and the tree digest so far.

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
from dataclasses import dataclass
from typing import Any

import msgspec
import redis.asyncio as aioredis
import structlog
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from spex.proto import (
    AnswerResult,
    GenerateRequest,
    Message,
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
    DEFAULT_POOL,
    INGRESS,
    INGRESS_IN_FLIGHT,
    QUERY_STATS,
    cancel_key,
    client_in_flight,
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
from spex.services.coordinator.routing import REFRESH_S, Router
from spex.shared.content.grading import grade
from spex.shared.core.commands import Command
from spex.shared.core.machine import QueryMachine
from spex.shared.core.search import SearchConfig
from spex.shared.core.spec.budget import hit_rate_estimate
from spex.shared.core.speculation import SpecPolicy
from spex.shared.runtime.bus import Bus, Delivery, entry_after
from spex.shared.runtime.metrics import EVENTS, QUERIES_OWNED
from spex.shared.runtime.service import loop_forever, run_service
from spex.shared.runtime.settings import Settings

__all__ = ["Coordinator", "main"]

LOCAL_SHARE = 4  # speculative jobs per query when no allocator publishes a share
STATS_EVERY_S = 0.05  # how often per-query stats go to the allocator
GRADE_TIMEOUT_S = 10.0  # math-verify on one answer (and never more than a third of the lease)


@dataclass
class _Query:
    request: SubmitQuestionRequest
    machine: QueryMachine
    epoch: int
    last_id: str = "0"
    started_wall: float = 0.0
    renewed: float = 0.0  # monotonic time the lease was last confirmed
    replaying: bool = True  # its inbox is being replayed: the live reader leaves it alone


class Coordinator:
    def __init__(self, client: aioredis.Redis, settings: Settings) -> None:
        self.bus = Bus(client, settings.consumer, settings.max_deliveries)
        self.r = client
        self.settings = settings
        self.owner = settings.consumer
        self.queries: dict[str, _Query] = {}
        # Queries let go while Redis was unreachable, kept a while: if Redis comes back without
        # their state (restarted without persistence) nobody else holds their request.
        self._released: dict[str, tuple[float, _Query]] = {}
        self.log = structlog.get_logger().bind(service="coordinator", consumer=settings.consumer)
        self.events = 0
        self.answered = 0
        self._stats_sent = 0.0
        self._adopting: set[str] = set()
        self._takeovers: set[asyncio.Task[None]] = set()
        self._redis_run: str | None = None  # Redis's run id: a new one means it restarted
        self.bus.on_dead = self._on_dead
        self.router = Router(client, DEFAULT_POOL, settings.affinity)

    def summary(self) -> dict[str, Any]:
        return {"events": self.events, "answered": self.answered, "dead_lettered": self.bus.dead_lettered}

    async def run(self, stop: asyncio.Event) -> None:
        await self.bus.ensure_group(INGRESS, COORDINATOR_GROUP)
        await asyncio.gather(self._intake(stop), self._inboxes(stop), self._leases(stop), self._routes(stop))

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
            submission.validate(req, self.settings.limits)
        except SubmissionError as exc:
            await self.bus.dead_letter(d, COORDINATOR_GROUP, str(exc))
            return
        with structlog.contextvars.bound_contextvars(query_id=req.query_id, trace_id=req.trace_id):
            try:
                await self.r.set(query_request(req.query_id), encode(req), nx=True)
                await self.adopt(req)
            except (RedisConnectionError, RedisTimeoutError, ResponseError):
                raise  # Redis's trouble, not the message's: retried
            except Exception as exc:  # the question itself cannot be searched: park it
                self.log.error("question_unsearchable", error=repr(exc))
                await self.bus.dead_letter(d, COORDINATOR_GROUP, "the question could not be searched")
                return
        await self.bus.ack(d, COORDINATOR_GROUP)

    async def _on_dead(self, message: Message, reason: str) -> None:
        """A submission given up on: answer it as failed (its client is told, its in-flight
        place freed) — unless the id belongs to another, valid request."""
        if not isinstance(message, SubmitQuestionRequest):
            return
        qid = message.query_id
        held: Any = await self.r.get(query_request(qid))
        if held is not None:
            try:
                if decode(query_request(qid), held).msg_id != message.msg_id:
                    return
            except ProtocolError:
                pass
        answer = AnswerResult(msg_id=f"{qid}/answer", query_id=qid, answer=None, error=f"rejected: {reason}")
        keys = [
            reply_key(qid),
            ANSWERS,
            INGRESS_IN_FLIGHT,
            client_in_flight(message.client),
            query_request(qid),
            COORDINATORS_ACTIVE,
            query_lease(qid),
            query_epoch(qid),
            query_inbox(qid),
            query_checkpoint(qid),
        ]
        await self.r.eval(scripts.REJECT, len(keys), *keys, encode(answer), qid, self.settings.result_ttl_s)
        self.log.warning("question_rejected", query_id=qid, reason=reason)

    async def adopt(self, req: SubmitQuestionRequest) -> bool:
        """Take the lease on a query and run it from its inbox (new or interrupted)."""
        qid = req.query_id
        if qid in self.queries or qid in self._adopting or await self.r.exists(reply_key(qid)):
            return False
        self._adopting.add(qid)
        try:
            return await self._adopt(req)
        finally:
            self._adopting.discard(qid)

    async def _adopt(self, req: SubmitQuestionRequest) -> bool:
        qid = req.query_id
        lease_ms = int(self.settings.lease_s * 1000)
        expiry = int(time.time() * 1000) + lease_ms
        keys = [query_lease(qid), query_epoch(qid), COORDINATORS_ACTIVE]
        epoch = await self.r.eval(scripts.ACQUIRE, len(keys), *keys, self.owner, lease_ms, expiry, qid)
        if not epoch:
            return False
        self._released.pop(qid, None)  # ours again: a Redis restart is handled as for any held query
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
        query = _Query(req, machine, int(epoch), started_wall=self._now(), renewed=self._now())
        # Held (and renewed) from now on; the live reader joins once the replay is done and
        # goes on from the last entry applied here.
        self.queries[qid] = query
        QUERIES_OWNED.labels(self.owner).set(len(self.queries))
        self.log.info("query_adopted", query_id=qid, epoch=int(epoch))
        try:
            await self._execute(query, machine.start(0.0))
            entries: Any = await self.r.xrange(query_inbox(qid), "-", "+")
            await self._apply(query, entries)  # a previous owner's results
        except _Unpublishable as exc:
            await self._fail(query, str(exc))
        except BaseException:
            self._release(query)
            raise
        query.replaying = False
        return True

    # ------------------------------------------------------------------ inbox events
    async def _inboxes(self, stop: asyncio.Event) -> None:
        async def once() -> None:
            if not self.queries:
                await asyncio.sleep(self.settings.block_ms / 1000)
                return
            fresh = self._now() - self.settings.lease_s
            streams: dict[Any, Any] = {
                query_inbox(q): s.last_id
                for q, s in self.queries.items()
                if s.renewed > fresh and not s.replaying
            }
            if not streams:  # every lease is unconfirmed (we stalled): wait for the renewals
                await asyncio.sleep(self.settings.block_ms / 1000)
                return
            replies: Any = await self.r.xread(streams, count=256, block=self.settings.block_ms)
            for stream, entries in replies or []:
                qid = query_inbox.parse(stream)
                query = self.queries.get(qid) if qid is not None else None
                if query is None:
                    continue
                try:
                    await self._apply(query, entries)
                except _Unpublishable as exc:
                    await self._fail(query, str(exc))
                except Exception:
                    # Commands the machine issued may not have been published: its memory is
                    # ahead of Redis. Let the query go: whoever adopts it next replays the
                    # inbox and re-issues them (publishing is idempotent).
                    self._release(query)
                    raise
            if time.monotonic() - self._stats_sent >= STATS_EVERY_S:
                self._stats_sent = time.monotonic()
                await self._publish_stats()

        await loop_forever(stop, once, self.log, self.bus.reconnected)

    async def _apply(self, query: _Query, entries: Any) -> None:
        stream = query_inbox(query.request.query_id)
        batch: list[Effect] = []
        for entry_id, fields in entries:
            entry = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
            if not entry_after(entry, query.last_id):
                continue  # applied already: an entry is applied once
            query.last_id = entry
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
            await self._execute(query, commands, batch)
            if query.machine.done:
                break
        # One round trip for every publish of the batch, before the checkpoint that records
        # the entries as applied (a crash in between replays them; publishing is idempotent).
        await self._flush(batch)
        if not query.machine.done:
            await self._checkpoint(query)

    # ------------------------------------------------------------------ effects
    async def _execute(
        self, query: _Query, commands: list[Command], batch: list[Effect] | None = None
    ) -> None:
        """Carry out `commands`' effects. Publishes and cancel marks join `batch` (sent in one
        round trip by `_flush`, before anything that depends on them); without a batch they
        are sent at once. An answer flushes first."""
        out = Outgoing(query.request, query.epoch, query.machine, self.settings.content)
        own = batch is None
        pending: list[Effect] = [] if batch is None else batch
        for effect in effects(out, commands):
            if isinstance(effect, Answer):
                await self._flush(pending)
                await self._answer(query, effect)
            else:
                pending.append(effect)
        if own:
            await self._flush(pending)

    async def _flush(self, pending: list[Effect]) -> None:
        items: list[tuple[str, Message]] = []
        marks: list[tuple[str, int]] = []
        for effect in pending:
            if isinstance(effect, Publish):
                stream = effect.stream
                if isinstance(effect.message, GenerateRequest):  # to the query's worker (affinity)
                    stream = self.router.stream(effect.message.query_id)
                items.append((stream, effect.message))
            elif isinstance(effect, MarkCancelled):
                marks.append((cancel_key(effect.job_id), 3600))
        pending.clear()
        try:
            await self.bus.publish_many(items, marks)
        except ProtocolError as exc:  # e.g. the path's text past the message limit
            names = ", ".join(sorted({type(m).__name__ for _, m in items}))
            raise _Unpublishable(f"{names}: {exc}") from None

    async def _answer(self, query: _Query, effect: Answer) -> None:
        qid, m = query.request.query_id, query.machine
        keys = [
            query_lease(qid),
            query_epoch(qid),
            reply_key(qid),
            ANSWERS,
            INGRESS_IN_FLIGHT,
            COORDINATORS_ACTIVE,
            client_in_flight(query.request.client),
            query_inbox(qid),
            query_request(qid),
            query_checkpoint(qid),
        ]
        correct = await self._grade(effect.message.answer, query.request.reference_answer)
        # The latency is an I/O-time measurement: stamped here, as the answer is written.
        answer = msgspec.structs.replace(
            effect.message, latency_s=self._now() - query.started_wall, correct=correct
        )
        ttl = self.settings.result_ttl_s
        if not await self.r.eval(
            scripts.ANSWER, len(keys), *keys, self.owner, query.epoch, encode(answer), qid, ttl
        ):
            self._lost(qid, query)  # another coordinator holds the query now: it answers
            return
        self.queries.pop(qid, None)
        self._released.pop(qid, None)
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
            limit = min(GRADE_TIMEOUT_S, self.settings.lease_s / 3)
            return await asyncio.wait_for(asyncio.to_thread(grade, answer, reference), limit)
        except TimeoutError:
            self.log.warning("grading_timed_out", reference=reference[:80])
            return None

    async def _checkpoint(self, query: _Query) -> None:
        qid, m = query.request.query_id, query.machine
        keys = [query_lease(qid), query_epoch(qid), query_checkpoint(qid)]
        # No tree digest here: hashing the whole tree on every inbox batch cost more than the
        # events themselves (the answer carries the digest).
        args = (self.owner, query.epoch, query.last_id, len(m.tree))
        if not await self.r.eval(scripts.CHECKPOINT, len(keys), *keys, *args):
            self._lost(qid, query)

    async def _fail(self, query: _Query, reason: str) -> None:
        """The query cannot go on (a job it needs cannot be sent): answer it as failed."""
        req = query.request
        self.log.error("query_failed", query_id=req.query_id, reason=reason)
        message = AnswerResult(
            msg_id=f"{req.query_id}/answer", query_id=req.query_id, trace_id=req.trace_id,
            epoch=query.epoch, answer=None, error=f"failed: {reason}",
        )  # fmt: skip
        await self._answer(query, Answer(message))

    def _release(self, query: _Query) -> None:
        """Let a query go without touching Redis (it may be unreachable): its lease lapses and
        whoever adopts it next replays its inbox."""
        if self.queries.get(query.request.query_id) is query:
            del self.queries[query.request.query_id]
            self._released[query.request.query_id] = (time.monotonic(), query)
            self.log.warning("query_released", query_id=query.request.query_id)

    # ------------------------------------------------------------------ leases
    async def _routes(self, stop: asyncio.Event) -> None:
        async def once() -> None:
            await self.router.refresh(self.queries.keys())
            await asyncio.sleep(REFRESH_S)

        await loop_forever(stop, once, self.log, self.bus.reconnected)

    async def _leases(self, stop: asyncio.Event) -> None:
        await loop_forever(stop, self._lease_round, self.log, self.bus.reconnected)

    async def _lease_round(self) -> None:
        """Renew our leases; adopt queries whose owner stopped renewing (the reaper)."""
        lease_ms = int(self.settings.lease_s * 1000)
        await asyncio.sleep(self.settings.lease_s / 3)
        await self._check_redis_restart()
        now_ms = int(time.time() * 1000)
        for qid, query in list(self.queries.items()):
            keys = [query_lease(qid), query_epoch(qid), COORDINATORS_ACTIVE]
            epoch = await self.r.eval(
                scripts.RENEW, len(keys), *keys, self.owner, lease_ms, now_ms + lease_ms, qid
            )
            if epoch and int(epoch) == query.epoch:
                query.renewed = self._now()
            elif not await self.r.exists(query_epoch(qid), reply_key(qid)):
                self.queries.pop(qid, None)  # Redis lost the query's state
                self._spawn(self._search_again(query))
            else:
                self._lost(qid, query)
        # A coordinator that died between reading a question and taking its lease left the
        # question pending in the ingress group: take it over.
        for d in await self.bus.reclaim(INGRESS, COORDINATOR_GROUP, 2 * lease_ms):
            await self._on_submitted(d)
        await self.bus.trim_now_and_then(INGRESS)
        expired: Any = await self.r.zrangebyscore(COORDINATORS_ACTIVE, 0, now_ms)
        for raw in expired:
            await self._reap(raw.decode())

    async def _reap(self, qid: str) -> None:
        """Take over `qid` if its owner stopped renewing — in a task of its own, so a long
        replay never holds up the renewal of the leases we have."""
        if qid in self.queries or qid in self._adopting or await self.r.exists(query_lease(qid)):
            return
        key = query_request(qid)
        blob: Any = await self.r.get(key)
        if blob is None or await self.r.exists(reply_key(qid)):
            await self.r.zrem(COORDINATORS_ACTIVE, qid)  # answered or expired: nothing to reap
            return
        try:
            req = decode(key, blob)
        except ProtocolError as exc:  # e.g. written by a newer version: not ours to run
            self.log.error("request_unreadable", query_id=qid, error=str(exc))
            await self.r.zrem(COORDINATORS_ACTIVE, qid)
            return
        if isinstance(req, SubmitQuestionRequest):
            self._spawn(self._take_over(req))

    async def _take_over(self, req: SubmitQuestionRequest) -> None:
        try:
            if await self.adopt(req):
                self.log.info("query_taken_over", query_id=req.query_id)
        except (RedisConnectionError, RedisTimeoutError, ResponseError) as exc:
            self.log.warning("takeover_failed", query_id=req.query_id, error=str(exc))
        except Exception as exc:  # the question itself cannot be searched
            self.log.error("question_unsearchable", query_id=req.query_id, error=repr(exc))
            await self._on_dead(req, "the question could not be searched")

    def _spawn(self, work: Any) -> None:
        task = asyncio.create_task(work)
        self._takeovers.add(task)
        task.add_done_callback(self._takeovers.discard)

    async def _check_redis_restart(self) -> None:
        """A Redis that restarted may have lost its last writes (the AOF's fsync window):
        jobs we published may be gone. Let every query go and adopt it again from its
        inbox — the replay re-publishes exactly what is missing."""
        info: Any = await self.r.info("server")
        run = str(info.get("run_id", ""))
        held = list(self.queries.items())  # before any search-again below adopts one
        await self._search_lost_releases()
        if self._redis_run is not None and run != self._redis_run and held:
            self.log.warning("redis_restarted", queries=len(held))
            for qid, query in held:
                if not await self.r.exists(query_epoch(qid), reply_key(qid)):
                    self.queries.pop(qid, None)  # lost with Redis's data: only we hold the request
                    self._spawn(self._search_again(query))
                    continue
                self._release(query)
                keys = [query_lease(qid), COORDINATORS_ACTIVE]
                await self.r.eval(scripts.RELEASE, len(keys), *keys, self.owner, qid)
        self._redis_run = run

    async def _search_lost_releases(self) -> None:
        """A query we let go while Redis was unreachable is searched again from the request we
        kept if Redis came back without it (no request, no answer: it restarted without
        persistence), whoever noticed the restart first; kept RELEASED_KEPT_S, then forgotten."""
        horizon = time.monotonic() - RELEASED_KEPT_S
        self._released = {q: v for q, v in self._released.items() if v[0] > horizon}
        for qid, (_, query) in list(self._released.items()):
            if qid in self.queries or qid in self._adopting:
                self._released.pop(qid, None)
            elif not await self.r.exists(query_request(qid), reply_key(qid)):
                self._released.pop(qid, None)
                self._spawn(self._search_again(query))  # its request went with Redis's data

    async def _publish_stats(self) -> None:
        """What the budget allocator needs per speculating query (C_q, P_q, S_KV, load)."""
        for qid, query in list(self.queries.items()):
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
                worker=self.router.owner(qid),
            )
            await self.r.xadd(QUERY_STATS, {"e": encode(stats)}, maxlen=10_000, approximate=True)

    async def _search_again(self, query: _Query) -> None:
        """Redis lost this query (no epoch, no answer: it restarted without persistence).
        The request is here: store it again and search it from the start — the same seeds
        give the same tree."""
        req = query.request
        self.log.warning("query_state_lost", query_id=req.query_id)
        now_ms = int(time.time() * 1000)
        await self.r.set(query_request(req.query_id), encode(req), nx=True)
        await self.r.zadd(INGRESS_IN_FLIGHT, {req.query_id: now_ms})
        await self.r.zadd(client_in_flight(req.client), {req.query_id: now_ms})
        await self.adopt(req)

    def _lost(self, qid: str, query: _Query) -> None:
        """Another coordinator holds the query now (our lease expired): stop working on it."""
        if self.queries.get(qid) is query:
            del self.queries[qid]
            self.log.warning("lease_lost", query_id=qid)


RELEASED_KEPT_S = 60.0  # how long a released query's request is kept for a Redis restart


class _Unpublishable(Exception):
    """A command whose message cannot be encoded (over the size limit): the query fails."""


def main() -> int:
    return run_service("coordinator", Coordinator)
