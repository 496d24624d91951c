"""Generator worker (one per GPU): takes generation jobs up to its free engine slots, runs them
on its engine concurrently, publishes results to the query's inbox, aborts on cancel,
heartbeats long jobs and reclaims the jobs of a dead peer.

Engines (`SPEX_ENGINE`): `sim` — the simulated GPU in scaled real time (`SPEX_TIME_SCALE`);
`hf` — the in-process PyTorch engine (`SPEX_MODEL`), its steps in a worker thread; `vllm` or
`sglang` — a serving engine at `SPEX_ENGINE_URL` (one server per worker), waited for and its
flags checked before the worker takes a job. A job's
content says what to write: `synthetic` — the workload's step (on a real engine, exactly its
number of tokens), so results equal the virtual-time benchmark's; `real` — the model's own
step, prompted with the question and the steps on the path, up to the step delimiter.
"""

from __future__ import annotations

import asyncio
import time
from functools import partial
from typing import Any

import redis.asyncio as aioredis
import structlog

from spex.proto import (
    CONTENTS,
    CancelRequest,
    GenerateRequest,
    GenerateResult,
    LogprobSummary,
    ProtocolError,
    WorkerLoadEvent,
    decode,
    encode,
)
from spex.proto.names import (
    DEFAULT_POOL,
    GEN_CONTROL,
    GEN_WORKERS,
    GENERATOR_GROUP,
    gen_jobs,
    query_inbox,
    query_request,
    worker_jobs,
    worker_load,
)
from spex.shared.content.prompts import STEP_DELIMITER, prompt_pieces
from spex.shared.engine.api import UNTIL_STOP, Completion, EngineRequest
from spex.shared.roofline.hardware import parse_profile
from spex.shared.runtime.bus import Bus, Delivery
from spex.shared.runtime.jobs import engine_template, job_wanted, tell_query
from spex.shared.runtime.metrics import EVENTS, JOBS, JOBS_IN_FLIGHT
from spex.shared.runtime.service import guarded, loop_forever, run_service
from spex.shared.runtime.settings import Settings
from spex.shared.sim.engine import EngineConfig, SimEngine
from spex.shared.sim.realtime import RealtimeEngine
from spex.shared.sim.workload import Generation, SyntheticWorkload, WorkloadKnobs

__all__ = ["Generator", "main"]

LOAD_REPORT_S = 0.05  # how often load is published for the budget allocator
FORGET_S = 60.0  # a worker dead this long, its stream drained, leaves GEN_WORKERS

# The load report: the key (its TTL is liveness) and the worker's entry in GEN_WORKERS,
# stamped with Redis's clock (so no worker's clock skew matters).
REPORT = """
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local t = redis.call('TIME')
redis.call('ZADD', KEYS[2], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), ARGV[3])
"""
# Forget a dead worker: still dead (no load key), last seen FORGET_S ago by Redis's clock, its
# stream empty (all it had was done and trimmed). Checked and done at once, so a worker that
# comes back meanwhile keeps its entry.
FORGET = """
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
local seen = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not seen then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now - tonumber(seen) < tonumber(ARGV[2]) then return 0 end
if redis.call('EXISTS', KEYS[3]) == 1 and redis.call('XLEN', KEYS[3]) > 0 then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[3])
return 1
"""


