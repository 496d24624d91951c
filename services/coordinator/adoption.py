"""How a coordinator comes to hold a query: a question off the ingress stream, a query whose
holder stopped renewing, or one stored again after Redis lost it. Each is one round trip
(`store.adopt`: whether it is answered, the stored request where it must be read, the lease and
the inbox), then the query is held and its inbox replayed into a fresh machine. A takeover's
replay, and the adoption of a query searched again, run in tasks of their own, so a long one
never holds up the lease round."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from structlog.typing import FilteringBoundLogger

from spex.proto import Message, ProtocolError, SubmitQuestionRequest
from spex.proto.codec import Envelope
from spex.services.coordinator.driver import Driver
from spex.services.coordinator.holdings import Ending, Holdings
from spex.services.coordinator.query import HeldQuery, new_machine
from spex.services.coordinator.reports import Adoption, Found, Submitted
from spex.services.coordinator.store import QueryStore
from spex.shared.runtime.availability import unavailable
from spex.shared.runtime.settings import Settings
from spex.shared.runtime.tracing import query_span

__all__ = ["Adopter"]

REDIS_ERRORS = (RedisConnectionError, RedisTimeoutError, ResponseError)


class Adopter:
    """Adoptions into `holdings`; it owns the tasks that replay takeovers and searches again."""

    def __init__(
        self,
        store: QueryStore,
        holdings: Holdings,
        driver: Driver,
        settings: Settings,
        log: FilteringBoundLogger,
    ) -> None:
        self.store, self.holdings, self.driver = store, holdings, driver
        self.settings, self.log = settings, log
        self._tasks: set[asyncio.Task[None]] = set()

    async def adopt(self, req: SubmitQuestionRequest) -> bool:
        """Take the lease on a query whose request is in hand and run it from its inbox (new
        or interrupted); False if it is answered or held."""
        qid = req.query_id
        if self.holdings.busy(qid):
            return False
        with self.holdings.adopting(qid):
            adoption = await self.store.adopt(qid, read_request=False)
            if adoption.found is not Found.TAKEN:
                return False
            query = self._hold(req, adoption.epoch)
        await self._replay(query, adoption)
        return True

    async def submitted(self, req: SubmitQuestionRequest) -> tuple[Submitted, Found]:
        """Adopt a question of the ingress stream if it is the request stored under its id:
        whether it is, and what the adoption found."""
        qid = req.query_id
        if self.holdings.busy(qid):  # held here: only whether this entry is its request
            answered = await self.store.answered(qid)
            return await self.store.submitted(req), Found.ANSWERED if answered else Found.HELD
        with self.holdings.adopting(qid):
            adoption = await self.store.adopt(qid, read_request=True)
            submitted = self.store.verdict(req, adoption.stored)
            if adoption.found is not Found.TAKEN:
                return submitted, adoption.found
            if submitted is not Submitted.THIS:
                await self.store.release(qid)  # not this entry's to search
                return submitted, adoption.found
            query = self._hold(req, adoption.epoch)
        await self._replay(query, adoption)
        return submitted, adoption.found

    async def take_over(self, qid: str) -> None:
        """Adopt `qid`, whose holder stopped renewing (its replay in a task)."""
        if self.holdings.busy(qid):
            return
        with self.holdings.adopting(qid):
            try:
                adoption = await self.store.adopt(qid, read_request=True)
            except ResponseError as exc:  # this query's own (a key of the wrong type): the rest go on
                if unavailable(exc) is not None:
                    raise  # Redis's: the round waits it out
                self.log.warning("takeover_failed", query_id=qid, error=str(exc))
                return
            if adoption.found in (Found.ANSWERED, Found.MISSING):
                await self.store.not_active(qid)  # answered or expired: nothing to take over
            if adoption.found is not Found.TAKEN:
                return
            try:
                req = self.store.decoded(qid, adoption.stored)
            except ProtocolError as exc:  # e.g. written by a newer version: not ours to run
                self.log.error("request_unreadable", query_id=qid, error=str(exc))
                req = None
            if req is None:
                await self.store.release(qid)
                await self.store.not_active(qid)
                return
            try:
                query = self._hold(req, adoption.epoch)
            except Exception as exc:  # noqa: BLE001 - the question cannot be searched: answered so
                await self._unsearchable(req, exc)
                return
        self._spawn(self._replay_taken_over(query, adoption))

    def adopt_again(self, req: SubmitQuestionRequest) -> None:
        """Adopt a query stored again after Redis lost it, in a task (a failure leaves it due
        for any coordinator's takeover)."""
        self._spawn(self._adopt_again(req))

    async def on_dead(self, message: Message | Envelope, reason: str) -> None:
        """A submission given up on: answer it as failed (its client is told, its in-flight
        place freed) — if it is the request stored under its id. (No ingress stored one that
        is not: nobody waits on it, and its id may be another's, or answered long ago.)"""
        if not isinstance(message, SubmitQuestionRequest):
            return
        if await self.store.submitted(message) is not Submitted.THIS:
            return
        await self.store.reject(message, reason)
        self.log.warning("question_rejected", query_id=message.query_id, reason=reason)

    def _hold(self, req: SubmitQuestionRequest, epoch: int) -> HeldQuery:
        """The query whose lease we took at `epoch`, held from now on (its replay to come)."""
        qid, now = req.query_id, time.monotonic()
        query = HeldQuery(req, new_machine(req, self.settings), epoch, started_wall=now, renewed=now)
        attributes: dict[str, str | int] = {
            "spex.query_id": qid, "spex.algorithm": req.algorithm, "spex.target": req.target,
            "spex.mode": req.mode, "spex.epoch": epoch, "spex.coordinator": self.holdings.owner,
        }  # fmt: skip
        query.span = query_span(req.trace_id, qid, epoch, attributes)
        self.holdings.hold(query)
        self.log.info("query_adopted", query_id=qid, epoch=epoch)
        return query

    async def _replay(self, query: HeldQuery, adoption: Adoption) -> None:
        try:  # a previous owner's results, if any, after the start
            await self.driver.replay(query, query.machine.start(0.0), adoption.inbox)
        except BaseException:
            self.holdings.end(query, Ending.RELEASED)
            raise
        self.holdings.live(query)

    async def _replay_taken_over(self, query: HeldQuery, adoption: Adoption) -> None:
        req = query.request
        try:
            await self._replay(query, adoption)
            self.log.info("query_taken_over", query_id=req.query_id)
        except REDIS_ERRORS as exc:
            # Redis unavailable is logged once, as its state changes (`availability`), not
            # once per query per round (its next round tries again).
            log = self.log.debug if unavailable(exc) else self.log.warning
            log("takeover_failed", query_id=req.query_id, error=str(exc))
        except Exception as exc:  # noqa: BLE001 - the question cannot be searched: answered so
            await self._unsearchable(req, exc)

    async def _adopt_again(self, req: SubmitQuestionRequest) -> None:
        try:
            await self.adopt(req)
        except REDIS_ERRORS as exc:
            self.log.warning("takeover_failed", query_id=req.query_id, error=str(exc))

    async def _unsearchable(self, req: SubmitQuestionRequest, exc: Exception) -> None:
        self.log.error("question_unsearchable", query_id=req.query_id, error=repr(exc))
        # Its search's own refusal says why (a search this coordinator lacks: `unknown
        # algorithm 'x'; known: ...`); anything else is not the client's to read.
        why = str(exc) if isinstance(exc, ValueError) else "the question could not be searched"
        await self.on_dead(req, why)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
