"""Drives the queries a coordinator holds: applies their inbox entries to their machines,
carries out the effects of what the machines command (`handlers`), and writes their answers.

The effects of one inbox read go out in one round trip: every query's dispatches, publishes
and cancel marks, then its checkpoint (the last entry applied). A crash in between replays
the entries, and publishing is idempotent. Jobs for the generators are routed here, by the
router, and nowhere else.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from structlog.typing import FilteringBoundLogger

from spex.proto import Message, ProtocolError, decode
from spex.proto.names import query_cancelled, query_epoch, query_inbox
from spex.proto.text import as_str
from spex.services.coordinator.handlers import (
    EVENT_HANDLERS,
    Answer,
    Dispatch,
    Effect,
    MarkCancelled,
    Outgoing,
    Publish,
    effects,
    failed,
)
from spex.services.coordinator.holdings import Ending, Holdings
from spex.services.coordinator.observe import Observer
from spex.services.coordinator.query import HeldQuery, Unpublishable, graded
from spex.services.coordinator.reports import Entries, Fence
from spex.services.coordinator.routing import Router
from spex.services.coordinator.store import QueryStore
from spex.shared.content.prompt_style import question_format
from spex.shared.core.commands import Command, FinishCommand
from spex.shared.runtime.bus import Bus
from spex.shared.runtime.metrics import BUS_HOP, EVENTS, QUERIES, QUERY_LATENCY
from spex.shared.runtime.settings import Settings
from spex.shared.runtime.streams import ScriptCall, entry_after
from spex.shared.runtime.views import served_by

__all__ = ["Driver"]


GRADE_TIMEOUT_S = 10.0  # math-verify on one answer (and never more than a third of the lease)
# A fenced write refused: another coordinator holds the query (it goes on), or Redis lost the
# query's state and nobody does: let go as if Redis were away, so that `recovery` finds it lost
# and the request held here is searched again (ended as lost, it was answered never).
_ENDINGS = {Fence.NOT_OURS: Ending.LOST, Fence.GONE: Ending.RELEASED}
# The longest an inbox read's events hold the event loop at a stretch: a read for thousands of
# queries is seconds of work, and the lease round must get its turn meanwhile.
YIELD_EVERY_S = 0.02


class Driver:
    def __init__(
        self, bus: Bus, store: QueryStore, router: Router, holdings: Holdings, observer: Observer,
        settings: Settings, log: FilteringBoundLogger, keep_s: dict[str, float],
    ) -> None:  # fmt: skip
        self.bus, self.store, self.router = bus, store, router
        self.holdings, self.observer = holdings, observer
        self.settings = settings
        self.served_by = served_by(settings)  # what every answer says answered it
        self.prompt = settings.prompt()  # the deployment's; a question's own goes over it
        self.log = log
        self.keep_s = keep_s  # streams trimmed by age as they are published to
        self.events = 0
        self.answered = 0

    # ------------------------------------------------------------------ inbox entries in
    async def replay(self, query: HeldQuery, commands: list[Command], entries: Entries) -> None:
        """A query just adopted: carry out `commands` (its start), then apply its inbox so far."""
        try:
            await self.execute(query, commands)
            await self.observer.observe(query)
            await self.apply(query, entries)
        except Unpublishable as exc:
            await self.fail(query, str(exc))

    async def apply(self, query: HeldQuery, entries: Entries) -> None:
        """Apply `entries` and settle them (publish what they issued, checkpoint)."""
        batch: list[Effect] = []
        try:
            await self._apply_events(query, entries, batch)
        finally:
            await self.settle({query.query_id: batch})

    async def apply_read(self, read_for: dict[str, HeldQuery], reads: list[tuple[str, Entries]]) -> None:
        """One read of the live inboxes, made for the queries of `read_for`: every query's
        events, then one round trip for all their effects and checkpoints (each query's effects
        before its checkpoint). A query let go and adopted again while the read blocked is
        skipped: its replay applies the inbox in order, and the next read goes on from it."""
        batches: dict[str, list[Effect]] = {}
        yielded = time.monotonic()
        try:
            for qid, entries in reads:
                if time.monotonic() - yielded >= YIELD_EVERY_S:
                    await asyncio.sleep(0)
                    yielded = time.monotonic()
                query = self.holdings.queries.get(qid)
                if query is None or query is not read_for.get(qid):
                    continue
                try:
                    await self._apply_events(query, entries, batches.setdefault(qid, []))
                except Unpublishable as exc:  # a message of its own too large: it fails alone
                    batches.pop(qid, None)
                    try:
                        await self.fail(query, str(exc))
                    except BaseException:
                        self.holdings.end(query, Ending.RELEASED)
                        raise
                except Exception:
                    # Commands the machine issued may not have been published: its memory is
                    # ahead of Redis. Let the query go: whoever adopts it next replays the
                    # inbox and re-issues them (publishing is idempotent).
                    batches.pop(qid, None)
                    self.holdings.end(query, Ending.RELEASED)
                    raise
        finally:
            await self.settle(batches)

    def _leased(self, message: Message) -> str:
        """What a query's message needs to be published: the query's epoch. Redis lost the
        query's state (and with it the ids published for it) and nobody has taken its lease
        since: what a stale machine would publish now would mark the ids sent, and its search
        again would find its own jobs dropped as published already."""
        return query_epoch(message.query_id, self.bus.partitions)

    async def _apply_events(self, query: HeldQuery, entries: Entries, batch: list[Effect]) -> None:
        """Apply `entries` (those not applied yet) to the query's machine; what they issue
        joins `batch` (an answer is sent at once, with what is pending before it)."""
        stream = query_inbox(query.query_id, self.bus.partitions)
        for entry_id, fields in entries:
            if self.holdings.queries.get(query.query_id) is not query:
                break  # let go meanwhile (a Redis restart, say): whoever holds it now goes on
            entry = as_str(entry_id)
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
            self._count(message, query.replaying)
            try:
                commands = handler(query.machine, message, time.monotonic())
            except Exception as exc:  # a bad event must not take the query (or the service) down
                self.log.error("event_failed", query_id=query.query_id, error=repr(exc))
                continue
            await self.execute(query, commands, batch)
            if query.machine.done:
                break

    def _count(self, message: Message, replaying: bool) -> None:
        self.events += 1
        kind = type(message).__name__
        EVENTS.labels("coordinator", self.settings.consumer, kind).inc()
        if message.created_ms and not replaying:
            BUS_HOP.labels("coordinator", kind).observe(max(0.0, time.time() - message.created_ms / 1000))

    # ------------------------------------------------------------------ effects out
    async def execute(
        self, query: HeldQuery, commands: list[Command], batch: list[Effect] | None = None
    ) -> None:
        """Carry out `commands`' effects as the handlers return them. Dispatches, publishes
        and cancel marks join `batch` (sent in one round trip by `settle`); without a batch
        they are sent at once. A finish first sends what is pending (its cancels among it),
        then grades the answer and writes it."""
        pending: list[Effect] = [] if batch is None else batch
        at = next((i for i, c in enumerate(commands) if isinstance(c, FinishCommand)), len(commands))
        pending += effects(self._outgoing(query), commands[:at])
        if at < len(commands):
            await self._flush(pending)
            finish = commands[at]
            assert isinstance(finish, FinishCommand)
            out = await self._finishing(query, finish.answer)
            for effect in effects(out, commands[at:]):
                if isinstance(effect, Answer):
                    await self._flush(pending)
                    await self._answer(query, effect)
                else:
                    pending.append(effect)
        if batch is None:
            await self._flush(pending)

    async def settle(self, batches: dict[str, list[Effect]]) -> None:
        """Send each query's effects of `batches` and record its entries as applied (the
        checkpoint, after its effects) in one round trip; then the queries' watchers. A query
        whose messages cannot be published (too large) fails alone; if Redis fails, every
        query of the batch is released (whoever adopts it replays its inbox)."""
        queries = self.holdings.queries
        held = [queries[q] for q in batches if q in queries and not queries[q].machine.done]
        checkpoints = [
            self.store.checkpoint_call(q.query_id, q.epoch, q.last_id, len(q.machine.tree)) for q in held
        ]
        every = [effect for batch in batches.values() for effect in batch]
        if not every and not checkpoints:
            return
        try:
            try:
                confirmed = list(zip(held, await self._flush(every, checkpoints), strict=True))
            except Unpublishable:
                confirmed = await self._settle_one_by_one(batches, held)
        except BaseException:
            for query in held:
                self.holdings.end(query, Ending.RELEASED)
            raise
        for query, fence in confirmed:
            if fence != Fence.WRITTEN:
                self.holdings.end(query, _ENDINGS[Fence(int(fence))])
            elif query.query_id in queries:
                await self.observer.observe(query)

    async def _settle_one_by_one(
        self, batches: dict[str, list[Effect]], held: list[HeldQuery]
    ) -> list[tuple[HeldQuery, Fence]]:
        """A batch with a message too large to publish: each query's effects alone, and the
        one whose are too large fails."""
        failures: set[str] = set()
        for qid, batch in batches.items():
            try:
                await self._flush(batch)
            except Unpublishable as exc:
                query = self.holdings.queries.get(qid)
                if query is not None and not query.machine.done:
                    failures.add(qid)
                    await self.fail(query, str(exc))
        confirmed = []
        for query in held:
            if query.query_id not in failures:
                nodes = len(query.machine.tree)
                ok = await self.store.checkpoint(query.query_id, query.epoch, query.last_id, nodes)
                confirmed.append((query, ok))
        return confirmed

    async def _flush(self, pending: list[Effect], then: list[ScriptCall] | None = None) -> list[Any]:
        """Send `pending`'s effects, then the script calls `then`, in one round trip: what
        each call returned. A dispatched job goes where the router places its query."""
        items: list[tuple[str, Message]] = []
        marks: list[tuple[str, str]] = []
        for effect in pending:
            if isinstance(effect, Dispatch):
                items.append((self.router.stream(effect.message.query_id), effect.message))
            elif isinstance(effect, Publish):
                items.append((effect.stream, effect.message))
            elif isinstance(effect, MarkCancelled):
                marks.append((query_cancelled(effect.query_id, self.bus.partitions), effect.job_id))
        pending.clear()
        try:
            calls, leased = then or (), self._leased
            _, done = await self.bus.publish_many(items, marks, self.keep_s, require=leased, then=calls)
        except ProtocolError as exc:  # e.g. the path's text past the message limit
            kinds = ", ".join(sorted({type(m).__name__ for _, m in items}))
            raise Unpublishable(f"{kinds}: {exc}") from None
        return done

    # ------------------------------------------------------------------ answers
    async def fail(self, query: HeldQuery, reason: str) -> None:
        """The query cannot go on (a job it needs cannot be sent): answer it as failed."""
        self.log.error("query_failed", query_id=query.query_id, reason=reason)
        await self._answer(query, failed(await self._finishing(query, None), reason))

    def _outgoing(self, query: HeldQuery, latency_s: float = 0.0, correct: bool | None = None) -> Outgoing:
        """What the query's messages carry besides the commands."""
        s = self.settings
        return Outgoing(
            query.request, query.epoch, query.machine, s.content, s.sampling_temperature, s.step_split,
            s.min_step_tokens, question_format(self.prompt, query.request), latency_s, correct,
            self.served_by,
        )  # fmt: skip

    async def _finishing(self, query: HeldQuery, answer: str | None) -> Outgoing:
        """`_outgoing` for the commands that end the query: its answer graded against the
        request's reference (math-verify, off the event loop) and its latency since adoption,
        grading included."""
        limit_s = min(GRADE_TIMEOUT_S, self.settings.lease_s / 3)
        correct = await graded(answer, query.request.reference_answer, limit_s, self.log)
        return self._outgoing(query, time.monotonic() - query.started_wall, correct)

    async def _answer(self, query: HeldQuery, effect: Answer) -> None:
        m, answer = query.machine, effect.message
        await self.observer.observe(query, final=True)  # the final tree, before the answer that ends it
        fence = await self.store.answer(query.request, query.epoch, answer)
        if fence != Fence.WRITTEN:  # another coordinator answers it, or Redis lost it
            self.holdings.end(query, _ENDINGS[fence])
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
        self.holdings.end(query, Ending.ANSWERED)
        self.answered += 1
        self.log.info(
            "query_answered",
            query_id=req.query_id,
            answer=m.answer,
            nodes=answer.nodes,
            cancelled=m.cancelled,
        )
