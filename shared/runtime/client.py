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
from enum import IntEnum
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
    SubmissionTooLarge,
    SubmitQuestionRequest,
    decode,
    encode,
    names,
    submission,
)
from spex.proto.submission import twin_id
from spex.shared.runtime.durable import Durable
from spex.shared.runtime.streams import is_cluster
from spex.shared.runtime.views import fold_tree

__all__ = ["Backpressure", "IngressClient", "KeyConflict", "SubmitOutcome", "UnknownQuery"]

KEY_BACKSTOP_S = 7 * 86_400  # a client key no answer ever shortened expires after a week


class SubmitOutcome(IntEnum):
    """What the submit script did: the first element of its reply (the second is a query id,
    or how many questions are in flight when refused for that). The script declares each as a
    Lua local of the same name."""

    NEW = 1  # recorded, stored and appended to the ingress stream
    REPEATED = 0  # the client key's question again: the first submission's query id
    BACKLOG_FULL = -1  # refused: the backlog's questions in flight are at its limit
    CLIENT_FULL = -2  # refused: this client's questions in flight are at its limit
    KEY_CONFLICT = -3  # refused: the client key was used for a different question
    ID_TAKEN = -4  # refused: the query id given is some other query's


# KEYS: submitted, ingress, in-flight, client in-flight, request.
# ARGV: query id, payload, backlog limit, client limit, body hash, now ms, key backstop s.
# The client key is kept while the question is searched: the coordinator's answer (or
# rejection) sets it to expire with the answer, so a retry is the same query for as long as
# the answer can be read. Its own TTL (a week) is only a backstop, for a question nothing ever
# answers (an ingress entry a foreign writer corrupted).
_SUBMIT = (
    "".join(f"local {outcome.name} = {outcome.value}\n" for outcome in SubmitOutcome)
    + """
local existing = redis.call('GET', KEYS[1])
if existing then
  local qid, hash = string.match(existing, '^([^|]*)|(.*)$')
  if hash ~= ARGV[5] then return {KEY_CONFLICT, qid} end
  return {REPEATED, qid}
end
if redis.call('EXISTS', KEYS[5]) == 1 then return {ID_TAKEN, ARGV[1]} end
local inflight = redis.call('ZCARD', KEYS[3])
if inflight >= tonumber(ARGV[3]) then return {BACKLOG_FULL, tostring(inflight)} end
local mine = redis.call('ZCARD', KEYS[4])
if mine >= tonumber(ARGV[4]) then return {CLIENT_FULL, tostring(mine)} end
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. ARGV[5], 'EX', ARGV[7])
redis.call('ZADD', KEYS[3], ARGV[6], ARGV[1])
redis.call('ZADD', KEYS[4], ARGV[6], ARGV[1])
redis.call('SET', KEYS[5], ARGV[2])
redis.call('XADD', KEYS[2], '*', 'e', ARGV[2])
return {NEW, ARGV[1]}
"""
)

