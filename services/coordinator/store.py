"""The coordinator's state in Redis: every key it owns, the order of their arguments, and its
Lua scripts (`scripts`), registered once and run by SHA (redis-py loads a script again when
a restarted Redis has forgotten it).

A query's keys share its hash tag (`{q:<id>}`), so each script touches one cluster slot; the
global sets (in-flight, active leases), the answers stream and the client key join them on a
cluster, where each is split into partitions and a query's keys take its partition's tag
(`names.placed`).
"""

from __future__ import annotations

import enum
import time
from typing import Any, cast

import redis.asyncio as aioredis

from spex.proto import (
    AnswerResult,
    NodeEvent,
    ProtocolError,
    QueryStatsEvent,
    SubmitQuestionRequest,
    decode,
    encode,
)
from spex.proto.names import (
    ANSWERS,
    COORDINATORS_ACTIVE,
    INGRESS_IN_FLIGHT,
    QUERY_STATS,
    client_in_flight,
    dead_letter,
    placed,
    query_cancelled,
    query_checkpoint,
    query_epoch,
    query_inbox,
    query_lease,
    query_request,
    query_sent,
    query_tree,
    reply_key,
    spread,
    submitted_key,
)
from spex.services.coordinator import scripts
from spex.shared.runtime.streams import ScriptCall, is_cluster, read_streams

__all__ = ["Entries", "QueryStore", "Submitted"]

TREE_EVENTS_KEPT = 100_000  # node events kept per query (a tree of 20k nodes, several each)
# What XRANGE and XREAD give for one stream: (entry id, fields) in order.
Entries = list[tuple[bytes | str, dict[bytes, bytes]]]


class Submitted(enum.Enum):
    """Whether a question on the ingress stream is the request stored under its id."""

    THIS = "this"  # stored as the ingress queued it
    MISSING = "missing"  # nothing is stored under its id
    UNREADABLE = "unreadable"  # what is stored cannot be decoded (a newer version's, say)
    OTHER = "other"  # another request holds its id


def _placed(qid: str, *names: str) -> list[str]:
    return [placed(name, qid) for name in names]


def _now_ms() -> int:
    return int(time.time() * 1000)


