"""Generator worker (one per GPU): takes generation jobs up to its free engine slots, runs them
on its engine concurrently, publishes results to the query's inbox, aborts on cancel, raises a
job's priority on promotion, heartbeats long jobs and reclaims the jobs of a dead peer (the
skeleton it shares with the scorer: `spex.shared.runtime.worker`).

Engines (`SPEX_ENGINE`): `sim` — the simulated GPU in scaled real time (`SPEX_TIME_SCALE`);
`hf` — the in-process PyTorch engine (`SPEX_MODEL`), its steps in a worker thread; `vllm` or
`sglang` — a serving engine at `SPEX_ENGINE_URL` (one server per worker), waited for and its
flags checked before the worker takes a job. What a job writes is its content's source's
(`step_sources`: the synthetic workload's step, or the model's own), given to the generator.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

import redis.asyncio as aioredis

from spex.proto import (
    CancelRequest,
    Content,
    GenerateRequest,
    GenerateResult,
    PromoteRequest,
    ProtocolError,
    decode,
)
from spex.proto.names import (
    DEFAULT_POOL,
    GEN_CONTROL,
    GENERATOR_GROUP,
    gen_jobs,
    query_inbox,
    query_request,
    worker_jobs,
)
from spex.proto.text import as_str
from spex.services.generator.engines import live_engine
from spex.services.generator.step_curve import publish_curve
from spex.services.generator.step_sources import SOURCES, Step, StepSource
from spex.shared.engine.api import Completion, EngineRequest
from spex.shared.runtime.bus import Delivery
from spex.shared.runtime.jobs import job_wanted
from spex.shared.runtime.metrics import JOBS_IN_FLIGHT
from spex.shared.runtime.service import guarded, loop_forever, run_service
from spex.shared.runtime.settings import Settings
from spex.shared.runtime.streams import read_streams
from spex.shared.runtime.worker import Job, JobWorker
from spex.shared.runtime.workers import WorkerRegistry

__all__ = ["Generator", "main"]

LOAD_REPORT_S = 0.05  # how often load is published for the budget allocator
PROMOTIONS_KEPT = 4096  # promotions of jobs not here yet, remembered (a job may arrive after)


@dataclass(eq=False)
class _GenJob(Job[GenerateRequest]):
    step: Step = Step(0)  # its step as its content's source plans it


class Generator(JobWorker[_GenJob]):
    service = "generator"
    job_kind = GenerateRequest.job_kind
    group = GENERATOR_GROUP

    def __init__(
        self, client: aioredis.Redis, settings: Settings, pool: str = DEFAULT_POOL,
        sources: Mapping[Content, StepSource] = SOURCES,
    ) -> None:  # fmt: skip
        super().__init__(client, settings, live_engine(settings))
        self.sources = sources  # what a job writes, by its content
        self.pool = pool
        self.own = worker_jobs(pool, settings.consumer)  # jobs routed to us by prefix affinity
        self.shared = gen_jobs(pool)  # jobs no worker had room for, or unrouted ones
        self.streams = [self.own, self.shared]
        self.adopted: list[str] = []  # streams of dead peers, read before ours
        self._grouped: set[str] = set()  # dead peers' streams whose group we made sure of
        self.handlers = {GenerateRequest: self.on_generate, CancelRequest: self.on_cancel}
        self._control_last = dict.fromkeys(self.partitions.spread(GEN_CONTROL), "$")  # each part: read to
        # Promotions of jobs not (yet) here: applied if the job arrives (bounded, oldest out).
        self._promoted: OrderedDict[str, int] = OrderedDict()
        self.registry = WorkerRegistry(client, self.partitions)

    async def prepare(self) -> None:
        await publish_curve(self.bus.r, self.settings, self.engine, self.log)  # before the engine's thread
        await super().prepare()

    def summary(self) -> dict[str, int]:
        return {"jobs_done": self.done, "jobs_aborted": self.aborted, "dead_lettered": self.bus.dead_lettered}

    async def run(self, stop: asyncio.Event) -> None:
        for stream in self.streams:
            await self.bus.ensure_group(stream, GENERATOR_GROUP)
        rounds = [
            self._intake_round, self._control_round, self._heartbeat_round, self._adoption_round,
            self._report_round,
        ]  # fmt: skip
        loops = [loop_forever(stop, body, self.log, self.bus.reconnected) for body in rounds]
        await asyncio.gather(self.run_engine(stop), *loops)

    # ------------------------------------------------------------------ handlers
    async def on_generate(self, d: Delivery) -> None:
        req = d.message
        assert isinstance(req, GenerateRequest)
        if await self.held_already(d):  # our own pending entry, redelivered after a reconnect
            return
        if not await job_wanted(self.bus, req.query_id, req.job_id):
            # Cancelled while queued, or its query is unknown or answered: never starts.
            await self.bus.ack(d, GENERATOR_GROUP)
            self.aborted += 1
            return
        source = self.sources[req.content]
        problem = _job_problem(req, real_engine=self.reads_text)
        if problem:
            await self.bus.dead_letter(d, GENERATOR_GROUP, problem)
            return
        prompt = tuple(zip(req.prompt_node_ids, req.prompt_tokens, strict=True))
        step = source.plan(req)
        job = _GenJob(d, req, step=step)
        priority = min(req.priority, self._promoted.pop(req.job_id, req.priority))
        request = EngineRequest(
            req.job_id, prompt, req.node_id, step.tokens, req.max_new_tokens, priority, req.seed,
            req.temperature, step.stop,
        )  # fmt: skip
        request.min_tokens = step.min_tokens
        if self.engine.template is not None:
            try:
                text = await self.prompt_text(req, prompt)
            except ValueError as exc:  # the question's own chat template will not render
                await self.bus.dead_letter(d, GENERATOR_GROUP, f"prompt: {exc}")
                return
            if text is None:  # its query is gone: nothing to generate for
                await self.bus.ack(d, GENERATOR_GROUP)
                self.aborted += 1
                return
            request.text = text
        await self.start(job, request)

    async def on_cancel(self, d: Delivery) -> None:
        assert isinstance(d.message, CancelRequest)
        await self.on_control_cancel(d.message)
        await self.bus.ack(d, GENERATOR_GROUP)

    async def on_control_cancel(self, msg: CancelRequest) -> None:
        for completion in self.engine.abort(msg.job_id):
            await guarded(self.on_complete, self.log)(completion)

    async def on_promote(self, msg: PromoteRequest) -> None:
        """The search waits on a job it generated ahead: raise it on our engine, or, if it has
        not reached us yet, when it does."""
        if msg.job_id in self.jobs:
            self.engine.promote(msg.job_id, msg.priority)
            self.log.info("job_promoted", job_id=msg.job_id, query_id=msg.query_id)
            return
        self._promoted[msg.job_id] = msg.priority
        self._promoted.move_to_end(msg.job_id)
        while len(self._promoted) > PROMOTIONS_KEPT:
            self._promoted.popitem(last=False)

    async def publish(self, job: _GenJob, c: Completion) -> None:
        req = job.request
        text, finish_reason, logprobs = self.sources[req.content].result(job.step, c)
        result = GenerateResult(
            msg_id=f"{req.query_id}/{req.job_id}/result",
            query_id=req.query_id,
            trace_id=req.trace_id,
            attempt=req.attempt,
            epoch=req.epoch,
            job_id=req.job_id,
            node_id=req.node_id,
            text=text,
            tokens=c.generated,
            cached_tokens=c.cached_tokens,
            finish_reason=finish_reason,
            logprobs=logprobs,
            worker=self.settings.consumer,
        )
        qid, parts = req.query_id, self.partitions
        await self.bus.publish(query_inbox(qid, parts), result, require=query_request(qid, parts))

    # ------------------------------------------------------------------ loops
    async def _intake_round(self) -> None:
        """Up to our free slots, never more: a dead peer's stream first (its queries wait on
        it), then our own, then the shared one; when all are empty, wait on ours and the
        shared one. (XREADGROUP counts per stream, so each read asks for what is left.)"""
        free = self.settings.worker_slots - len(self.working())
        if free <= 0 or not self.engine.healthy or self.unwritten:  # results first (`worker`)
            await asyncio.sleep(0.01 if free <= 0 else 0.1)
            return
        held = self.held()
        taken: list[Delivery] = []
        try:
            for stream in [*self.adopted, *self.streams]:
                if len(taken) < free:
                    taken += await self.bus.read(
                        [stream], GENERATOR_GROUP, count=free - len(taken), block_ms=None, held=held
                    )
            if not taken:
                streams = self.streams if free > 1 else [self.own]
                count = free // len(streams)
                block = self.settings.block_ms
                taken = await self.bus.read(streams, GENERATOR_GROUP, count=count, block_ms=block, held=held)
        finally:  # what one stream gave is run even if reading the next failed (Redis refused)
            for d in taken:
                await self.dispatch(d)

    async def _control_round(self) -> None:
        """Cancellations and promotions, fanned out to every generator (no group: each reads
        all of them from where it joined)."""
        replies = await read_streams(self.bus.r, self._control_last, 100, self.settings.block_ms)
        for part, entries in replies:
            for entry_id, fields in entries:
                last = as_str(entry_id)
                self._control_last[part] = last
                try:
                    msg = decode(GEN_CONTROL, (fields or {}).get(b"e", b""))
                except ProtocolError as exc:  # a fan-out stream has no group to park it in
                    self.log.warning("control_message_malformed", entry_id=last, error=str(exc))
                    continue
                if isinstance(msg, CancelRequest):
                    await self.on_control_cancel(msg)
                elif isinstance(msg, PromoteRequest):
                    await self.on_promote(msg)

    async def _heartbeat_round(self) -> None:
        await asyncio.sleep(self.settings.heartbeat_s)
        await self.loss.check()
        for stream in {job.delivery.stream for job in self.working()}:
            await self.heartbeat(stream)
        for stream in self.streams:
            free = self.settings.worker_slots - len(self.working())
            if free > 0:  # a full worker leaves them to a peer with room
                await self.reclaim(stream, count=free)
            await self.bus.trim_now_and_then(stream)

    async def _adoption_round(self) -> None:
        """Apart from the heartbeats, so draining many dead peers never delays ours."""
        await asyncio.sleep(self.settings.heartbeat_s)
        await self._drain_dead_peers(int(3 * self.settings.heartbeat_s * 1000))

    async def _drain_dead_peers(self, idle_ms: int) -> None:
        """A worker that died (its load key expired: Redis's clock, not ours) leaves its own
        stream: the jobs it held, claimed here once idle, and those routed to it that it never
        read, which the intake reads before anything else (`adopted`). The coordinators route
        its queries elsewhere as soon as its key expired. A worker dead for `FORGET_S` (`workers`) whose
        stream is empty is forgotten, and its stream deleted."""
        adopted = []
        for peer in await self.registry.dead(besides=self.settings.consumer):
            stream = worker_jobs(self.pool, peer)
            if stream not in self._grouped:  # once per dead peer, not every round
                await self.bus.ensure_group(stream, GENERATOR_GROUP)
                self._grouped.add(stream)
            free = self.settings.worker_slots - len(self.working())
            claimed = await self.bus.reclaim(stream, GENERATOR_GROUP, idle_ms, count=free) if free > 0 else []
            for d in claimed:
                self.log.info("job_adopted", worker=peer, entry_id=d.entry_id)
                await self.dispatch(d)
            await self.bus.trim_now_and_then(stream)
            parts = self.partitions.spread(stream)
            lengths = [await self.bus.r.xlen(part) for part in parts]
            if not any(lengths) and await self.registry.forget(peer):
                for part in parts:
                    await self.bus.r.delete(part)
                self.bus.forget(stream)
                self._grouped.discard(stream)
                self.log.info("worker_forgotten", worker=peer)
            else:
                adopted.append(stream)
        self.adopted = adopted

    async def _report_round(self) -> None:
        await self._report_load()
        await asyncio.sleep(LOAD_REPORT_S)

    async def _report_load(self) -> None:
        """Liveness and load, readable by schedulers and autoscalers (expires if we die, and
        is not renewed while our engine cannot be reached: the coordinators then place our
        queries elsewhere and peers drain our stream)."""
        consumer = self.settings.consumer
        if not self.engine.healthy:
            return
        JOBS_IN_FLIGHT.labels("generator", consumer).set(len(self.jobs))
        load = self.engine.load()
        queries = len({job.request.query_id for job in self.jobs.values()})
        msg_id = f"load/{consumer}/{time.monotonic_ns()}"
        event = load.event(msg_id, consumer, self.done, len(self.jobs), self.settings.worker_slots, queries)
        ttl_ms = int(3 * self.settings.heartbeat_s * 1000)  # liveness: gone three heartbeats after we die
        await self.registry.report(event, ttl_ms)


def _job_problem(req: GenerateRequest, real_engine: bool) -> str:
    """Why this worker cannot run `req` (a one-line reason), or "" if it can. (A value outside
    its set — content, a synthetic style — never gets here: the decoder refuses it.)"""
    if req.content == "real" and not real_engine:
        return "real content needs a real engine (SPEX_ENGINE=hf, vllm or sglang)"
    if not req.prompt_node_ids or len(req.prompt_node_ids) != len(req.prompt_tokens):
        return "prompt_node_ids: one entry per path node, as many as prompt_tokens, at least one"
    if any(t < 0 for t in req.prompt_tokens) or req.max_new_tokens < 1:
        return "prompt_tokens and max_new_tokens: must be positive"
    if sum(req.prompt_tokens) < 1:  # the question has a token; an empty prompt upsets the engine
        return "prompt_tokens: the path holds no tokens (the question has at least one)"
    return ""


def main() -> int:
    return run_service("generator", Generator)
