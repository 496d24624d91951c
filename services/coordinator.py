"""Tree coordinator: adopts questions from the ingress stream under a per-query lease with a
fencing epoch, drives each query's pure state machine (`shared.coordinator.QueryMachine`),
dispatches generation and score jobs, sends cancellations, and publishes the answer.

Checkpointing is event sourcing: a query's inbox stream (`{q:<id>}:in`, never trimmed) holds
every result it received, in order, and the machine is a deterministic function of that
sequence. Whoever holds the lease replays the inbox into a fresh machine and continues: the
same tree, the same job ids (so re-dispatched jobs are dropped by the idempotent publish).
The checkpoint hash records the epoch, the last applied entry and the tree digest so far.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
import structlog
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from proto import (
    AnswerResult,
    BudgetUpdateEvent,
    CancelRequest,
    GenerateRequest,
    GenerateResult,
    Message,
    ProtocolError,
    QueryStatsEvent,
    ScoreRequest,
    ScoreResult,
    SubmitQuestionRequest,
    decode,
    encode,
)
from proto.streams import (
    ANSWERS,
    GEN_CONTROL,
    INGRESS,
    QUERY_STATS,
    SCORE_JOBS,
    dead_letter,
    gen_jobs,
    query_inbox,
    reply_key,
)
from shared.bus import Bus, Delivery
from shared.coordinator import (
    CancelCommand,
    Command,
    FinishCommand,
    GenerateCommand,
    QueryMachine,
    ScoreCommand,
    SpecPolicy,
)
from shared.ids import digest
from shared.metrics import EVENTS, QUERIES_OWNED
from shared.search import ALGORITHMS, SearchConfig
from shared.service import loop_forever, run_service
from shared.settings import Settings
from shared.spec.budget import hit_rate_estimate

__all__ = ["Coordinator", "main"]

GROUP = "coord"
ACTIVE = "coord:active"  # zset: query id -> lease expiry (ms), for the reaper
INFLIGHT = "ingress:inflight"  # questions submitted and not yet answered (backpressure)
LOCAL_SHARE = 4  # speculative jobs per query when no allocator publishes a share
STATS_EVERY_S = 0.05  # how often per-query stats go to the allocator

_ACQUIRE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local epoch = redis.call('INCR', KEYS[2])
  redis.call('ZADD', KEYS[3], ARGV[3], ARGV[4])
  return epoch
end
return false
"""

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('ZADD', KEYS[3], ARGV[3], ARGV[4])
  return tonumber(redis.call('GET', KEYS[2]))
end
return false
"""

# Fenced: only the lease holder at the current epoch may write the checkpoint or the answer.
_CHECKPOINT = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] or tonumber(redis.call('GET', KEYS[2])) ~= tonumber(ARGV[2]) then
  return 0
end
redis.call('HSET', KEYS[3], 'epoch', ARGV[2], 'last_id', ARGV[3], 'digest', ARGV[4], 'nodes', ARGV[5])
return 1
"""

_ANSWER = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] or tonumber(redis.call('GET', KEYS[2])) ~= tonumber(ARGV[2]) then
  return 0
