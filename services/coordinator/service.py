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

Its loop is four rounds, each a named method run by `loop_forever`: `intake_round` (new
questions), `inbox_round` (the results of every query it holds), `lease_round` (renewals,
Redis-restart recovery, reaping) and `route_round` (the live generators). Its Redis state is
`store.QueryStore`'s, its recovery `recovery.Recovery`'s.

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
from collections.abc import Coroutine
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
    NodeEvent,
    ProtocolError,
    SubmissionError,
    SubmitQuestionRequest,
    decode,
    submission,
)
from spex.proto.codec import Envelope
from spex.proto.names import (
    ANSWERS,
    COORDINATOR_GROUP,
    DEFAULT_POOL,
    GEN_CONTROL,
    INGRESS,
    QUERY_STATS,
    query_cancelled,
    query_inbox,
)
from spex.services.coordinator.handlers import (
    EVENT_HANDLERS,
    Answer,
    Effect,
    MarkCancelled,
    Outgoing,
    Publish,
    effects,
)
from spex.services.coordinator.query import COUNTED, HeldQuery, Unpublishable, graded, new_machine, stats
from spex.services.coordinator.recovery import Recovery
from spex.services.coordinator.routing import REFRESH_S, Router
from spex.services.coordinator.store import Entries, QueryStore
from spex.shared.core.commands import Command
from spex.shared.runtime.bus import TRIM_EVERY_S, Bus, Delivery, ScriptCall, entry_after
from spex.shared.runtime.metrics import (
    BUS_HOP,
    EVENTS,
    QUERIES,
    QUERIES_OWNED,
    QUERY_LATENCY,
    SPECULATION,
    TOKENS,
)
from spex.shared.runtime.service import loop_forever, run_service
from spex.shared.runtime.settings import Settings
from spex.shared.runtime.tracing import query_span

__all__ = ["Coordinator", "main"]

STATS_EVERY_S = 0.05  # how often per-query stats go to the allocator
TREE_EVERY_S = 0.1  # how often, at most, a query's tree changes go to its watchers
GRADE_TIMEOUT_S = 10.0  # math-verify on one answer (and never more than a third of the lease)
INBOX_BATCH = 256  # inbox entries read per XREAD
# Streams read as they come (no group), trimmed by age: gen:control's cancels and promotions
# matter to a generator reading live (one away longer loses some: work, not correctness);
# stats:queries to the allocator's next round.
CONTROL_KEEP_S = 60.0
STATS_KEEP_S = 60.0


