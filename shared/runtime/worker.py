"""The skeleton the generator and the scorer share: jobs read from streams onto a live engine,
results published to the query's inbox, the job acknowledged after.

A job goes: `dispatch` (its handler by message type, or a dead letter) → the service's handler
checks it is still wanted and can run here, builds the engine request and calls `start` → the
engine runs it → `on_complete`: an engine error dead-letters the job with the reason (its query
hears, through `tell_query`), an abort acknowledges it, a finished job's result is published by
the service's `publish` and then the job is acknowledged (owner-checked: a peer that took it
over while we stalled owns it now). A result Redis will not take just now (unavailable:
unreachable, or refusing writes: a failed snapshot, a read-only replica) stays with the worker,
heartbeated like a running job, and is written again after backoff until Redis takes it: left to
be redelivered, each try would count against `max_deliveries`, and past them its question would
fail for a fault of the platform. Meanwhile the worker takes no new job: it publishes what it
holds before taking more. (A Redis at its maxmemory takes a result all the same: it is a
question's admitted work, `publisher._PUBLISH`.) A job a peer took over is stopped here; handed
back before the engine has dropped that run, its dispatch waits for that (the engine holds the
request id till then).
"""

from __future__ import annotations

import asyncio
import time
from abc import abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import ClassVar, Generic, TypeVar

import redis.asyncio as aioredis
import structlog
from opentelemetry.trace import Span

from spex.proto import PRIMARY, GenerateRequest, JobKind, Message, ScoreRequest
from spex.proto.names import Partitions
from spex.shared.content.prompts import PromptStyle, SizedPrompt, Template, prompt_pieces
from spex.shared.engine.api import Completion, EngineRequest
from spex.shared.engine.live import LiveEngine
from spex.shared.runtime.availability import REDIS, unavailable
from spex.shared.runtime.bus import Bus, Delivery
from spex.shared.runtime.data_loss import DataLoss
from spex.shared.runtime.jobs import tell_query
from spex.shared.runtime.metrics import BUS_HOP, EVENTS, JOB_SECONDS, JOBS, QUEUE_WAIT
from spex.shared.runtime.service import Service, guarded
from spex.shared.runtime.settings import Settings
from spex.shared.runtime.stored_requests import StoredRequests
from spex.shared.runtime.tracing import job_span

__all__ = ["Job", "JobWorker", "NoResult"]

Req = TypeVar("Req", GenerateRequest, ScoreRequest)
RUNS_SLACK = 1024  # ended runs the index of runs keeps before it is rebuilt


@dataclass(eq=False)
class Job(Generic[Req]):
    """A job this worker took: where it came from (acknowledged there) and what it asks."""

    delivery: Delivery
    request: Req
    taken_s: float = field(default_factory=time.monotonic)  # when this worker took it
    span: Span | None = None  # its OpenTelemetry span, while it runs here


J = TypeVar("J", bound="Job[GenerateRequest] | Job[ScoreRequest]")


class NoResult(Exception):
    """A finished job has no result to publish; the message says why. Unrecoverable: a retry
    would end the same way, so the job is dead-lettered with that reason (its query hears)."""