class Generator:
    def __init__(self, client: aioredis.Redis, settings: Settings, pool: str = DEFAULT_POOL) -> None:
        self.bus = Bus(client, settings.consumer, settings.max_deliveries)
        self.settings = settings
        self.pool = pool
        self.own = worker_jobs(pool, settings.consumer)  # jobs routed to us by prefix affinity
        self.shared = gen_jobs(pool)  # jobs no worker had room for, or unrouted ones
        self.streams = [self.own, self.shared]
        self.adopted: list[str] = []  # streams of dead peers, read before ours
        self._grouped: set[str] = set()  # dead peers' streams whose group we made sure of
        self.engine = _engine(settings)
        self.template = engine_template(self.engine)  # a real engine reads text
        self.running: dict[str, tuple[Delivery, GenerateRequest, Generation | None]] = {}
        self.log = structlog.get_logger().bind(service="generator", consumer=settings.consumer)
        self.handlers = {GenerateRequest: self.on_generate, CancelRequest: self.on_cancel}
        self.bus.on_dead = partial(tell_query, self.bus)
        self.done = 0
        self.aborted = 0
        self._control_last = "$"

    async def prepare(self) -> None:
        """Before any job: a serving engine must answer and have the flags we need."""
        start = getattr(self.engine, "start", None)
        if start is not None:
            await start()

    def summary(self) -> dict[str, Any]:
        return {"jobs_done": self.done, "jobs_aborted": self.aborted, "dead_lettered": self.bus.dead_lettered}

    async def run(self, stop: asyncio.Event) -> None:
        for stream in self.streams:
            await self.bus.ensure_group(stream, GENERATOR_GROUP)
        tasks = [
            self._intake(stop),
            self.engine.run(guarded(self._on_complete, self.log), stop),
            self._control(stop),
            self._heartbeats(stop),
            self._adoption(stop),
            self._load_reports(stop),
        ]
        await asyncio.gather(*tasks)

    # ------------------------------------------------------------------ handlers
    async def on_generate(self, d: Delivery) -> None:
        req = d.message
        assert isinstance(req, GenerateRequest)
        if req.job_id in self.running:  # our own pending entry, redelivered after a reconnect
            return
        if not await job_wanted(self.bus.r, req.query_id, req.job_id):
            # Cancelled while queued, or its query is unknown or answered: never starts.
            await self.bus.ack(d, GENERATOR_GROUP)
            self.aborted += 1
            return
        problem = _job_problem(req, real_engine=self.template is not None)
        if problem:
            await self.bus.dead_letter(d, GENERATOR_GROUP, problem)
            return
        prompt = tuple(zip(req.prompt_node_ids, req.prompt_tokens, strict=True))
        gen = None
        if req.content == "real":
            tokens, stop = UNTIL_STOP, tuple(req.stop) or (STEP_DELIMITER,)
        else:
            workload = SyntheticWorkload(WorkloadKnobs(), req.sim_seed, req.sim_style)
            gen = workload.generate(workload.question(req.query_id), [*req.prompt_node_ids[1:], req.node_id])
            tokens, stop = min(gen.tokens, req.max_new_tokens), ()
        request = EngineRequest(
            req.job_id,
            prompt,
            req.node_id,
            tokens,
            req.max_new_tokens,
            req.priority,
            req.seed,
            req.temperature,
            stop,
        )
        if self.template is not None:
            request.text = tuple(prompt_pieces(req.question, req.steps, self.template))
        try:
            self.engine.submit(request)
        except ValueError as exc:  # refused (e.g. more KV than the engine holds): this job's fault
            await self.bus.dead_letter(d, GENERATOR_GROUP, f"engine: {exc}")
            return
        self.running[req.job_id] = (d, req, gen)

    async def on_cancel(self, d: Delivery) -> None:
        msg = d.message
        assert isinstance(msg, CancelRequest)
        for completion in self.engine.abort(msg.job_id):
            await self._on_complete(completion)
        await self.bus.ack(d, GENERATOR_GROUP)

    async def _on_complete(self, c: Completion) -> None:
        entry = self.running.pop(c.rid, None)
        if entry is None:
            return
        d, req, gen = entry
        JOBS.labels("generator", self.settings.consumer, c.reason).inc()
        if c.reason == "error":  # the engine refused or failed it: park it with the reason
            self.log.error("job_failed", job_id=req.job_id, query_id=req.query_id, error=c.text)
            await self.bus.dead_letter(d, GENERATOR_GROUP, f"engine: {c.text}")
            return
        if c.reason == "abort":
            self.aborted += 1
            self.log.info("job_cancelled", job_id=req.job_id, query_id=req.query_id, tokens=c.generated)
            await self.bus.ack(d, GENERATOR_GROUP)
            return
        result = GenerateResult(
            msg_id=f"{req.query_id}/{req.job_id}/result",
            query_id=req.query_id,
            trace_id=req.trace_id,
            attempt=req.attempt,
            epoch=req.epoch,
            job_id=req.job_id,
            node_id=req.node_id,
            text=gen.text if gen is not None else c.text.strip(),
            tokens=c.generated,
            cached_tokens=c.cached_tokens,
            finish_reason=gen.finish_reason if gen is not None else c.stop_reason or "stop",
            logprobs=_logprobs(gen, c),
            worker=self.settings.consumer,
        )
        # Result first, then the owner-checked ack: a crash in between redelivers the job and
        # the duplicate result (same message id) is dropped by the idempotent publish.
        await self.bus.publish(query_inbox(req.query_id), result, require=query_request(req.query_id))
        if not await self.bus.ack(d, GENERATOR_GROUP):  # we stalled; a peer owns the job now
            self.log.warning("job_taken_over", job_id=req.job_id, query_id=req.query_id)
        self.done += 1

    # ------------------------------------------------------------------ loops
    async def _dispatch(self, d: Delivery) -> None:
        handler = self.handlers.get(type(d.message))
        if handler is None:
            await self.bus.dead_letter(d, GENERATOR_GROUP, f"no handler for {type(d.message).__name__}")
            return
        EVENTS.labels("generator", self.settings.consumer, type(d.message).__name__).inc()
        with structlog.contextvars.bound_contextvars(query_id=d.message.query_id, entry_id=d.entry_id):
            try:
                await handler(d)
            except Exception as exc:  # left unacknowledged: reclaimed, retried, then dead-lettered
                self.log.error("handler_failed", error=repr(exc), deliveries=d.deliveries)

    async def _intake(self, stop: asyncio.Event) -> None:
        """Up to our free slots, never more: a dead peer's stream first (its queries wait on
        it), then our own, then the shared one; when all are empty, wait on ours and the
        shared one. (XREADGROUP counts per stream, so each read asks for what is left.)"""

        async def once() -> None:
            free = self.settings.worker_slots - len(self.running)
            if free <= 0 or not getattr(self.engine, "healthy", True):
                await asyncio.sleep(0.01 if free <= 0 else 0.1)
                return
            held = {d.entry_id for d, _, _ in self.running.values()}
            taken: list[Delivery] = []
            for stream in [*self.adopted, *self.streams]:
                if len(taken) < free:
                    taken += await self.bus.read(
                        [stream], GENERATOR_GROUP, count=free - len(taken), block_ms=None, held=held
                    )
            if not taken:
                streams = self.streams if free > 1 else [self.own]
                block = self.settings.block_ms
                count = free // len(streams)
                taken = await self.bus.read(streams, GENERATOR_GROUP, count=count, block_ms=block, held=held)
            for d in taken:
                await self._dispatch(d)

        await loop_forever(stop, once, self.log, self.bus.reconnected)

    async def _control(self, stop: asyncio.Event) -> None:
        async def once() -> None:
            replies: Any = await self.bus.r.xread(
                {GEN_CONTROL: self._control_last}, count=100, block=self.settings.block_ms
            )
            for _, entries in replies or []:
                for entry_id, fields in entries:
                    self._control_last = entry_id
                    try:
                        msg = decode(GEN_CONTROL, (fields or {}).get(b"e", b""))
                    except ProtocolError as exc:  # a fan-out stream has no group to park it in
                        self.log.warning("control_message_malformed", entry_id=str(entry_id), error=str(exc))
                        continue
                    if isinstance(msg, CancelRequest):
                        for completion in self.engine.abort(msg.job_id):
                            await guarded(self._on_complete, self.log)(completion)

        await loop_forever(stop, once, self.log, self.bus.reconnected)

    async def _heartbeats(self, stop: asyncio.Event) -> None:
        async def once() -> None:
            await asyncio.sleep(self.settings.heartbeat_s)
            by_stream: dict[str, list[str]] = {}
            for d, _, _ in self.running.values():
                by_stream.setdefault(d.stream, []).append(d.entry_id)
            for stream, ids in by_stream.items():
                lost = await self.bus.heartbeat(stream, GENERATOR_GROUP, ids)
                if lost:  # we stalled and a peer took these over: stop them here, rejoin the group
                    self._drop(stream, lost)
            # Jobs of a peer that stopped heartbeating (three periods) are ours now.
            idle_ms = int(3 * self.settings.heartbeat_s * 1000)
            for stream in self.streams:
                free = self.settings.worker_slots - len(self.running)
                if free > 0:  # a full worker leaves them to a peer with room
                    for d in await self.bus.reclaim(stream, GENERATOR_GROUP, idle_ms, count=free):
                        self.log.info("job_reclaimed", entry_id=d.entry_id, deliveries=d.deliveries)
                        await self._dispatch(d)
                await self.bus.trim_now_and_then(stream)

        await loop_forever(stop, once, self.log, self.bus.reconnected)

    async def _adoption(self, stop: asyncio.Event) -> None:
        """Apart from the heartbeats, so draining many dead peers never delays ours."""

        async def once() -> None:
            await asyncio.sleep(self.settings.heartbeat_s)
            await self._drain_dead_peers(int(3 * self.settings.heartbeat_s * 1000))

        await loop_forever(stop, once, self.log, self.bus.reconnected)

    async def _drain_dead_peers(self, idle_ms: int) -> None:
        """A worker that died (its load key expired: Redis's clock, not ours) leaves its own
        stream: the jobs it held, claimed here once idle, and those routed to it that it never
        read, which the intake reads before anything else (`adopted`). The coordinators route
        its queries elsewhere as soon as its key expired. A worker dead for FORGET_S whose
        stream is empty is forgotten, and its stream deleted."""
        members: Any = await self.bus.r.zrange(GEN_WORKERS, 0, -1)
        peers = [m.decode() if isinstance(m, bytes) else str(m) for m in members]
        peers = [p for p in peers if p != self.settings.consumer]
        alive: Any = await self.bus.r.mget([worker_load(p) for p in peers]) if peers else []
        adopted = []
        for peer, load in zip(peers, alive, strict=True):
            if load is not None:
                continue
            stream = worker_jobs(self.pool, peer)
            if stream not in self._grouped:  # once per dead peer, not every round
                await self.bus.ensure_group(stream, GENERATOR_GROUP)
                self._grouped.add(stream)
            free = self.settings.worker_slots - len(self.running)
            claimed = await self.bus.reclaim(stream, GENERATOR_GROUP, idle_ms, count=free) if free > 0 else []
            for d in claimed:
                self.log.info("job_adopted", worker=peer, entry_id=d.entry_id)
                await self._dispatch(d)
            await self.bus.trim_now_and_then(stream)
            keys = [GEN_WORKERS, worker_load(peer), stream]
            if await self.bus.r.eval(FORGET, len(keys), *keys, peer, int(FORGET_S * 1000)):
                self.bus.forget(stream)
                self._grouped.discard(stream)
                self.log.info("worker_forgotten", worker=peer)
            else:
                adopted.append(stream)
        self.adopted = adopted

    def _drop(self, stream: str, entry_ids: set[str]) -> None:
        for job_id, (d, req, _) in list(self.running.items()):
            if d.stream == stream and d.entry_id in entry_ids:
                del self.running[job_id]
                self.engine.abort(job_id)
                self.log.warning("job_taken_over", job_id=job_id, query_id=req.query_id)

    async def _load_reports(self, stop: asyncio.Event) -> None:
        async def once() -> None:
            await self._report_load()
            await asyncio.sleep(LOAD_REPORT_S)

        await loop_forever(stop, once, self.log, self.bus.reconnected)

    async def _report_load(self) -> None:
        """Liveness and load, readable by schedulers and autoscalers (expires if we die, and
        is not renewed while our engine cannot be reached: the coordinators then place our
        queries elsewhere and peers drain our stream)."""
        consumer = self.settings.consumer
        if not getattr(self.engine, "healthy", True):
            return
        JOBS_IN_FLIGHT.labels("generator", consumer).set(len(self.running))
        load = self.engine.load()
        event = WorkerLoadEvent(
            msg_id=f"load/{consumer}/{time.monotonic_ns()}",
            query_id="",
            worker=consumer,
            primary=load.primary,
            primary_ctx=load.primary_ctx,
            spec=load.spec,
            running=load.running,
            waiting=load.waiting,
            kv_held=load.kv_held,
            kv_capacity=load.kv_capacity,
            prefix_cache_hit_rate=load.prefix_cache_hit_rate,
            jobs_done=self.done,
            jobs=len(self.running),
            slots=self.settings.worker_slots,
            queries=len({req.query_id for _, req, _ in self.running.values()}),
            prompt_tokens=load.prompt_tokens,
            cached_tokens=load.cached_tokens,
            primary_steps=load.primary_steps,
            primary_step_s=load.primary_step_s,
            primary_alone_s=load.primary_alone_s,
        )
        ttl_ms = int(3 * self.settings.heartbeat_s * 1000)  # liveness: gone three heartbeats after we die
        keys = [worker_load(consumer), GEN_WORKERS]
        await self.bus.r.eval(REPORT, len(keys), *keys, encode(event), ttl_ms, consumer)


