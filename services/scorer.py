"""Reward scorer: batches score jobs on its reward engine (prefill-only requests, so a
batch shares one prefill step) and publishes rewards to the query's inbox.

Engines: `sim` — the simulated PRM in scaled real time; or, with `SPEX_PRM` set, a reward
model in process (`spex.shared.hf.reward`), its passes in a worker thread; or, with
`SPEX_PRM_URL` too, that reward model served by SGLang (`/classify`), whatever engine the
generators use (`SPEX_ENGINE` is theirs). A job's content
says whose reward counts: `synthetic` — the workload's (the engine only times the pass);
`real` — the model's score. (The `logprob` reward needs no scorer: the coordinator computes
it from the generation.)
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

import redis.asyncio as aioredis
import structlog

from spex.proto import CONTENTS, ScoreRequest, ScoreResult
from spex.proto.names import SCORE_JOBS, SCORER_GROUP, query_inbox, query_request
from spex.shared.content.prompts import prompt_pieces
from spex.shared.engine.api import Completion, EngineRequest
from spex.shared.roofline.hardware import parse_profile
from spex.shared.runtime.bus import Bus, Delivery
from spex.shared.runtime.jobs import engine_template, job_wanted, tell_query
from spex.shared.runtime.metrics import JOBS
from spex.shared.runtime.service import guarded, loop_forever, run_service
from spex.shared.runtime.settings import Settings
from spex.shared.sim.engine import SimEngine
from spex.shared.sim.realtime import RealtimeEngine
from spex.shared.sim.workload import SyntheticWorkload, WorkloadKnobs

__all__ = ["Scorer", "main"]

MAX_BATCH = 64


class Scorer:
    def __init__(self, client: aioredis.Redis, settings: Settings) -> None:
        self.bus = Bus(client, settings.consumer, settings.max_deliveries)
        self.settings = settings
        self.engine = _engine(settings)
        self.template = engine_template(self.engine)  # a reward model reads text
        self.pending: dict[str, tuple[Delivery, ScoreRequest]] = {}
        self.scored = 0
        self.bus.on_dead = partial(tell_query, self.bus)
        self.log = structlog.get_logger().bind(service="scorer", consumer=settings.consumer)

    async def prepare(self) -> None:
        start = getattr(self.engine, "start", None)  # a reward server: up, with its flags
        if start is not None:
            await start()

    def summary(self) -> dict[str, Any]:
        return {"scored": self.scored, "dead_lettered": self.bus.dead_lettered}

    async def run(self, stop: asyncio.Event) -> None:
        await self.bus.ensure_group(SCORE_JOBS, SCORER_GROUP)
        await asyncio.gather(
            self._intake(stop),
            self.engine.run(guarded(self._on_complete, self.log), stop),
            self._reclaim(stop),
        )

    async def on_score(self, d: Delivery) -> None:
        req = d.message
        assert isinstance(req, ScoreRequest)
        rid = f"{req.job_id}:{d.entry_id}"
        if any(r.job_id == req.job_id for _, r in self.pending.values()):
            return
        if not await job_wanted(self.bus.r, req.query_id):  # unknown or answered: nothing to score for
            await self.bus.ack(d, SCORER_GROUP)
            return
        problem = _job_problem(req, reward_model=self.template is not None)
        if problem:
            await self.bus.dead_letter(d, SCORER_GROUP, problem)
            return
        prompt = tuple(zip(req.prompt_node_ids, req.prompt_tokens, strict=True))
        request = EngineRequest(rid, prompt, f"{req.node_id}/s", 0, priority=req.priority)
        if self.template is not None:
            request.text = tuple(prompt_pieces(req.question, req.steps, self.template))
        try:
            self.engine.submit(request)
        except ValueError as exc:  # refused: this job's fault
            await self.bus.dead_letter(d, SCORER_GROUP, f"reward engine: {exc}")
            return
        self.pending[rid] = (d, req)

    async def _on_complete(self, c: Completion) -> None:
        entry = self.pending.pop(c.rid, None)
        if entry is None:
            return
        d, req = entry
        if c.reason == "error" or (req.content == "real" and c.reward is None):
            await self.bus.dead_letter(d, SCORER_GROUP, f"reward engine: {c.text or 'no reward'}")
            return
        if req.content == "real":
            assert c.reward is not None
            reward = c.reward
        else:
            workload = SyntheticWorkload(WorkloadKnobs(), req.sim_seed)
            reward = workload.prm_reward(workload.question(req.query_id), req.prompt_node_ids[1:])
        result = ScoreResult(
            msg_id=f"{req.query_id}/{req.job_id}/reward",
            query_id=req.query_id,
            trace_id=req.trace_id,
            epoch=req.epoch,
            job_id=req.job_id,
            node_id=req.node_id,
            reward=reward,
        )
        await self.bus.publish(query_inbox(req.query_id), result, require=query_request(req.query_id))
        await self.bus.ack(d, SCORER_GROUP)
        self.scored += 1
        JOBS.labels("scorer", self.settings.consumer, "finished").inc()

    async def _dispatch(self, d: Delivery) -> None:
        if not isinstance(d.message, ScoreRequest):
            await self.bus.dead_letter(d, SCORER_GROUP, f"no handler for {type(d.message).__name__}")
            return
        try:
            await self.on_score(d)
        except Exception as exc:  # left unacknowledged: reclaimed, retried, then dead-lettered
            self.log.error("handler_failed", error=repr(exc), entry_id=d.entry_id, deliveries=d.deliveries)

    async def _intake(self, stop: asyncio.Event) -> None:
        async def once() -> None:
            block = self.settings.block_ms
            held = {d.entry_id for d, _ in self.pending.values()}
            for d in await self.bus.read(
                [SCORE_JOBS], SCORER_GROUP, count=MAX_BATCH, block_ms=block, held=held
            ):
                await self._dispatch(d)

        await loop_forever(stop, once, self.log, self.bus.reconnected)

    async def _reclaim(self, stop: asyncio.Event) -> None:
        async def once() -> None:
            await asyncio.sleep(self.settings.heartbeat_s)
            held = [d.entry_id for d, _ in self.pending.values()]
            lost = await self.bus.heartbeat(SCORE_JOBS, SCORER_GROUP, held)
            for rid in [rid for rid, (d, _) in self.pending.items() if d.entry_id in lost]:
                del self.pending[rid]  # we stalled and a peer took it over: its result is the peer's
            for d in await self.bus.reclaim(
                SCORE_JOBS, SCORER_GROUP, int(3 * self.settings.heartbeat_s * 1000)
            ):
                await self._dispatch(d)
            await self.bus.trim_now_and_then(SCORE_JOBS)

        await loop_forever(stop, once, self.log, self.bus.reconnected)


def _job_problem(req: ScoreRequest, reward_model: bool) -> str:
    """Why this scorer cannot score `req` (a one-line reason), or "" if it can."""
    if req.content not in CONTENTS:
        return f"content: unknown {req.content!r}"
    if req.content == "real" and not reward_model:
        return "real content needs a reward model (SPEX_PRM)"
    if len(req.prompt_node_ids) < 2 or len(req.prompt_node_ids) != len(req.prompt_tokens):
        return "prompt_node_ids: the question and the steps to the scored one, as many as prompt_tokens"
    if any(t < 0 for t in req.prompt_tokens):
        return "prompt_tokens: must not be negative"
    return ""


def _engine(settings: Settings) -> RealtimeEngine | Any:
    if not settings.prm:
        return RealtimeEngine(SimEngine(parse_profile(settings.reward_profile)), settings.time_scale)
    if settings.prm_url:  # the PRM served by SGLang (`/classify`); SPEX_PRM: its tokenizer
        from spex.shared.serving import open_engine

        s = settings
        return open_engine("sglang", s.prm_url, s.engine_timeout_s, s.prm, s.deterministic, reward=True)
    from spex.shared.hf.reward import RewardConfig, RewardEngine
    from spex.shared.hf.threaded import ThreadedEngine

    config = RewardConfig(deterministic=settings.deterministic, device=settings.device)
    return ThreadedEngine(RewardEngine.from_dir(settings.prm, config))


def main() -> int:
    return run_service("scorer", Scorer)


if __name__ == "__main__":
    raise SystemExit(main())