class QueryStore:
    """One coordinator's reads and writes of query state. `owner` is its consumer name (the
    lease holder's mark); leases last `lease_s`; answered keys expire after `result_ttl_s`."""

    def __init__(self, r: aioredis.Redis, owner: str, lease_s: float, result_ttl_s: int) -> None:
        self.r = r
        self.owner = owner
        self.lease_ms = int(lease_s * 1000)
        self.result_ttl_s = result_ttl_s
        self._acquire = r.register_script(scripts.ACQUIRE)
        self._renew = r.register_script(scripts.RENEW)
        self._release = r.register_script(scripts.RELEASE)
        self._checkpoint = r.register_script(scripts.CHECKPOINT)
        self._answer = r.register_script(scripts.ANSWER)
        self._reject = r.register_script(scripts.REJECT)

    # ------------------------------------------------------------------ leases
    async def acquire(self, qid: str) -> int:
        """Take the lease on `qid`: its new fencing epoch, or 0 if another holds it."""
        keys = [query_lease(qid), query_epoch(qid), placed(COORDINATORS_ACTIVE, qid)]
        args: list[str | int] = [self.owner, self.lease_ms, _now_ms() + self.lease_ms, qid]
        return int(await self._acquire(keys=keys, args=args) or 0)

    async def renew(self, qid: str) -> int:
        """Extend our lease: the epoch it holds, or 0 if it is no longer ours."""
        keys = [query_lease(qid), query_epoch(qid), placed(COORDINATORS_ACTIVE, qid)]
        args: list[str | int] = [self.owner, self.lease_ms, _now_ms() + self.lease_ms, qid]
        return int(await self._renew(keys=keys, args=args) or 0)

    async def release(self, qid: str) -> None:
        """Give our lease up and make the query due for the reaper at once."""
        await self._release(keys=[query_lease(qid), placed(COORDINATORS_ACTIVE, qid)], args=[self.owner, qid])

    async def leased(self, qid: str) -> bool:
        return bool(await self.r.exists(query_lease(qid)))

    async def expired(self) -> list[str]:
        """Queries whose holder stopped renewing (their lease's expiry has passed)."""
        now_ms = _now_ms()
        raw: list[bytes] = []
        for part in spread(COORDINATORS_ACTIVE):
            raw += cast(list[bytes], await self.r.zrangebyscore(part, 0, now_ms))
        return [q.decode() for q in raw]

    async def not_active(self, qid: str) -> None:
        """Nothing to reap for `qid` (answered, expired or unreadable)."""
        await self.r.zrem(placed(COORDINATORS_ACTIVE, qid), qid)

    # ------------------------------------------------------------------ a query's record
    async def submitted(self, req: SubmitQuestionRequest) -> Submitted:
        """Whether `req` is the request stored under its id (the ingress stores it as it
        queues the question, in the same script)."""
        try:
            stored = await self.request(req.query_id)
        except ProtocolError:
            return Submitted.UNREADABLE
        if stored is None:
            return Submitted.MISSING
        return Submitted.THIS if stored.msg_id == req.msg_id else Submitted.OTHER

    async def request(self, qid: str) -> SubmitQuestionRequest | None:
        """The stored request, or None; raises ProtocolError if it cannot be read."""
        key = query_request(qid)
        blob = cast(bytes | None, await self.r.get(key))
        if blob is None:
            return None
        req = decode(key, blob)
        return req if isinstance(req, SubmitQuestionRequest) else None

    async def answered(self, qid: str) -> bool:
        return bool(await self.r.exists(reply_key(qid)))

    async def known(self, qid: str) -> bool:
        """Redis has the query's state (its epoch) or its answer."""
        return bool(await self.r.exists(query_epoch(qid), reply_key(qid)))

    async def stored(self, qid: str) -> bool:
        """Redis has the query's request or its answer."""
        return bool(await self.r.exists(query_request(qid), reply_key(qid)))

    async def in_flight_again(self, req: SubmitQuestionRequest) -> None:
        """A query Redis lost, about to be searched again: stored and counted in flight again."""
        now_ms = _now_ms()
        qid = req.query_id
        await self.r.set(query_request(qid), encode(req), nx=True)
        await self.r.zadd(placed(INGRESS_IN_FLIGHT, qid), {qid: now_ms})
        await self.r.zadd(placed(client_in_flight(req.client), qid), {qid: now_ms})

    # ------------------------------------------------------------------ the inbox
    async def inbox(self, qid: str) -> Entries:
        """Every entry of the query's inbox, in order (a replay)."""
        return cast(Entries, await self.r.xrange(query_inbox(qid), "-", "+"))

    async def read_inboxes(
        self, after: dict[str, str], count: int, block_ms: int
    ) -> list[tuple[str, Entries]]:
        """New entries of the inboxes in `after` (query id -> last entry applied): one XREAD
        (one per partition on a cluster)."""
        streams = {query_inbox(q): last for q, last in after.items()}
        out = []
        for stream, entries in await read_streams(self.r, streams, count, block_ms):
            qid = query_inbox.parse(stream)
            if qid is not None:
                out.append((qid, entries))
        return out

    async def park(self, qid: str, entry_id: str, reason: str, payload: bytes) -> None:
        """An inbox entry that cannot be read (the inbox has no group): kept with its reason."""
        stream = query_inbox(qid)
        await self.r.xadd(dead_letter(stream), {"id": entry_id, "reason": reason, "e": payload})

    # ------------------------------------------------------------------ fenced writes
    async def checkpoint(self, qid: str, epoch: int, last_id: str, nodes: int) -> bool:
        """Record the last inbox entry applied; False if the lease is no longer ours."""
        script, keys, args = self.checkpoint_call(qid, epoch, last_id, nodes)
        return bool(await script(keys=keys, args=args))

    def checkpoint_call(self, qid: str, epoch: int, last_id: str, nodes: int) -> ScriptCall:
        """`checkpoint` as a script call, for the bus to send after a batch's publishes (it
        returns 1, or 0 if the lease is no longer ours)."""
        keys = [query_lease(qid), query_epoch(qid), query_checkpoint(qid)]
        return self._checkpoint, keys, [self.owner, epoch, last_id, nodes]

    async def answer(self, req: SubmitQuestionRequest, epoch: int, answer: AnswerResult) -> bool:
        """Write the answer once and let the query go; False if the lease is no longer ours."""
        qid = req.query_id
        client_key = placed(submitted_key(f"{req.client}/{req.client_key}"), qid)
        keys = [
            query_lease(qid), query_epoch(qid), reply_key(qid), *_placed(qid, ANSWERS, INGRESS_IN_FLIGHT,
            COORDINATORS_ACTIVE, client_in_flight(req.client)), query_inbox(qid), query_request(qid),
            query_checkpoint(qid), client_key, query_sent(qid), query_cancelled(qid),
        ]  # fmt: skip
        args: list[str | bytes | int] = [self.owner, epoch, encode(answer), qid, self.result_ttl_s]
        return bool(await self._answer(keys=keys, args=args))

    async def reject(self, req: SubmitQuestionRequest, reason: str) -> None:
        """Answer a question that cannot be searched as failed, whoever holds what for it."""
        qid = req.query_id
        answer = AnswerResult(msg_id=f"{qid}/answer", query_id=qid, answer=None, error=f"rejected: {reason}")
        client_key = placed(submitted_key(f"{req.client}/{req.client_key}"), qid)
        keys = [
            reply_key(qid), *_placed(qid, ANSWERS, INGRESS_IN_FLIGHT, client_in_flight(req.client)),
            query_request(qid), placed(COORDINATORS_ACTIVE, qid), query_lease(qid), query_epoch(qid),
            query_inbox(qid), query_checkpoint(qid), client_key, query_sent(qid), query_cancelled(qid),
        ]  # fmt: skip
        await self._reject(keys=keys, args=[encode(answer), qid, self.result_ttl_s])

    # ------------------------------------------------------------------ to watchers
    async def publish_tree(self, qid: str, events: list[NodeEvent]) -> None:
        """Append a query's node events to its tree stream, which lives as long as its
        answer (each write moves the expiry on)."""
        if not events:
            return
        stream = query_tree(qid)
        async with self.r.pipeline(transaction=False) as pipe:
            for event in events:
                try:
                    pipe.xadd(stream, {"e": encode(event)}, maxlen=TREE_EVENTS_KEPT, approximate=True)
                except ProtocolError:  # a step's text past the message limit: not shown
                    continue
            pipe.expire(stream, self.result_ttl_s)
            await pipe.execute()

    # ------------------------------------------------------------------ to the allocator
    async def publish_stats(self, events: list[QueryStatsEvent]) -> None:
        if not events:
            return
        async with self.r.pipeline(transaction=False) as pipe:
            for event in events:
                stream = placed(QUERY_STATS, event.query_id)
                pipe.xadd(stream, {"e": encode(event)}, maxlen=10_000, approximate=True)
            await pipe.execute()

    async def trim_fan_out(self, keep_s: dict[str, float]) -> None:
        """Trim each stream of `keep_s` (no consumer group: read as it comes) to what is
        younger than its window, by Redis's clock: an idle pipeline holds none of them long."""
        now_s, now_us = cast(tuple[int, int], await self.r.time())
        now_ms = now_s * 1000 + now_us // 1000
        async with self.r.pipeline(transaction=False) as pipe:
            for stream, seconds in keep_s.items():
                for part in spread(stream):
                    pipe.xtrim(part, minid=str(max(0, now_ms - int(seconds * 1000))), approximate=False)
            await pipe.execute()

    async def redis_run(self) -> str:
        """Redis's run id: a new one means it restarted. On a cluster, its primaries' run ids:
        a failover changes them (the promoted replica may lack the old primary's last writes,
        which asynchronous replication had not yet sent)."""
        if is_cluster(self.r):
            nodes = cast(aioredis.RedisCluster, self.r).PRIMARIES
            infos = cast(dict[str, Any], await self.r.info("server", target_nodes=nodes))  # type: ignore[call-arg]
            return ",".join(sorted(str(info.get("run_id", "")) for info in infos.values()))
        info = cast(dict[str, Any], await self.r.info("server"))
        return str(info.get("run_id", ""))
