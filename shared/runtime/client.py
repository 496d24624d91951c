"""The ingress client: submit questions, wait for answers, cancel.

`submit` is one script — remember the client key, record the question as in flight (for
everyone and for its client), store the request, append it to the ingress stream — so a
retried submission with the same client key is answered once, a different question under a
used key is refused (`KeyConflict`), and a backlog over `backlog_limit` questions in flight
(or a client over its own limit) is refused (`Backpressure`) instead of queued without bound.
In-flight sets are sets, not counters: releasing a question twice cannot drift them.

Client keys and results are scoped by `client` (the ingress token's name): one client can
neither reuse another's key nor read another's answer. Answers come back on the query's reply
key. The HTTP ingress, the Celery adapter, the launcher and `spex submit` all use this client;
what readers are shown of a query and of the cluster is `views`'.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, cast

import msgspec
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from spex.proto import (
    AnswerResult,
    CancelRequest,
    Limits,
    NodeEvent,
    ProtocolError,
    SubmissionError,
    SubmissionTooLarge,
    SubmitQuestionRequest,
    decode,
    encode,
    names,
    submission,
)
from spex.proto.submission import twin_id
from spex.proto.text import as_str
from spex.shared.content.prompt_style import check_chat_template
from spex.shared.runtime.bodies import TreeNodeJson
from spex.shared.runtime.client_scripts import CANCEL, SUBMIT, SubmitOutcome
from spex.shared.runtime.client_trees import TreeReader
from spex.shared.runtime.data_loss import DataLoss
from spex.shared.runtime.durable import Durable
from spex.shared.runtime.refusals import (
    Answered,
    Backpressure,
    DataLost,
    KeyConflict,
    MemoryFull,
    Recovering,
    UnknownQuery,
)
from spex.shared.runtime.reserve import Room, request_bytes
from spex.shared.runtime.streams import is_cluster

__all__ = ["IngressClient", "SubmitOutcome", "client_key_record"]

KEY_BACKSTOP_S = 7 * 86_400  # a client key no answer ever shortened expires after a week
LOST = (
    "Redis lost its data moments ago; the questions in flight are being stored again, their client "
    "keys with them: retry"
)


def _share(limit: int, partitions: names.Partitions) -> int:
    """One partition's share of a limit (all of it on one Redis)."""
    return -(-limit // partitions.count)


def _new_query_id(scope: str | None, partitions: names.Partitions) -> str:
    """A fresh query id; with partitions and a client key, one in the key's partition, so a
    retry under the key (with a fresh id of its own) runs its submit on the same slot and
    finds the first one."""
    while True:
        qid = uuid.uuid4().hex[:16]
        if scope is None or partitions.partition(qid) == partitions.partition(scope):
            return qid


def client_key_record(req: SubmitQuestionRequest, partitions: names.Partitions) -> tuple[str, str]:
    """Where `req`'s client key is kept and what it holds (`<query id>|<body hash>`): the
    submit script writes it, and a coordinator writes it again for a question Redis lost."""
    body = hashlib.sha256(encode(_body(req))).hexdigest()[:32]
    key = partitions.placed(names.submitted_key(f"{req.client}/{req.client_key}", partitions), req.query_id)
    return key, f"{req.query_id}|{body}"


class IngressClient:
    def __init__(
        self,
        client: aioredis.Redis,
        backlog_limit: int = 10_000,
        limits: Limits | None = None,
        per_target: int = 0,
        room: Callable[[], Awaitable[Room | None]] | None = None,
        loss_wait_s: float = 60.0,
        *,
        partitions: names.Partitions,
    ) -> None:
        """`per_target`: SPEX_MEMORY_PER_TARGET, the bytes a search may hold a unit of target
        (0: its algorithm's, `reserve.search_bytes`); `room`: what the searches in flight may
        reserve in all (`services.admission`; None, or it answering None: no limit);
        `loss_wait_s`: SPEX_DATA_LOSS_WAIT_S, the longest a loss this client marks stands;
        `partitions`: the deployment's, which every key built here is of."""
        self.r, self.partitions = client, partitions
        self.backlog_limit = backlog_limit
        self.limits = limits or Limits()
        self.per_target = per_target
        self.room = room
        self._submit = client.register_script(SUBMIT)
        self._cancel = client.register_script(CANCEL)
        self._durable = Durable(cast(aioredis.RedisCluster, client)) if is_cluster(client) else None
        self._kept: dict[str, bytes] = {}  # DATA_KEPT's part -> the token last seen there
        self.loss = DataLoss(client, "ingress", loss_wait_s, partitions=partitions)
        self.trees = TreeReader(client, partitions)

    async def tree_events(
        self, query_id: str, after: str = "0", count: int = 1000
    ) -> tuple[list[NodeEvent], str]:
        """The query's node events after entry `after` (`TreeReader.tree_events`)."""
        return await self.trees.tree_events(query_id, after, count)

    async def tree(self, query_id: str) -> list[TreeNodeJson]:
        """The query's tree as its events tell it so far (`TreeReader.tree`)."""
        return await self.trees.tree(query_id)

    def _seen(self, kept: str, token: bytes | str | None) -> bool:
        """`kept` holds `token` now; True if this client saw a token there and none is left
        (Redis lost its data, and nobody has marked it: `data_loss`)."""
        if token is None:
            return kept in self._kept
        self._kept[kept] = token.encode() if isinstance(token, str) else token
        return False

    async def submit(
        self,
        question: str,
        *,
        query_id: str | None = None,
        client_key: str | None = None,
        client: str = "",
        **given: object,
    ) -> str:
        """Submit a question; returns its query id (the first one's, for a repeated client
        key). `given`: the other client fields (`submission.CLIENT_FIELDS`, by name); one left
        None takes `SubmitQuestionRequest`'s default; an unknown or bad one raises
        `SubmissionError` naming it."""
        qid = query_id or _new_query_id(f"{client}/{client_key}" if client_key else None, self.partitions)
        fields = submission.check_fields({k: v for k, v in given.items() if v is not None})
        key = client_key or qid
        req = submission.validate(
            SubmitQuestionRequest(
                msg_id=f"submit/{client}/{key}",
                query_id=qid,
                trace_id=uuid.uuid4().hex,
                created_ms=int(time.time() * 1000),
                question=question,
                client_key=key,
                client=client,
                **fields,
            ),
            self.limits,
        )
        if req.chat_template:  # its syntax, before it is queued: a 400, not a failed search
            try:
                check_chat_template(req.chat_template)
            except ValueError as exc:
                raise SubmissionError("chat_template", str(exc).removeprefix("chat_template: ")) from None
        qid = await self._submit_one(req)
        if req.baseline_twin:  # its twin, under its own id and key: a retry finds both
            twin = twin_id(qid)
            try:
                await self._submit_one(
                    msgspec.structs.replace(
                        req,
                        msg_id=f"submit/{client}/{twin}",
                        query_id=twin,
                        client_key=twin,
                        mode="baseline",
                        baseline_twin=False,
                        twin_of=qid,
                    )  # fmt: skip
                )
            except (Backpressure, KeyConflict) as exc:  # refused: the question is not kept either
                with contextlib.suppress(UnknownQuery):
                    await self._cancel_one(qid)
                p = self.partitions
                await self.r.delete(p.placed(names.submitted_key(f"{client}/{key}", p), qid))
                raise type(exc)(f"{exc} (its baseline twin was refused: the question is withdrawn)") from None
        return qid

    async def _submit_one(self, req: SubmitQuestionRequest) -> str:
        """Run the submit script for `req`: its query id, or the first one's for a repeated key."""
        qid, client = req.query_id, req.client
        try:
            payload = encode(req)
        except ProtocolError as exc:
            raise SubmissionTooLarge("question", f"too long: {exc}") from None
        parts = self.partitions
        submitted, record = client_key_record(req, parts)
        kept = parts.placed(names.DATA_KEPT, qid)
        reserve = request_bytes(req, self.per_target)
        room = await self.room() if self.room is not None else None
        # Past the whole headroom, it could never be admitted — unless Redis is past it already
        # (its maxmemory lowered below what it holds, for a while): then it is full, for now.
        if room is not None and room.free > 0 and reserve > room.total:
            raise SubmissionTooLarge("question", _never_fits(req, reserve, room.total))
        keyed = req.client_key != qid  # a key of the client's (not its own id)
        marker, awaited, _ = DataLoss.keys(kept)
        # With partitions, all of them in the query's (one slot), each holding its share of the
        # backlog and of the client's limit.
        keys = [
            submitted,
            parts.placed(names.INGRESS, qid),
            parts.placed(names.INGRESS_IN_FLIGHT, qid),
            parts.placed(names.client_in_flight(client, parts), qid),
            names.query_request(qid, parts),
            kept,
            parts.placed(names.INGRESS_RESERVED, qid),
            parts.placed(names.INGRESS_RESERVED_TOTAL, qid),
            marker,
            awaited,
        ]
        args = [
            qid,
            payload,
            _share(self.backlog_limit, parts),
            _share(self.limits.client_in_flight, parts),
            record,
            req.created_ms,
            KEY_BACKSTOP_S,
            self._kept.get(kept, b""),
            reserve,
            "" if room is None else room.free,
            self.loss.wait_ms,
            "1" if keyed else "",
        ]
        if self._durable is not None:  # acknowledged to the client: on a replica first
            status, value, *token = await self._durable.run(self._submit, keys, args)
        else:
            status, value, *token = await self._submit(keys=keys, args=args)  # type: ignore[arg-type]
        value = str(value) if isinstance(value, int) else as_str(value)  # a count, or an id
        outcome = SubmitOutcome(int(status))
        if token and token[0]:
            self._seen(kept, token[0])
        if outcome is SubmitOutcome.DATA_LOST:
            raise DataLost(LOST)
        if outcome is SubmitOutcome.MEMORY_FULL:  # how full is the operator's to read, not the client's
            raise MemoryFull(
                "redis memory: no room for this question's search beside those in flight (what its "
                "maxmemory leaves under SPEX_MEMORY_HEADROOM); retry later"
            )
        if outcome is SubmitOutcome.BACKLOG_FULL:
            raise Backpressure("the backlog is full; retry later")  # not how full: that is not the client's
        if outcome is SubmitOutcome.CLIENT_FULL:
            limit = self.limits.client_in_flight
            raise Backpressure(f"this client has {value} questions in flight (limit {limit}); retry later")
        if outcome is SubmitOutcome.KEY_CONFLICT:
            raise KeyConflict(f"client_key: already used for a different question (query {value})")
        if outcome is SubmitOutcome.ID_TAKEN:
            raise KeyConflict(f"query_id: {value} is taken")
        return value

    async def request(self, query_id: str, client: str | None = None) -> SubmitQuestionRequest:
        """The query's request; UnknownQuery if there is none (or it belongs to another
        client, when `client` is given); Recovering if there is none while Redis's loss of its
        data stands (a coordinator may be storing it again)."""
        parts = self.partitions
        key, kept = names.query_request(query_id, parts), parts.placed(names.DATA_KEPT, query_id)
        async with self.r.pipeline(transaction=False) as pipe:
            pipe.get(key)
            pipe.get(kept)
            pipe.exists(DataLoss.keys(kept)[0])
            blob, token, lost = cast(list[Any], await pipe.execute())
        if self._seen(kept, token):  # this client is the first to notice
            await self.loss.mark(kept)
            lost = True
        if blob is None:
            raise Recovering(query_id) if lost else UnknownQuery(query_id)
        req = decode(key, blob)
        if not isinstance(req, SubmitQuestionRequest) or (client is not None and req.client != client):
            raise UnknownQuery(query_id)
        return req

    async def result(self, query_id: str, timeout_s: float | None = None) -> AnswerResult | None:
        """The answer, waiting up to `timeout_s` (None: only look). While waiting, a lost
        connection to Redis is waited out too."""
        key = names.reply_key(query_id, self.partitions)
        deadline = time.monotonic() + (timeout_s or 0.0)
        while True:
            try:
                blob = await self.r.get(key)
            except (RedisConnectionError, RedisTimeoutError):
                if timeout_s is None or time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(0.1)
                continue
            if blob is not None:
                answer = decode(key, bytes(blob) if isinstance(blob, bytes) else blob.encode())
                assert isinstance(answer, AnswerResult)
                return answer
            if timeout_s is None or time.monotonic() >= deadline:
                return None
            await asyncio.sleep(0.05)

    async def counts(self) -> tuple[int, int]:
        """(questions in flight, of those held by a coordinator)."""
        return await self.in_flight(), await self.cards(names.COORDINATORS_ACTIVE)

    async def in_flight(self) -> int:
        """Questions submitted and not answered yet."""
        return await self.cards(names.INGRESS_IN_FLIGHT)

    async def reserved(self) -> int:
        """Bytes Redis holds in reserve for the searches in flight (`reserve`), over its partitions."""
        async with self.r.pipeline(transaction=False) as pipe:
            for part in self.partitions.spread(names.INGRESS_RESERVED_TOTAL):
                pipe.get(part)
            return sum(int(total or 0) for total in await pipe.execute())

    async def cards(self, name: str) -> int:
        """The members of the set `name`, over its partitions."""
        async with self.r.pipeline(transaction=False) as pipe:
            for part in self.partitions.spread(name):
                pipe.zcard(part)
            return sum(int(n) for n in await pipe.execute())

    async def cancel(self, query_id: str) -> None:
        """Cancel a query, and its baseline twin if it has one (the twin checks nothing alone);
        UnknownQuery if there is no such query, Answered if it is answered already."""
        await self._cancel_one(query_id)
        with contextlib.suppress(
            UnknownQuery, Answered
        ):  # expired or answered meanwhile, a twin never stored
            if (await self.request(query_id)).baseline_twin:
                await self._cancel_one(twin_id(query_id))

    async def _cancel_one(self, query_id: str) -> None:
        msg = CancelRequest(msg_id=f"{query_id}/cancel", query_id=query_id, reason="client cancelled")
        q, p = query_id, self.partitions
        keys = [names.query_request(q, p), names.query_inbox(q, p), names.reply_key(q, p)]
        done = int(await self._cancel(keys=keys, args=[encode(msg)]))
        if done == 0:
            raise UnknownQuery(query_id)
        if done < 0:
            raise Answered(f"query_id: {query_id} is answered already: nothing to cancel (read its answer)")

    async def aclose(self) -> None:
        await self.r.aclose()


def _never_fits(req: SubmitQuestionRequest, reserve: int, total: int) -> str:
    """Why a question whose search could never be admitted is refused (413), naming the limit."""
    return (
        f"its search ({req.algorithm}-{req.target}, {len(req.question):,} characters) may hold about "
        f"{reserve / 1e6:.1f} MB in Redis, more than the {total / 1e6:.1f} MB that SPEX_MEMORY_HEADROOM "
        "of Redis's maxmemory leaves for every search together: it could never be admitted (a "
        "shorter question, a smaller target or a larger maxmemory)"
    )


def _body(req: SubmitQuestionRequest) -> SubmitQuestionRequest:
    """What makes two submissions the same question: the request without its envelope."""
    return msgspec.structs.replace(req, msg_id="", query_id="", trace_id="", created_ms=0)
