"""The coordinator's state in Redis: every key it owns, the order of their arguments, and its
Lua scripts (`scripts`), registered once and run by SHA (redis-py loads a script again when
a restarted Redis has forgotten it).

A query's keys share its hash tag (`{q:<id>}`), so each script touches one cluster slot; the
global sets (in-flight, active leases), the answers stream and the client key join them on a
cluster, where each is split into partitions and a query's keys take its partition's tag
(`Partitions.placed`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

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
    INGRESS_RESERVED,
    INGRESS_RESERVED_TOTAL,
    QUERY_STATS,
    Partitions,
    client_in_flight,
    dead_letter,
    query_cancelled,
    query_checkpoint,
    query_epoch,
    query_inbox,
    query_lease,
    query_request,
    query_sent,
    query_tree,
    query_tree_record,
    reply_key,
    submitted_key,
)
from spex.proto.text import as_str
from spex.proto.tree_record import TREE_EVENTS_KEPT, pack_tree
from spex.services.coordinator import scripts
from spex.services.coordinator.reports import Adoption, Entries, Fence, Found, Submitted
from spex.shared.runtime.availability import refusal
from spex.shared.runtime.bus import DEAD_LETTER_TTL_S, DEAD_LETTERS_KEPT, dead_letter_fields
from spex.shared.runtime.client import KEY_BACKSTOP_S, client_key_record
from spex.shared.runtime.reserve import request_bytes
from spex.shared.runtime.streams import ScriptCall, is_cluster, read_streams

__all__ = ["SEARCH_KEPT_S", "QueryStore"]

RENEW_BATCH = 1_000  # leases renewed by one script call (a few ms of Redis's time)
# What only a query's search reads (its inbox, checkpoint, sent ids, cancel marks) is kept this
# long after its answer, at most: a late look at what it received (an operator's, a test's).
SEARCH_KEPT_S = 60


def _now_ms() -> int:
    return int(time.time() * 1000)


class QueryStore:
    """One coordinator's reads and writes of query state. `owner` is its consumer name (the
    lease holder's mark); leases last `lease_s`; answered keys expire after `result_ttl_s`."""

    def __init__(
        self, r: aioredis.Redis, owner: str, lease_s: float, result_ttl_s: int, per_target: int = 0, *,
        partitions: Partitions,
    ) -> None:  # fmt: skip
        """`per_target`: SPEX_MEMORY_PER_TARGET (a query's reserve, `reserve.search_bytes`).
        `partitions`: the deployment's (every key built here is of its count)."""
        self.r = r
        self.partitions = partitions
        self.per_target = per_target
        self.owner = owner
        self.lease_ms = int(lease_s * 1000)
        self.result_ttl_s = result_ttl_s
        self.search_kept_s = min(SEARCH_KEPT_S, result_ttl_s)
        self._adopt = r.register_script(scripts.ADOPT)
        self._renew_all = r.register_script(scripts.RENEW_ALL)
        self._release = r.register_script(scripts.RELEASE)
        self._checkpoint = r.register_script(scripts.CHECKPOINT)
        self._answer = r.register_script(scripts.ANSWER)
        self._reject = r.register_script(scripts.REJECT)
        self._recount = r.register_script(scripts.RECOUNT)
        self._restore = r.register_script(scripts.RESTORE)
        self._tree = r.register_script(scripts.TREE)

    def _placed(self, qid: str, *names: str) -> list[str]:
        return [self.partitions.placed(name, qid) for name in names]

    # ------------------------------------------------------------------ leases
    async def adopt(self, qid: str, read_request: bool) -> Adoption:
        """Adopt `qid` in one round trip (`scripts.ADOPT`): nothing if it is answered (or, with
        `read_request`, if no request is stored); else the lease if it is free, with the
        inbox to replay; the stored request with either, where `read_request`."""
        p = self.partitions
        keys = [
            query_lease(qid, p), query_epoch(qid, p), p.placed(COORDINATORS_ACTIVE, qid), reply_key(qid, p),
            query_request(qid, p), query_inbox(qid, p),
        ]  # fmt: skip
        args: list[str | int] = [self.owner, self.lease_ms, _now_ms() + self.lease_ms, qid, int(read_request)]
        found, *rest = cast(list[Any], await self._adopt(keys=keys, args=args))
        stored = rest[0] if rest else None
        if Found(as_str(found)) is not Found.TAKEN:
            return Adoption(Found(as_str(found)), stored)
        inbox: Entries = [(i, dict(zip(f[::2], f[1::2], strict=True))) for i, f in rest[2]]
        return Adoption(Found.TAKEN, stored, int(rest[1]), inbox)

    def decoded(self, qid: str, blob: bytes | None) -> SubmitQuestionRequest | None:
        """The request stored under `qid` (as read: `blob`), or None; raises ProtocolError if it
        cannot be read."""
        req = None if blob is None else decode(query_request(qid, self.partitions), blob)
        return req if isinstance(req, SubmitQuestionRequest) else None

    def verdict(self, req: SubmitQuestionRequest, blob: bytes | None) -> Submitted:
        """Whether `req` is the request stored under its id (as read: `blob`)."""
        try:
            stored = self.decoded(req.query_id, blob)
        except ProtocolError:
            return Submitted.UNREADABLE
        if stored is None:
            return Submitted.MISSING
        return Submitted.THIS if stored.msg_id == req.msg_id else Submitted.OTHER

    async def renew_all(self, qids: list[str]) -> dict[str, int]:
        """Extend our leases on `qids`: the epoch each holds, 0 where it is no longer ours.
        One script per slot (a query's keys and its part of the active set share one: on a
        single Redis there is one), all sent at once, so a round is one round trip however many
        queries are held; calls of at most `RENEW_BATCH` queries keep each script short."""
        groups: dict[str, list[str]] = {}
        for qid in qids:
            groups.setdefault(self.partitions.placed(COORDINATORS_ACTIVE, qid), []).append(qid)
        calls = [
            (active, batch[i : i + RENEW_BATCH]) for active, batch in groups.items()
            for i in range(0, len(batch), RENEW_BATCH)
        ]  # fmt: skip
        expiry_ms = _now_ms() + self.lease_ms
        if is_cluster(self.r):  # a pipeline reaches one node: a call per slot, concurrently
            replies = await asyncio.gather(
                *(self._renew_call(active, batch, expiry_ms) for active, batch in calls)
            )
        else:
            async with self.r.pipeline(transaction=False) as pipe:
                for active, batch in calls:
                    await self._renew_call(active, batch, expiry_ms, pipe)
                replies = await pipe.execute()
        epochs = [(batch, reply) for (_, batch), reply in zip(calls, replies, strict=True)]
        return {q: int(e or 0) for batch, reply in epochs for q, e in zip(batch, reply, strict=True)}

    def _renew_call(self, active: str, batch: list[str], expiry_ms: int, pipe: Any = None) -> Any:
        p = self.partitions
        keys = [active] + [k for q in batch for k in (query_lease(q, p), query_epoch(q, p))]
        args: list[str | int] = [self.owner, self.lease_ms, expiry_ms, *batch]
        return self._renew_all(keys=keys, args=args, client=pipe)

    async def release(self, qid: str) -> None:
        """Give our lease up and make the query due for the reaper at once."""
        p = self.partitions
        await self._release(
            keys=[query_lease(qid, p), p.placed(COORDINATORS_ACTIVE, qid)], args=[self.owner, qid]
        )

    async def expired(self) -> list[str]:
        """Queries whose holder stopped renewing (their lease's expiry has passed)."""
        now_ms = _now_ms()
        raw: list[bytes] = []
        for part in self.partitions.spread(COORDINATORS_ACTIVE):
            raw += cast(list[bytes], await self.r.zrangebyscore(part, 0, now_ms))
        return [q.decode() for q in raw]

    async def not_active(self, qid: str) -> None:
        """Nothing to reap for `qid` (answered, expired or unreadable)."""
        await self.r.zrem(self.partitions.placed(COORDINATORS_ACTIVE, qid), qid)

    # ------------------------------------------------------------------ a query's record
    async def submitted(self, req: SubmitQuestionRequest) -> Submitted:
        """Whether `req` is the request stored under its id (the ingress stores it as it
        queues the question, in the same script)."""
        blob = cast(bytes | None, await self.r.get(query_request(req.query_id, self.partitions)))
        return self.verdict(req, blob)

    async def answered(self, qid: str) -> bool:
        return bool(await self.r.exists(reply_key(qid, self.partitions)))

    async def known(self, qid: str) -> bool:
        """Redis has the query's state (its epoch) or its answer."""
        p = self.partitions
        return bool(await self.r.exists(query_epoch(qid, p), reply_key(qid, p)))

    async def stored(self, qid: str) -> bool:
        """Redis has the query's request or its answer."""
        p = self.partitions
        return bool(await self.r.exists(query_request(qid, p), reply_key(qid, p)))

    async def in_flight_again(self, req: SubmitQuestionRequest) -> str:
        """A query Redis lost, about to be searched again: stored and counted in flight again, its
        reserve held and its client key kept again (a retry under the key finds this query, not a
        new one) — unless a question posted again under the key since holds it: that query's id
        (the same question is searched there), else "" (`scripts.RESTORE`)."""
        p = self.partitions
        qid = req.query_id
        client_key, record = client_key_record(req, p)
        keys = [
            client_key, query_request(qid, p),
            *self._placed(qid, INGRESS_IN_FLIGHT, client_in_flight(req.client, p), INGRESS_RESERVED,
                          INGRESS_RESERVED_TOTAL, COORDINATORS_ACTIVE),
        ]  # fmt: skip
        held = request_bytes(req, self.per_target)
        args: list[str | bytes | int] = [record, encode(req), _now_ms(), held, KEY_BACKSTOP_S, qid]
        return as_str(await self._restore(keys=keys, args=args))

    # ------------------------------------------------------------------ the inbox
    async def read_inboxes(
        self, after: dict[str, str], count: int, block_ms: int
    ) -> list[tuple[str, Entries]]:
        """New entries of the inboxes in `after` (query id -> last entry applied): one XREAD
        (one per partition on a cluster)."""
        streams = {query_inbox(q, self.partitions): last for q, last in after.items()}
        out = []
        for stream, entries in await read_streams(self.r, streams, count, block_ms):
            qid = query_inbox.parse(stream)
            if qid is not None:
                out.append((qid, entries))
        return out

    async def park(self, qid: str, entry_id: str, reason: str, payload: bytes) -> None:
        """An inbox entry that cannot be read (the inbox has no group): kept with its reason,
        bounded as every dead letter is (`bus.dead_letter_fields`)."""
        parked = dead_letter(query_inbox(qid, self.partitions))
        async with self.r.pipeline(transaction=False) as pipe:
            fields = {"id": entry_id, **dead_letter_fields(reason, payload)}
            pipe.xadd(parked, fields, maxlen=DEAD_LETTERS_KEPT, approximate=True)  # type: ignore[arg-type]
            pipe.expire(parked, DEAD_LETTER_TTL_S)
            await pipe.execute()

    # ------------------------------------------------------------------ fenced writes
    async def checkpoint(self, qid: str, epoch: int, last_id: str, nodes: int) -> Fence:
        """Record the last inbox entry applied (unless the lease is no longer ours)."""
        script, keys, args = self.checkpoint_call(qid, epoch, last_id, nodes)
        return Fence(int(await script(keys=keys, args=args)))

    def checkpoint_call(self, qid: str, epoch: int, last_id: str, nodes: int) -> ScriptCall:
        """`checkpoint` as a script call, for the bus to send after a batch's publishes (it
        returns a `Fence`'s value)."""
        p = self.partitions
        keys = [query_lease(qid, p), query_epoch(qid, p), query_checkpoint(qid, p)]
        return self._checkpoint, keys, [self.owner, epoch, last_id, nodes]

    async def answer(self, req: SubmitQuestionRequest, epoch: int, answer: AnswerResult) -> Fence:
        """Write the answer once and let the query go, its tree stream packed into one record
        (`tree_record`) and what only its search read let go soon (`SEARCH_KEPT_S`), unless the
        lease is no longer ours."""
        p = self.partitions
        qid = req.query_id
        client_key = p.placed(submitted_key(f"{req.client}/{req.client_key}", p), qid)
        in_flight = client_in_flight(req.client, p)
        keys = [
            query_lease(qid, p), query_epoch(qid, p), reply_key(qid, p),
            *self._placed(qid, ANSWERS, INGRESS_IN_FLIGHT, COORDINATORS_ACTIVE, in_flight),
            query_inbox(qid, p), query_request(qid, p), query_checkpoint(qid, p), client_key,
            query_sent(qid, p), query_cancelled(qid, p), query_tree(qid, p), query_tree_record(qid, p),
            *self._placed(qid, INGRESS_RESERVED, INGRESS_RESERVED_TOTAL),
        ]  # fmt: skip
        args: list[str | bytes | int] = [
            self.owner, epoch, encode(answer), qid, self.result_ttl_s, await self._tree_record(qid),
            self.search_kept_s,
        ]  # fmt: skip
        return Fence(int(await self._answer(keys=keys, args=args)))

    async def _tree_record(self, qid: str) -> bytes:
        """The query's tree stream packed into its record (b"": it has no tree stream)."""
        entries = cast(Entries, await self.r.xrange(query_tree(qid, self.partitions), "-", "+"))
        if not entries:
            return b""
        return pack_tree([(as_str(entry_id), (fields or {}).get(b"e", b"")) for entry_id, fields in entries])

    async def reject(
        self, req: SubmitQuestionRequest, reason: str, verdict: str = "rejected", keyed: bool = True
    ) -> None:
        """Answer a question that cannot be searched (or need not be: `verdict`) as failed,
        whoever holds what for it; its client key left alone unless `keyed` (another question's
        now)."""
        p = self.partitions
        qid = req.query_id
        answer = AnswerResult(msg_id=f"{qid}/answer", query_id=qid, answer=None, error=f"{verdict}: {reason}")
        client_key = query_request(qid, p)
        if keyed:
            client_key = p.placed(submitted_key(f"{req.client}/{req.client_key}", p), qid)
        in_flight = client_in_flight(req.client, p)
        keys = [
            reply_key(qid, p), *self._placed(qid, ANSWERS, INGRESS_IN_FLIGHT, in_flight),
            query_request(qid, p), p.placed(COORDINATORS_ACTIVE, qid), query_lease(qid, p),
            query_epoch(qid, p), query_inbox(qid, p), query_checkpoint(qid, p), client_key,
            query_sent(qid, p), query_cancelled(qid, p),
            *self._placed(qid, INGRESS_RESERVED, INGRESS_RESERVED_TOTAL),
        ]  # fmt: skip
        await self._reject(keys=keys, args=[encode(answer), qid, self.result_ttl_s, self.search_kept_s])

    # ------------------------------------------------------------------ to watchers
    async def publish_tree(self, qid: str, events: list[NodeEvent]) -> None:
        """Append a query's node events to its tree stream (`scripts.TREE`), which its answer
        packs into a record (`answer`); a write after that (a coordinator that lost the query)
        expires as the answer does (each write moves the expiry on)."""
        payloads = []
        for event in events:
            try:
                payloads.append(encode(event))
            except ProtocolError:  # a step's text past the message limit: not shown
                continue
        if payloads:
            await self._tree(
                keys=[query_tree(qid, self.partitions)], args=[self.result_ttl_s, TREE_EVENTS_KEPT, *payloads]
            )

    # ------------------------------------------------------------------ to the allocator
    async def publish_stats(self, events: list[QueryStatsEvent]) -> None:
        """Telemetry for the allocator: Redis refusing it (at its maxmemory, say) skips a round."""
        if not events:
            return
        try:
            async with self.r.pipeline(transaction=False) as pipe:
                for event in events:
                    stream = self.partitions.placed(QUERY_STATS, event.query_id)
                    pipe.xadd(stream, {"e": encode(event)}, maxlen=10_000, approximate=True)
                await pipe.execute()
        except ResponseError as exc:
            if refusal(exc) is None:
                raise

    async def trim_fan_out(self, keep_s: dict[str, float]) -> None:
        """Trim each stream of `keep_s` (no consumer group: read as it comes) to what is
        younger than its window, by Redis's clock: an idle pipeline holds none of them long."""
        now_s, now_us = cast(tuple[int, int], await self.r.time())
        now_ms = now_s * 1000 + now_us // 1000
        async with self.r.pipeline(transaction=False) as pipe:
            for stream, seconds in keep_s.items():
                for part in self.partitions.spread(stream):
                    pipe.xtrim(part, minid=str(max(0, now_ms - int(seconds * 1000))), approximate=False)
            await pipe.execute()

    async def recount_reserves(self) -> int:
        """The searches' reserves recounted on every partition (`scripts.RECOUNT`): their total."""
        names = (INGRESS_RESERVED, INGRESS_RESERVED_TOTAL, INGRESS_IN_FLIGHT)
        parts = zip(*map(self.partitions.spread, names), strict=True)
        return sum([int(await self._recount(keys=list(keys))) for keys in parts])

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