def _engine(settings: Settings) -> RealtimeEngine | Any:
    if settings.engine == "sim":
        sim = EngineConfig(spec_step_slack=settings.tpot_slack)  # as in the virtual-time bench
        return RealtimeEngine(SimEngine(parse_profile(settings.profile), sim), settings.time_scale)
    if settings.engine in ("vllm", "sglang"):
        from spex.shared.serving import open_engine

        s = settings
        return open_engine(s.engine, s.engine_url, s.engine_timeout_s, s.model, s.deterministic)
    from spex.shared.hf.engine import HFConfig, HFEngine
    from spex.shared.hf.threaded import ThreadedEngine

    config = HFConfig(settings.max_running, deterministic=settings.deterministic, device=settings.device)
    return ThreadedEngine(HFEngine.from_dir(settings.model, config))


def _job_problem(req: GenerateRequest, real_engine: bool) -> str:
    """Why this worker cannot run `req` (a one-line reason), or "" if it can."""
    if req.content not in CONTENTS:
        return f"content: unknown {req.content!r}"
    if req.content == "real" and not real_engine:
        return "real content needs a real engine (SPEX_ENGINE=hf, vllm or sglang)"
    if req.content == "synthetic" and req.sim_style not in ("dfs", "bfs"):
        return f"sim_style: unknown {req.sim_style!r}; known: dfs, bfs"
    if not req.prompt_node_ids or len(req.prompt_node_ids) != len(req.prompt_tokens):
        return "prompt_node_ids: one entry per path node, as many as prompt_tokens, at least one"
    if any(t < 0 for t in req.prompt_tokens) or req.max_new_tokens < 1:
        return "prompt_tokens and max_new_tokens: must be positive"
    if sum(req.prompt_tokens) < 1:  # the question has a token; an empty prompt upsets the engine
        return "prompt_tokens: the path holds no tokens (the question has at least one)"
    return ""


def _logprobs(gen: Generation | None, c: Completion) -> LogprobSummary:
    if gen is not None:  # the synthetic workload's
        return LogprobSummary(mean=gen.mean_logprob, min=gen.mean_logprob, count=c.generated)
    return LogprobSummary(mean=c.logprob_mean, min=c.logprob_min, count=c.generated)


def main() -> int:
    return run_service("generator", Generator)


if __name__ == "__main__":
    raise SystemExit(main())