end
if redis.call('SET', KEYS[3], ARGV[3], 'NX') then
  redis.call('XADD', KEYS[4], '*', 'e', ARGV[3])
  redis.call('DECR', KEYS[5])
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[6], ARGV[4])
return 1
"""


def _keys(qid: str) -> dict[str, str]:
    tag = f"{{q:{qid}}}"
    return {"lease": f"{tag}:lease", "epoch": f"{tag}:epoch", "ckpt": f"{tag}:ckpt", "req": f"{tag}:req"}


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
        self.handlers: dict[type[Message], Any] = {
            GenerateResult: self.on_generated,
            ScoreResult: self.on_scored,
            BudgetUpdateEvent: self.on_budget,
            CancelRequest: self.on_cancel,
        }
        self.events = 0
        self.answered = 0
        self._stats_sent = 0.0

    def summary(self) -> dict[str, Any]:
        return {"events": self.events, "answered": self.answered, "dead_lettered": self.bus.dead_lettered}

    async def run(self, stop: asyncio.Event) -> None:
        await self.bus.ensure_group(INGRESS, GROUP)
        await asyncio.gather(self._intake(stop), self._inboxes(stop), self._leases(stop))

    def _now(self) -> float:
        return time.monotonic()

    # ------------------------------------------------------------------ adoption
    async def _intake(self, stop: asyncio.Event) -> None:
        async def once() -> None:
            for d in await self.bus.read([INGRESS], GROUP, count=8, block_ms=self.settings.block_ms):
                await self._on_submitted(d)

        await loop_forever(stop, once, self.log, self.bus.reconnected)

    async def _on_submitted(self, d: Delivery) -> None:
        req = d.message
        if not isinstance(req, SubmitQuestionRequest):
            await self.bus.dead_letter(d, GROUP, f"no handler for {type(req).__name__}")
            return
        err = _validate(req)
        if err:
            await self.bus.dead_letter(d, GROUP, err)
            return
        with structlog.contextvars.bound_contextvars(query_id=req.query_id, trace_id=req.trace_id):
            try:
                await self.r.set(_keys(req.query_id)["req"], encode(req), nx=True)
                await self.adopt(req)
            except (RedisConnectionError, RedisTimeoutError):
                raise  # not the message's fault: retried after the reconnect
            except Exception as exc:  # the question itself cannot be searched: park it
                self.log.error("question_rejected", error=repr(exc))
                await self.bus.dead_letter(d, GROUP, repr(exc))
                return
        await self.bus.ack(d, GROUP)

    async def adopt(self, req: SubmitQuestionRequest) -> bool:
        """Take the lease on a query and run it from its inbox (new or interrupted)."""
        qid = req.query_id
        if qid in self.queries or await self.r.exists(reply_key(qid)):
            return False
        k = _keys(qid)
        lease_ms = int(self.settings.lease_s * 1000)
        expiry = int(time.time() * 1000) + lease_ms
        epoch = await self.r.eval(
            _ACQUIRE, 3, k["lease"], k["epoch"], ACTIVE, self.owner, lease_ms, expiry, qid
        )
        if not epoch:
            return False
        machine = QueryMachine(
            qid,
            req.prompt_tokens or max(1, len(req.question) // 4),
            SearchConfig(req.algorithm, req.target),
            req.seed,
            spec=SpecPolicy(enabled=req.mode == "spex"),
            share=LOCAL_SHARE if req.mode == "spex" else 0,
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
                qid = stream.decode()[3:-4]
                query = self.queries.get(qid)
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
            handler = self.handlers.get(type(message))
            if handler is None:
                continue
            self.events += 1
            EVENTS.labels("coordinator", self.owner, type(message).__name__).inc()
            try:
                commands = handler(query.machine, message)
            except Exception as exc:  # a bad event must not take the query (or the service) down
                self.log.error("event_failed", query_id=query.request.query_id, error=repr(exc))
                continue
            await self._execute(query, commands)
            if query.machine.done:
                break
        if not query.machine.done:
            await self._checkpoint(query)

    def on_generated(self, machine: QueryMachine, m: GenerateResult) -> list[Command]:
        return machine.on_generated(
            m.job_id, m.node_id, m.text, m.tokens, m.finish_reason, m.logprobs.mean, self._now()
        )

    def on_scored(self, machine: QueryMachine, m: ScoreResult) -> list[Command]:
        return machine.on_scored(m.node_id, m.reward, self._now())

    def on_budget(self, machine: QueryMachine, m: BudgetUpdateEvent) -> list[Command]:
        return machine.on_budget(m.share, self._now())

    def on_cancel(self, machine: QueryMachine, m: CancelRequest) -> list[Command]:
        return machine.cancel(self._now())

    # ------------------------------------------------------------------ commands
    async def _execute(self, query: _Query, commands: list[Command]) -> None:
        req, qid = query.request, query.request.query_id
        style = ALGORITHMS[req.algorithm].family
        for cmd in commands:
            if isinstance(cmd, GenerateCommand):
                ids, tokens = zip(*cmd.prompt, strict=True)
                await self.bus.publish(
                    gen_jobs(),
                    GenerateRequest(
                        msg_id=f"{qid}/{cmd.job_id}/gen",
                        query_id=qid,
                        trace_id=req.trace_id,
                        epoch=query.epoch,
                        job_id=cmd.job_id,
                        node_id=cmd.node.id,
                        parent_id=cmd.node.parent.id if cmd.node.parent else "",
                        child_index=cmd.node.index,
                        action=cmd.node.action,
                        prompt_node_ids=list(ids),
                        prompt_tokens=list(tokens),
                        seed=cmd.node.seed,
                        max_new_tokens=cmd.max_new_tokens,
                        priority=cmd.priority,
                        sim_seed=req.seed,
                        sim_style=style,
                    ),
                )
            elif isinstance(cmd, ScoreCommand):
                ids, tokens = zip(*cmd.prompt, strict=True)
                await self.bus.publish(
                    SCORE_JOBS,
                    ScoreRequest(
                        msg_id=f"{qid}/{cmd.node.id}/score",
                        query_id=qid,
                        trace_id=req.trace_id,
                        epoch=query.epoch,
                        job_id=cmd.node.id,
                        node_id=cmd.node.id,
                        prompt_node_ids=list(ids),
                        prompt_tokens=list(tokens),
                        priority=cmd.priority,
                        sim_seed=req.seed,
                    ),
                )
            elif isinstance(cmd, CancelCommand):
                await self.r.set(f"cancel:{cmd.job_id}", 1, ex=3600)
                await self.bus.publish(
                    GEN_CONTROL,
                    CancelRequest(msg_id=f"{qid}/{cmd.job_id}/cancel", query_id=qid, job_id=cmd.job_id),
                )
            elif isinstance(cmd, FinishCommand):
                await self._finish(query, cmd)

    async def _finish(self, query: _Query, cmd: FinishCommand) -> None:
        qid, m = query.request.query_id, query.machine
        answer = AnswerResult(
            msg_id=f"{qid}/answer",
            query_id=qid,
            trace_id=query.request.trace_id,
            epoch=query.epoch,
            answer=cmd.answer,
            nodes=len(m.tree) - 1,
            tokens_generated=m.stats.tokens_generated,
            latency_s=self._now() - query.started_wall,
            tree_digest=digest(m.tree.digest(), m.answer),
        )
        k = _keys(qid)
        keys = [k["lease"], k["epoch"], reply_key(qid), ANSWERS, INFLIGHT, ACTIVE]
        await self.r.eval(_ANSWER, len(keys), *keys, self.owner, query.epoch, encode(answer), qid)
        self.queries.pop(qid, None)
        QUERIES_OWNED.labels(self.owner).set(len(self.queries))
        self.answered += 1
        self.log.info(
            "query_answered", query_id=qid, answer=cmd.answer, nodes=answer.nodes, cancelled=m.cancelled
        )

    async def _checkpoint(self, query: _Query) -> None:
        qid, k = query.request.query_id, _keys(query.request.query_id)
        keys = [k["lease"], k["epoch"], k["ckpt"]]
        ok = await self.r.eval(
            _CHECKPOINT, 3, *keys, self.owner, query.epoch, query.last_id, query.machine.tree.digest(),
            len(query.machine.tree),
        )  # fmt: skip
        if not ok:
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
            k = _keys(qid)
            keys = [k["lease"], k["epoch"], ACTIVE]
            epoch = await self.r.eval(_RENEW, 3, *keys, self.owner, lease_ms, now_ms + lease_ms, qid)
            if not epoch or int(epoch) != self.queries[qid].epoch:
                self._lost(qid)
        # A coordinator that died between reading a question and taking its lease left the
        # question pending in the ingress group: take it over.
        for d in await self.bus.reclaim(INGRESS, GROUP, 2 * lease_ms):
            await self._on_submitted(d)
        expired: Any = await self.r.zrangebyscore(ACTIVE, 0, now_ms)
        for raw in expired:
            qid = raw.decode()
            if qid in self.queries or await self.r.exists(_keys(qid)["lease"]):
                continue
            blob: Any = await self.r.get(_keys(qid)["req"])
            if blob is not None:
                req = decode(INGRESS, blob)
                assert isinstance(req, SubmitQuestionRequest)
                if await self.adopt(req):
                    self.log.info("query_taken_over", query_id=qid)

    async def _publish_stats(self) -> None:
        """What the budget allocator needs per speculating query (C_q, P_q, S_KV, load)."""
        for qid, query in self.queries.items():
            m = query.machine
            if not m.spec.enabled:
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


def _validate(req: SubmitQuestionRequest) -> str:
    if req.algorithm not in ALGORITHMS:
        return f"algorithm: unknown {req.algorithm!r}"
    if req.target < 1:
        return f"target: must be at least 1, not {req.target}"
    if req.mode not in ("baseline", "spex"):
        return f"mode: must be baseline or spex, not {req.mode!r}"
    return ""


def main() -> int:
    return run_service("coordinator", Coordinator)


if __name__ == "__main__":
    raise SystemExit(main())