class JobWorker(Service, Generic[J]):
    """One service's jobs on one engine. A subclass names its `service` and consumer `group`,
    fills `handlers` (message type → handler of its delivery) and says how a finished job's
    result is published."""

    service: ClassVar[str]
    group: ClassVar[str]
    job_kind: ClassVar[JobKind]  # what its jobs are (the metrics' label)
    engine_name: ClassVar[str] = "engine"  # how dead-letter reasons name the engine

    def __init__(self, client: aioredis.Redis, settings: Settings, engine: LiveEngine) -> None:
        self.partitions = Partitions(settings.partitions)  # the deployment's: every key built here
        self.bus = Bus(client, settings.consumer, settings.max_deliveries, partitions=self.partitions)
        self.bus.on_dead = partial(tell_query, self.bus)  # a job given up on: its query hears
        # Redis losing its data, marked if this worker is the first to see it (`data_loss`):
        # the epoch token read every heartbeat round, and at once when a group of ours vanished.
        self.loss = DataLoss(client, settings.consumer, settings.data_loss_wait_s, partitions=self.partitions)
        self.bus.on_regroup = self.loss.check
        self.settings = settings
        self.engine = engine
        self.jobs: dict[str, J] = {}  # engine request id -> the job it runs
        # Finished jobs whose result Redis would not take yet, by request id: written again
        # after backoff (`_write_later`), each by a task of its own (kept here while it runs).
        self.unwritten: dict[str, J] = {}
        self._writers: set[asyncio.Task[None]] = set()
        self._dispatching: set[str] = set()  # job ids whose handler runs now (not yet in `jobs`)
        # Runs stopped with no job left to hear it (a peer took the job over), by request id:
        # the job's id, and set when the engine reports the stop (it holds the id till then).
        self._aborting: dict[str, tuple[str, asyncio.Event]] = {}
        self.handlers: dict[type[Message], Callable[[Delivery], Awaitable[None]]] = {}
        self.done = 0  # results published
        self.aborted = 0  # jobs cancelled, before or while running
        self.log = structlog.get_logger().bind(service=self.service, consumer=settings.consumer)
        self._sized: dict[PromptStyle, SizedPrompt] = {}  # synthetic prompts' pieces, by style
        self.stored = StoredRequests(self.bus.r, self.partitions)  # the questions its jobs do not carry
        self._runs: dict[str, str] = {}  # job id -> the request id it ran as here (`_held_run`)

    @property
    def reads_text(self) -> bool:
        """A model reads the prompt's text; the simulator only its token counts."""
        return self.engine.template is not None

    async def prompt_text(
        self, req: GenerateRequest | ScoreRequest, prompt: tuple[tuple[str, int], ...]
    ) -> tuple[str, ...] | None:
        """The prompt's pieces for an engine that reads text: on synthetic content sized to
        the workload's token counts where the engine counts tokens (`SizedPrompt`, as the
        virtual-time bench sizes them: both prefill and cache the same amounts), else the
        path's texts as they are. None if the question is gone (its query answered and expired,
        or unknown): the job has nothing to run for."""
        template = self.engine.template
        assert template is not None
        stored = await self.stored.prompt(req)
        if stored is None:
            return None
        question, own = stored
        count = self.engine.count_tokens
        style = PromptStyle.of(req.split, own)
        if req.content != "synthetic" or count is None:
            return tuple(self.path_pieces(question, list(req.steps), template, style))
        sized = self._sized.get(style)
        if sized is None:
            if len(self._sized) > 64:  # questions' own prompts: bounded
                self._sized.clear()
            sized = self._sized[style] = SizedPrompt(template, style, count)
        return sized.pieces(question, list(req.steps), prompt)

    def path_pieces(
        self, question: str, steps: list[str], template: Template, style: PromptStyle
    ) -> list[str]:
        """A path's real text as its engine reads it: a generator's prompt (a scorer writes its
        reward model's layout instead)."""
        return prompt_pieces(question, steps, template, style)

    async def prepare(self) -> None:
        """Before any job: the engine must answer and serve this configuration."""
        await self.engine.start()

    def run_engine(self, stop: asyncio.Event) -> Awaitable[None]:
        return self.engine.run(guarded(self.on_complete, self.log), stop)

    def working(self) -> list[J]:
        """The jobs this worker holds: those it runs and those whose result waits for Redis."""
        return [*self.jobs.values(), *self.unwritten.values()]

    def held(self) -> set[str]:
        """The entries of the jobs we hold (not read again when our own pending ones are)."""
        return {job.delivery.entry_id for job in self.working()}

    # ------------------------------------------------------------------ a job's life
    async def dispatch(self, d: Delivery) -> None:
        handler = self.handlers.get(type(d.message))
        if handler is None:
            await self.bus.dead_letter(d, self.group, f"no handler for {type(d.message).__name__}")
            return
        # One handler a job at a time: after a reconnect the intake re-reads our own pending
        # entries while the heartbeat round may reclaim the same ones (idle while Redis was
        # away); both would pass the handler's "already ours" check before either started it.
        job_id = d.message.job_id if isinstance(d.message, GenerateRequest | ScoreRequest) else ""
        if job_id and not self.loss.watching:  # a job: a question was submitted, its token is there
            await self.loss.check()  # read now, so a loss before the next heartbeat is noticed
        if job_id and job_id in self._dispatching:
            self.log.info("job_already_dispatching", job_id=job_id, entry_id=d.entry_id)
            return
        if job_id:
            self._dispatching.add(job_id)
        kind = type(d.message).__name__
        EVENTS.labels(self.service, self.settings.consumer, kind).inc()
        if d.message.created_ms and d.deliveries == 1:  # a redelivery's wait is a fault's, not the bus's
            BUS_HOP.labels(self.service, kind).observe(max(0.0, time.time() - d.message.created_ms / 1000))
        with structlog.contextvars.bound_contextvars(query_id=d.message.query_id, entry_id=d.entry_id):
            try:
                await self._old_run_left(job_id)
                await handler(d)
            except Exception as exc:  # left unacknowledged: reclaimed, retried, then dead-lettered
                self.log.error("handler_failed", error=repr(exc), deliveries=d.deliveries)
            finally:
                self._dispatching.discard(job_id)

    async def _old_run_left(self, job_id: str) -> None:
        """A job a peer took over from us, handed back before our engine dropped that run:
        wait for it to go (the engine holds its request id till then), so that the handler's
        checks (still wanted? promoted?) see what happened meanwhile. Bounded below the idle
        time at which a peer may reclaim the entry."""
        for taken, left in list(self._aborting.values()):
            if taken == job_id:
                try:
                    await asyncio.wait_for(left.wait(), timeout=2 * self.settings.heartbeat_s)
                except TimeoutError:  # never reported: the handler goes on (a refusal dead-letters)
                    self.log.warning("old_run_not_dropped", job_id=job_id)

    async def start(self, job: J, request: EngineRequest) -> None:
        """Hand `job` to the engine as `request`; a request the engine refuses is the job's
        fault: dead-lettered with the reason."""
        try:
            self.engine.submit(request)
        except ValueError as exc:
            await self.bus.dead_letter(job.delivery, self.group, f"{self.engine_name}: {exc}")
            return
        self.jobs[request.rid] = job
        self._runs[job.request.job_id] = request.rid
        if len(self._runs) > 2 * (len(self.jobs) + len(self.unwritten)) + RUNS_SLACK:  # forget ended runs
            self._runs = {j.request.job_id: rid for rid, j in [*self.jobs.items(), *self.unwritten.items()]}
        req = job.request
        attributes: dict[str, str | int] = {
            "spex.query_id": req.query_id, "spex.job_id": req.job_id, "spex.node_id": req.node_id,
            "spex.priority": req.priority, "spex.worker": self.settings.consumer,
        }  # fmt: skip
        job.span = job_span(f"spex.{self.job_kind}", req.trace_id, req.query_id, req.epoch, attributes)

    async def on_complete(self, c: Completion) -> None:
        job = self.jobs.pop(c.rid, None)
        if job is None:
            _, left = self._aborting.pop(c.rid, ("", None))
            if left is not None:  # a taken-over job's run has left the engine
                left.set()
            return
        req = job.request
        JOBS.labels(self.service, self.settings.consumer, c.reason).inc()
        if job.span is not None:
            job.span.set_attributes({"spex.outcome": c.reason, "spex.tokens": c.generated})
            job.span.end()
        priority = "primary" if c.priority == PRIMARY else "speculative"
        if c.reason == "finished":
            JOB_SECONDS.labels(self.job_kind, priority).observe(time.monotonic() - job.taken_s)
        if c.first_token_s is not None:  # in the engine's clock: the simulator's is scaled
            wall = (c.first_token_s - c.arrival_s) * self.engine.time_scale
            QUEUE_WAIT.labels(self.service, priority).observe(max(0.0, wall))
        if c.reason == "error":  # the engine refused or failed it: park it with the reason
            self.log.error("job_failed", job_id=req.job_id, query_id=req.query_id, error=c.text)
            await self.bus.dead_letter(job.delivery, self.group, f"{self.engine_name}: {c.text}")
            return
        if c.reason == "abort":
            self.aborted += 1
            self.log.info("job_cancelled", job_id=req.job_id, query_id=req.query_id, tokens=c.generated)
            await self.bus.ack(job.delivery, self.group)
            return
        try:
            await self._write(job, c)
        except Exception as exc:
            reason = unavailable(exc)
            if reason is None:
                raise
            self.unwritten[c.rid] = job
            REDIS.down(job, reason, self.log)
            task = asyncio.create_task(self._write_later(c.rid, job, c))
            self._writers.add(task)
            task.add_done_callback(self._writers.discard)

    async def _write(self, job: J, c: Completion) -> None:
        """Publish a finished job's result, then acknowledge the job."""
        req = job.request
        try:
            await self.publish(job, c)
        except NoResult as exc:
            await self.bus.dead_letter(job.delivery, self.group, str(exc))
            return
        # Result first, then the owner-checked ack: a crash in between redelivers the job and
        # the duplicate result (same message id) is dropped by the idempotent publish.
        if not await self.bus.ack(job.delivery, self.group):  # we stalled; a peer owns it now
            self.log.warning("job_taken_over", job_id=req.job_id, query_id=req.query_id)
        self.done += 1

    async def _write_later(self, rid: str, job: J, c: Completion) -> None:
        """Write `job`'s result again, with backoff, until Redis takes it (or a peer took the
        job over meanwhile: `heartbeat` lets it go). Another error leaves the job pending, to be
        redelivered as a failed handler's is."""
        backoff = 0.05
        try:
            while self.unwritten.get(rid) is job:
                await asyncio.sleep(backoff)
                backoff = min(2.0, backoff * 2)
                if self.unwritten.get(rid) is not job:
                    break
                try:
                    await self._write(job, c)
                except Exception as exc:
                    reason = unavailable(exc)
                    if reason is None:
                        self.log.error("completion_failed", job_id=c.rid, error=str(exc) or repr(exc))
                        break
                    REDIS.down(job, reason, self.log)
                    continue
                REDIS.up(job, self.log)
                break
        finally:
            if self.unwritten.get(rid) is job:
                del self.unwritten[rid]
            REDIS.forget(job)

    @abstractmethod
    async def publish(self, job: J, c: Completion) -> None:
        """Publish the result of a finished job; or, without publishing, raise `NoResult` saying
        why it has none (the job is then dead-lettered with that reason)."""

    # ------------------------------------------------------------------ stalls and peers
    async def heartbeat(self, stream: str) -> None:
        """Keep our jobs on `stream` (each of its parts) ours; those a peer took over while we
        stalled are stopped here (the peer's result counts)."""
        for part in self.partitions.spread(stream):
            entries = {job.delivery.entry_id for job in self.working() if job.delivery.stream == part}
            if not entries:
                continue
            lost = await self.bus.heartbeat(part, self.group, list(entries))
            for rid, job in list(self.unwritten.items()):  # its result is the peer's to write now
                if job.delivery.stream == part and job.delivery.entry_id in lost:
                    del self.unwritten[rid]
                    self.log.warning(
                        "job_taken_over", job_id=job.request.job_id, query_id=job.request.query_id
                    )
            for rid, job in list(self.jobs.items()):
                if job.delivery.stream == part and job.delivery.entry_id in lost:
                    self._stop_run(rid, job, "taken over")
                    request = job.request
                    self.log.warning("job_taken_over", job_id=request.job_id, query_id=request.query_id)

    def _stop_run(self, rid: str, job: J, outcome: str) -> None:
        """Stop running `job` here: its run is aborted (the engine holds the request id until
        it reports the run gone: `_old_run_left`)."""
        del self.jobs[rid]
        if not self.engine.abort(rid):  # it ends at the engine's next step
            self._aborting[rid] = (job.request.job_id, asyncio.Event())
        if job.span is not None:
            job.span.set_attribute("spex.outcome", outcome)
            job.span.end()

    async def held_already(self, d: Delivery) -> bool:
        """Whether this worker holds `d`'s job from `d` itself (its own pending entry, read again
        after a reconnect: nothing to do). The job held from another entry is a stale run — the
        coordinator dispatched the job again after Redis lost its data, and the stale result has
        nowhere to go — : it is stopped, and its leaving waited for, so that `d` runs."""
        req = d.message
        assert isinstance(req, GenerateRequest | ScoreRequest)
        held = self._held_run(req.job_id)
        if held is None:
            return False
        rid, job = held
        if job.delivery.entry_id == d.entry_id and job.delivery.stream == d.stream:
            return True
        if self.unwritten.get(rid) is job:
            del self.unwritten[rid]
        else:
            self._stop_run(rid, job, "dispatched again")
        self.log.warning("job_dispatched_again", job_id=req.job_id, query_id=req.query_id)
        await self._old_run_left(req.job_id)
        return False

    def _held_run(self, job_id: str) -> tuple[str, J] | None:
        """The run of `job_id` this worker holds (running, or its result unwritten), if any: found
        by its index, which forgets what no longer holds."""
        rid = self._runs.get(job_id, "")
        job = self.jobs.get(rid) or self.unwritten.get(rid)
        if job is None or job.request.job_id != job_id:
            self._runs.pop(job_id, None)
            return None
        return rid, job

    async def reclaim(self, stream: str, count: int = 100) -> None:
        """Jobs of a peer that stopped heartbeating (three periods) are ours now."""
        idle_ms = int(3 * self.settings.heartbeat_s * 1000)
        for d in await self.bus.reclaim(stream, self.group, idle_ms, count=count):
            self.log.info("job_reclaimed", entry_id=d.entry_id, deliveries=d.deliveries)
            await self.dispatch(d)