class Coordinator:
    def __init__(self, client: aioredis.Redis, settings: Settings) -> None:
        self.bus = Bus(client, settings.consumer, settings.max_deliveries)
        self.bus.on_dead = self._on_dead
        self.settings = settings
        self.owner = settings.consumer
        self.store = QueryStore(client, settings.consumer, settings.lease_s, settings.result_ttl_s)
        self.recovery = Recovery(self.store)
        self.router = Router(client, DEFAULT_POOL, settings.affinity)
        self.queries: dict[str, HeldQuery] = {}
        self.log = structlog.get_logger().bind(service="coordinator", consumer=settings.consumer)
        self.events = 0
        self.answered = 0
        self._stats_sent = 0.0
        self._adopting: set[str] = set()
        self._fan_out_trimmed = -1e9  # monotonic: when gen:control, stats:queries and answers were trimmed
        self._tasks: set[asyncio.Task[None]] = set()  # takeovers and searches again

    def summary(self) -> dict[str, int]:
        return {"events": self.events, "answered": self.answered, "dead_lettered": self.bus.dead_lettered}

    async def run(self, stop: asyncio.Event) -> None:
        await self.bus.ensure_group(INGRESS, COORDINATOR_GROUP)
        rounds = [self.intake_round, self.inbox_round, self.lease_round, self.route_round]
        await asyncio.gather(*(loop_forever(stop, body, self.log, self.bus.reconnected) for body in rounds))

    def _now(self) -> float:
        return time.monotonic()

    # ------------------------------------------------------------------ the four rounds
    async def intake_round(self) -> None:
        """New questions from the ingress stream: each stored and adopted."""
        for d in await self.bus.read([INGRESS], COORDINATOR_GROUP, count=8, block_ms=self.settings.block_ms):
            await self._on_submitted(d)

    async def inbox_round(self) -> None:
        """The new inbox entries of every query we hold (leases confirmed, replays done)."""
        if not self.queries:
            await asyncio.sleep(self.settings.block_ms / 1000)
            return
        fresh = self._now() - self.settings.lease_s
        after = {q: h.last_id for q, h in self.queries.items() if h.renewed > fresh and not h.replaying}
        if not after:  # every lease is unconfirmed (we stalled): wait for the renewals
            await asyncio.sleep(self.settings.block_ms / 1000)
            return
        # Every query's events of the read, then one round trip for all their publishes and
        # checkpoints (each query's publishes before its checkpoint).
        batches: dict[str, list[Effect]] = {}
        try:
            for qid, entries in await self.store.read_inboxes(after, INBOX_BATCH, self.settings.block_ms):
                query = self.queries.get(qid)
                if query is None:
                    continue
                try:
                    await self._apply_events(query, entries, batches.setdefault(qid, []))
                except Unpublishable as exc:  # a message of its own too large: it fails alone
                    batches.pop(qid, None)
                    await self._fail(query, str(exc))
                except Exception:
                    # Commands the machine issued may not have been published: its memory is
                    # ahead of Redis. Let the query go: whoever adopts it next replays the
                    # inbox and re-issues them (publishing is idempotent).
                    batches.pop(qid, None)
                    self._release(query)
                    raise
        finally:
            await self._settle(batches)
        if self._now() - self._stats_sent >= STATS_EVERY_S:
            self._stats_sent = self._now()
            await self._publish_stats()
        due = self._now() - TREE_EVERY_S
        for query in [q for q in self.queries.values() if q.tree_due and q.tree_sent <= due]:
            await self._observe(query)  # changes that waited for their turn

    async def lease_round(self) -> None:
        """Renew our leases; recover from a Redis restart; adopt queries whose owner stopped
        renewing (the reaper)."""
        await asyncio.sleep(self.settings.lease_s / 3)
        await self.recover()
        for qid, query in list(self.queries.items()):
            epoch = await self.store.renew(qid)
            if epoch and epoch == query.epoch:
                query.renewed = self._now()
            elif not await self.store.known(qid):
                self._let_go(qid)  # Redis lost the query's state
                self._spawn(self._search_again(query))
            else:
                self._lost(query)
        # A coordinator that died between reading a question and taking its lease left the
        # question pending in the ingress group: take it over.
        for d in await self.bus.reclaim(INGRESS, COORDINATOR_GROUP, 2 * self.store.lease_ms):
            await self._on_submitted(d)
        await self.bus.trim_now_and_then(INGRESS)
        if self._now() - self._fan_out_trimmed >= TRIM_EVERY_S:
            self._fan_out_trimmed = self._now()
            keep = {
                GEN_CONTROL: CONTROL_KEEP_S,
                QUERY_STATS: STATS_KEEP_S,
                ANSWERS: self.settings.result_ttl_s,
            }
            await self.store.trim_fan_out(keep)
        for qid in await self.store.expired():
            await self._reap(qid)

    async def route_round(self) -> None:
        """Re-read the live generators and their loads (where each job goes)."""
        await self.router.refresh(self.queries.keys())
        await asyncio.sleep(REFRESH_S)

    # ------------------------------------------------------------------ adoption
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
                await self.store.keep_request(req)
                await self.adopt(req)
            except (RedisConnectionError, RedisTimeoutError, ResponseError):
                raise  # Redis's trouble, not the message's: retried
            except Exception as exc:  # the question itself cannot be searched: park it
                self.log.error("question_unsearchable", error=repr(exc))
                await self.bus.dead_letter(d, COORDINATOR_GROUP, "the question could not be searched")
                return
        await self.bus.ack(d, COORDINATOR_GROUP)

    async def _on_dead(self, message: Message | Envelope, reason: str) -> None:
        """A submission given up on: answer it as failed (its client is told, its in-flight
        place freed) — unless the id belongs to another, valid request."""
        if not isinstance(message, SubmitQuestionRequest):
            return
        try:
            held = await self.store.request(message.query_id)
            if held is not None and held.msg_id != message.msg_id:
                return
        except ProtocolError:
            pass
        await self.store.reject(message, reason)
        self.log.warning("question_rejected", query_id=message.query_id, reason=reason)

    async def adopt(self, req: SubmitQuestionRequest) -> bool:
        """Take the lease on a query and run it from its inbox (new or interrupted)."""
        qid = req.query_id
        if qid in self.queries or qid in self._adopting or await self.store.answered(qid):
            return False
        self._adopting.add(qid)
        try:
            return await self._adopt(req)
        finally:
            self._adopting.discard(qid)

    async def _adopt(self, req: SubmitQuestionRequest) -> bool:
        epoch = await self.store.acquire(req.query_id)
        if not epoch:
            return False
        self.recovery.forget(req.query_id)  # ours again: a Redis restart is handled as for any held query
        now = self._now()
        query = HeldQuery(req, new_machine(req, self.settings), epoch, started_wall=now, renewed=now)
        attributes: dict[str, str | int] = {
            "spex.query_id": req.query_id, "spex.algorithm": req.algorithm, "spex.target": req.target,
            "spex.mode": req.mode, "spex.epoch": epoch, "spex.coordinator": self.owner,
        }  # fmt: skip
        query.span = query_span(req.trace_id, req.query_id, epoch, attributes)
        # Held (and renewed) from now on; the live reader joins once the replay is done and
        # goes on from the last entry applied here.
        self._hold(query)
        self.log.info("query_adopted", query_id=req.query_id, epoch=epoch)
        try:
            await self._execute(query, query.machine.start(0.0))
            await self._observe(query)
            await self._apply(query, await self.store.inbox(req.query_id))  # a previous owner's results
        except Unpublishable as exc:
            await self._fail(query, str(exc))
        except BaseException:
            self._release(query)
            raise
        query.replaying = False
        return True

    # ------------------------------------------------------------------ inbox events
    async def _apply(self, query: HeldQuery, entries: Entries) -> None:
        """Apply `entries` and settle them (publish what they issued, checkpoint)."""
        batch: list[Effect] = []
        try:
            await self._apply_events(query, entries, batch)
        finally:
            await self._settle({query.query_id: batch})

    async def _settle(self, batches: dict[str, list[Effect]]) -> None:
        """Publish each query's effects of `batches` and record its entries as applied (the
        checkpoint, after its publishes: a crash in between replays them, and publishing is
        idempotent) in one round trip; then the queries' watchers. A query whose messages
        cannot be published (too large) fails alone; if Redis fails, every query of the batch
        is let go (whoever adopts it replays its inbox)."""
        held = [self.queries[q] for q in batches if q in self.queries and not self.queries[q].machine.done]
        checkpoints = [
            self.store.checkpoint_call(q.query_id, q.epoch, q.last_id, len(q.machine.tree)) for q in held
        ]
        effects_all = [effect for batch in batches.values() for effect in batch]
        if not effects_all and not checkpoints:
            return
        try:
            try:
                confirmed = list(zip(held, await self._flush(effects_all, checkpoints), strict=True))
            except Unpublishable:
                confirmed = await self._settle_one_by_one(batches, held)
        except BaseException:
            for query in held:
                self._release(query)
            raise
        for query, ok in confirmed:
            if not ok:
                self._lost(query)
            elif query.query_id in self.queries:
                await self._observe(query)

    async def _settle_one_by_one(
        self, batches: dict[str, list[Effect]], held: list[HeldQuery]
    ) -> list[tuple[HeldQuery, bool]]:
        """A batch with a message too large to publish: each query's effects alone, and the
        one whose are too large fails."""
        failed: set[str] = set()
        for qid, batch in batches.items():
            try:
                await self._flush(batch)
            except Unpublishable as exc:
                query = self.queries.get(qid)
                if query is not None and not query.machine.done:
                    failed.add(qid)
                    await self._fail(query, str(exc))
        confirmed = []
        for query in held:
            if query.query_id not in failed:
                nodes = len(query.machine.tree)
                ok = await self.store.checkpoint(query.query_id, query.epoch, query.last_id, nodes)
                confirmed.append((query, ok))
        return confirmed

    async def _apply_events(self, query: HeldQuery, entries: Entries, batch: list[Effect]) -> None:
        """Apply `entries` (those not applied yet) to the query's machine; what they issue
        joins `batch` (an answer is sent at once, with what is pending before it)."""
        stream = query_inbox(query.query_id)
        for entry_id, fields in entries:
            entry = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
            if not entry_after(entry, query.last_id):
                continue  # applied already: an entry is applied once
            query.last_id = entry
            payload = (fields or {}).get(b"e", b"")
            try:
                message = decode(stream, payload)
            except ProtocolError as exc:
                await self.store.park(query.query_id, entry, str(exc), payload)
                self.bus.dead_lettered += 1
                continue
            handler = EVENT_HANDLERS.get(type(message))
            if handler is None:
                continue
            self.events += 1
            kind = type(message).__name__
            EVENTS.labels("coordinator", self.owner, kind).inc()
            if message.created_ms and not query.replaying:
                BUS_HOP.labels("coordinator", kind).observe(max(0.0, time.time() - message.created_ms / 1000))
            try:
                commands = handler(query.machine, message, self._now())
            except Exception as exc:  # a bad event must not take the query (or the service) down
                self.log.error("event_failed", query_id=query.query_id, error=repr(exc))
                continue
            await self._execute(query, commands, batch)
            if query.machine.done:
                break

    # ------------------------------------------------------------------ effects
    async def _execute(
        self, query: HeldQuery, commands: list[Command], batch: list[Effect] | None = None
    ) -> None:
        """Carry out `commands`' effects. Publishes and cancel marks join `batch` (sent in one
        round trip by `_flush`, before anything that depends on them); without a batch they
        are sent at once. An answer flushes first."""
        s = self.settings
        out = Outgoing(
            query.request, query.epoch, query.machine, s.content, s.sampling_temperature,
            s.step_split, s.min_step_tokens,
        )  # fmt: skip
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

    async def _flush(self, pending: list[Effect], then: list[ScriptCall] | None = None) -> list[Any]:
        """Send `pending`'s publishes and cancel marks, then the script calls `then`, in one
        round trip: what each call returned."""
        items: list[tuple[str, Message]] = []
        marks: list[tuple[str, str]] = []
        for effect in pending:
            if isinstance(effect, Publish):
                stream = effect.stream
                if isinstance(effect.message, GenerateRequest):  # to the query's worker (affinity)
                    stream = self.router.stream(effect.message.query_id)
                items.append((stream, effect.message))
            elif isinstance(effect, MarkCancelled):
                marks.append((query_cancelled(effect.query_id), effect.job_id))
        pending.clear()
        try:
            keep = {GEN_CONTROL: CONTROL_KEEP_S}
            _, done = await self.bus.publish_many(items, marks, keep, then=then or ())
        except ProtocolError as exc:  # e.g. the path's text past the message limit
            names = ", ".join(sorted({type(m).__name__ for _, m in items}))
            raise Unpublishable(f"{names}: {exc}") from None
        return done

    async def _answer(self, query: HeldQuery, effect: Answer) -> None:
        qid, m = query.query_id, query.machine
        limit_s = min(GRADE_TIMEOUT_S, self.settings.lease_s / 3)
        correct = await graded(effect.message.answer, query.request.reference_answer, limit_s, self.log)
        # The latency is an I/O-time measurement: stamped here, as the answer is written.
        answer = msgspec.structs.replace(
            effect.message, latency_s=self._now() - query.started_wall, correct=correct
        )
        await self._observe(query, final=True)  # the final tree, before the answer that ends it
        if not await self.store.answer(query.request, query.epoch, answer):
            self._lost(query)  # another coordinator holds the query now: it answers
            return
        req = query.request
        QUERY_LATENCY.labels(req.algorithm, req.mode).observe(answer.latency_s)
        outcome = "cancelled" if m.cancelled else "failed" if answer.error else "answered"
        outcome = "early_stopped" if m.early_stopped else outcome
        QUERIES.labels(outcome).inc()
        if query.span is not None:
            query.span.set_attributes({
                "spex.outcome": outcome, "spex.answer": str(answer.answer), "spex.nodes": answer.nodes,
                "spex.tokens": answer.tokens_generated, "spex.speculative.issued": m.stats.spec_issued,
                "spex.speculative.adopted": m.stats.spec_adopted,
            })  # fmt: skip
        self._let_go(qid)
        self.recovery.forget(qid)
        self.answered += 1
        self.log.info(
            "query_answered", query_id=qid, answer=m.answer, nodes=effect.message.nodes, cancelled=m.cancelled
        )

    async def _fail(self, query: HeldQuery, reason: str) -> None:
        """The query cannot go on (a job it needs cannot be sent): answer it as failed."""
        req = query.request
        self.log.error("query_failed", query_id=req.query_id, reason=reason)
        message = AnswerResult(
            msg_id=f"{req.query_id}/answer", query_id=req.query_id, trace_id=req.trace_id,
            epoch=query.epoch, answer=None, error=f"failed: {reason}",
        )  # fmt: skip
        await self._answer(query, Answer(message))

    async def _observe(self, query: HeldQuery, final: bool = False) -> None:
        """What watchers and the metrics see of a query: the growth of its speculation counts,
        and the nodes of its tree that changed (its tree stream) — at most every TREE_EVERY_S
        (looking costs a pass over the tree; `inbox_round` sends what waited), and always the
        final tree."""
        m, req = query.machine, query.request
        counts = tuple(getattr(m.stats, name) for name in COUNTED)
        grown = {name: now - before for name, now, before in zip(COUNTED, counts, query.counted, strict=True)}
        query.counted = counts
        if query.replaying and query.epoch > 1:
            grown = dict.fromkeys(COUNTED, 0)  # a previous owner's work, counted by it
        for name, outcome in (("spec_issued", "issued"), ("spec_adopted", "adopted"),
                              ("spec_cancelled", "cancelled"), ("spec_evicted", "evicted")):  # fmt: skip
            if grown[name] > 0:
                SPECULATION.labels(outcome).inc(grown[name])
        # Wasted is speculative − consumed, derived where it is read: a speculative node counts
        # as generated when it finishes and as consumed only when the search takes it, later.
        for kind, n in (("generated", grown["tokens_generated"]), ("speculative", grown["spec_tokens"]),
                        ("consumed", grown["spec_tokens_consumed"])):  # fmt: skip
            if n > 0:
                TOKENS.labels(kind).inc(n)
        if not self.settings.tree_events:
            return
        if not final and self._now() - query.tree_sent < TREE_EVERY_S:
            query.tree_due = True
            return
        query.tree_sent, query.tree_due = self._now(), False
        # Seconds since the question was submitted: the same origin for whoever owns it.
        t_s = round(time.time() - req.created_ms / 1000, 4) if req.created_ms else 0.0
        events = [
            NodeEvent(
                msg_id=f"{req.query_id}/node/{v.id}/{m.events}", query_id=req.query_id, trace_id=req.trace_id,
                node_id=v.id, parent_id=v.parent, index=v.index, action=v.action, depth=v.depth,
                state=v.state, generated=v.generated, running=v.running, text=v.text if new_text else "",
                tokens=v.tokens,
                answer=v.answer, reward=v.reward, finish_reason=v.finish_reason, t_s=t_s,
            )  # fmt: skip
            for v, new_text in query.watch.changes(m)
        ]
        await self.store.publish_tree(req.query_id, events)

    # ------------------------------------------------------------------ holding and letting go
    def _hold(self, query: HeldQuery) -> None:
        self.queries[query.query_id] = query
        QUERIES_OWNED.labels(self.owner).set(len(self.queries))

    def _let_go(self, qid: str) -> None:
        query = self.queries.pop(qid, None)
        QUERIES_OWNED.labels(self.owner).set(len(self.queries))
        if query is not None and query.span is not None:
            if qid in self.queries or not query.machine.done:
                query.span.set_attribute("spex.outcome", "let go")  # another coordinator goes on
            query.span.end()
            query.span = None

    def _release(self, query: HeldQuery) -> None:
        """Let a query go without touching Redis (it may be unreachable): its lease lapses and
        whoever adopts it next replays its inbox."""
        if self.queries.get(query.query_id) is query:
            self._let_go(query.query_id)
            self.recovery.remember(query)
            self.log.warning("query_released", query_id=query.query_id)

    def _lost(self, query: HeldQuery) -> None:
        """Another coordinator holds the query now (our lease expired): stop working on it."""
        if self.queries.get(query.query_id) is query:
            self._let_go(query.query_id)
            self.log.warning("lease_lost", query_id=query.query_id)

    # ------------------------------------------------------------------ reaping and recovery
    async def _reap(self, qid: str) -> None:
        """Take over `qid` if its owner stopped renewing — in a task of its own, so a long
        replay never holds up the renewal of the leases we have."""
        if qid in self.queries or qid in self._adopting or await self.store.leased(qid):
            return
        try:
            req = await self.store.request(qid)
        except ProtocolError as exc:  # e.g. written by a newer version: not ours to run
            self.log.error("request_unreadable", query_id=qid, error=str(exc))
            await self.store.not_active(qid)
            return
        if req is None or await self.store.answered(qid):
            await self.store.not_active(qid)  # answered or expired: nothing to reap
            return
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

    async def recover(self) -> None:
        """After a Redis restart, let every held query go and adopt it again from its inbox
        (or search it again if Redis lost it); search again the released queries Redis lost."""
        held = list(self.queries.values())  # before any search-again below adopts one
        for query in await self.recovery.lost_releases(lambda q: q in self.queries or q in self._adopting):
            self._spawn(self._search_again(query))  # its request went with Redis's data
        plan = await self.recovery.after_restart(held)
        if plan.search_again or plan.adopt_again:
            self.log.warning("redis_restarted", queries=len(held))
        for query in plan.search_again:
            self._let_go(query.query_id)  # lost with Redis's data: only we hold the request
            self._spawn(self._search_again(query))
        for query in plan.adopt_again:
            self._release(query)
            await self.store.release(query.query_id)
        # Only now: a round that failed midway (Redis still loading, gone again) sees the
        # restart again next time and finishes the plan (releasing twice is harmless).
        self.recovery.handled(plan)

    async def _search_again(self, query: HeldQuery) -> None:
        """Redis lost this query (no epoch, no answer: it restarted without persistence).
        The request is here: store it again and search it from the start — the same seeds
        give the same tree."""
        self.log.warning("query_state_lost", query_id=query.query_id)
        await self.store.in_flight_again(query.request)
        await self.adopt(query.request)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _publish_stats(self) -> None:
        """What the budget allocator needs per speculating query (C_q, P_q, S_KV, load)."""
        held = [q for q in self.queries.values() if q.speculates]
        await self.store.publish_stats([stats(q, self.router.owner(q.query_id)) for q in held])


def main() -> int:
    return run_service("coordinator", Coordinator)