# KEYS: request, inbox. ARGV: payload. -> 1, or 0 if the query is unknown.
_CANCEL = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('XADD', KEYS[2], '*', 'e', ARGV[1])
return 1
"""


def _share(limit: int) -> int:
    """One partition's share of a limit (all of it on one Redis)."""
    return -(-limit // names.partitions())


def _new_query_id(scope: str | None) -> str:
    """A fresh query id; with partitions and a client key, one in the key's partition, so a
    retry under the key (with a fresh id of its own) runs its submit on the same slot and
    finds the first one."""
    while True:
        qid = uuid.uuid4().hex[:16]
        if scope is None or names.partition(qid) == names.partition(scope):
            return qid


class Backpressure(RuntimeError):
    """The ingress backlog (or this client's share of it) is full. Recoverable: retry later."""


class KeyConflict(ValueError):
    """The client key was used before for a different question (HTTP 409)."""


class UnknownQuery(LookupError):
    """No such query for this client (HTTP 404)."""


class IngressClient:
    def __init__(
        self,
        client: aioredis.Redis,
        backlog_limit: int = 10_000,
        limits: Limits | None = None,
    ) -> None:
        self.r = client
        self.backlog_limit = backlog_limit
        self.limits = limits or Limits()
        self._submit = client.register_script(_SUBMIT)
        self._cancel = client.register_script(_CANCEL)
        self._durable = Durable(cast(aioredis.RedisCluster, client)) if is_cluster(client) else None

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
        qid = query_id or _new_query_id(f"{client}/{client_key}" if client_key else None)
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
                await self.r.delete(names.placed(names.submitted_key(f"{client}/{key}"), qid))
                raise type(exc)(f"{exc} (its baseline twin was refused: the question is withdrawn)") from None
        return qid

    async def _submit_one(self, req: SubmitQuestionRequest) -> str:
        """Run the submit script for `req`: its query id, or the first one's for a repeated key."""
        qid, key, client = req.query_id, req.client_key, req.client
        try:
            payload = encode(req)
        except ProtocolError as exc:
            raise SubmissionTooLarge("question", f"too long: {exc}") from None
        body = hashlib.sha256(encode(_body(req))).hexdigest()[:32]
        # With partitions, all of them in the query's (one slot), each holding its share of the
        # backlog and of the client's limit.
        keys = [
            names.placed(names.submitted_key(f"{client}/{key}"), qid),
            names.placed(names.INGRESS, qid),
            names.placed(names.INGRESS_IN_FLIGHT, qid),
            names.placed(names.client_in_flight(client), qid),
            names.query_request(qid),
        ]
        args = [
            qid,
            payload,
            _share(self.backlog_limit),
            _share(self.limits.client_in_flight),
            body,
            req.created_ms,
            KEY_BACKSTOP_S,
        ]
        if self._durable is not None:  # acknowledged to the client: on a replica first
            status, value = await self._durable.run(self._submit, keys, args)
        else:
            status, value = await self._submit(keys=keys, args=args)  # type: ignore[arg-type]
        value = value.decode() if isinstance(value, bytes) else str(value)
        outcome = SubmitOutcome(int(status))
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
        client, when `client` is given)."""
        key = names.query_request(query_id)
        blob: Any = await self.r.get(key)
        if blob is None:
            raise UnknownQuery(query_id)
        req = decode(key, blob)
        if not isinstance(req, SubmitQuestionRequest) or (client is not None and req.client != client):
            raise UnknownQuery(query_id)
        return req

    async def result(self, query_id: str, timeout_s: float | None = None) -> AnswerResult | None:
        """The answer, waiting up to `timeout_s` (None: only look). While waiting, a lost
        connection to Redis is waited out too."""
        key = names.reply_key(query_id)
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

    async def tree_events(
        self, query_id: str, after: str = "0", block_ms: int | None = None, count: int = 1000
    ) -> tuple[list[NodeEvent], str]:
        """The query's node events after entry `after` (waiting up to `block_ms` for one when
        given), and the last entry's id to read on from. Unreadable entries are skipped."""
        stream = names.query_tree(query_id)
        if block_ms is None:
            start = "-" if after == "0" else f"({after}"
            entries: Any = await self.r.xrange(stream, start, "+", count=count)
        else:
            replies: Any = await self.r.xread({stream: after}, count=count, block=block_ms)
            entries = replies[0][1] if replies else []
        events: list[NodeEvent] = []
        for entry_id, fields in entries:
            after = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
            try:
                event = decode(stream, (fields or {}).get(b"e", b""))
            except ProtocolError:
                continue
            if isinstance(event, NodeEvent):
                events.append(event)
        return events, after

    async def tree(self, query_id: str) -> list[dict[str, Any]]:
        """The query's tree as its events tell it so far (`fold_tree`)."""
        events: list[NodeEvent] = []
        after = "0"
        while True:
            more, read_to = await self.tree_events(query_id, after)
            events += more
            if read_to == after:  # nothing more was read
                return fold_tree(events)
            after = read_to

    async def counts(self) -> tuple[int, int]:
        """(questions in flight, of those held by a coordinator)."""
        return await self._cards(names.INGRESS_IN_FLIGHT), await self._cards(names.COORDINATORS_ACTIVE)

    async def _cards(self, name: str) -> int:
        """The members of the set `name`, over its partitions."""
        async with self.r.pipeline(transaction=False) as pipe:
            for part in names.spread(name):
                pipe.zcard(part)
            return sum(int(n) for n in await pipe.execute())

    async def cancel(self, query_id: str) -> None:
        """Cancel a query, and its baseline twin if it has one (the twin checks nothing alone);
        UnknownQuery if there is no such query."""
        await self._cancel_one(query_id)
        with contextlib.suppress(UnknownQuery):  # expired meanwhile, or a twin never stored
            if (await self.request(query_id)).baseline_twin:
                await self._cancel_one(twin_id(query_id))

    async def _cancel_one(self, query_id: str) -> None:
        msg = CancelRequest(msg_id=f"{query_id}/cancel", query_id=query_id, reason="client cancelled")
        keys = [names.query_request(query_id), names.query_inbox(query_id)]
        if not await self._cancel(keys=keys, args=[encode(msg)]):
            raise UnknownQuery(query_id)

    async def aclose(self) -> None:
        await self.r.aclose()


def _body(req: SubmitQuestionRequest) -> SubmitQuestionRequest:
    """What makes two submissions the same question: the request without its envelope."""
    return msgspec.structs.replace(req, msg_id="", query_id="", trace_id="", created_ms=0)
