"""Reward scorer: batches score jobs on its reward engine (prefill-only requests, so a
batch shares one prefill step) and publishes rewards to the query's inbox.

Engines: `sim` — the simulated PRM in scaled real time; or, with `SPEX_PRM` set, a reward
model in process (`spex.shared.hf.reward`), its passes in a worker thread. A job's content
says whose reward counts: `synthetic` — the workload's (the engine only times the pass);
`real` — the model's score. (The `logprob` reward needs no scorer: the coordinator computes
it from the generation.)
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis
import structlog

from spex.proto import CONTENTS, ScoreRequest, ScoreResult
from spex.proto.names import SCORE_JOBS, SCORER_GROUP, query_inbox
from spex.shared.content.prompts import prompt_pieces
from spex.shared.engine.api import Completion, EngineRequest
from spex.shared.roofline.hardware import parse_profile
from spex.shared.runtime.bus import Bus, Delivery
from spex.shared.runtime.metrics import JOBS
from spex.shared.runtime.service import loop_forever, run_service
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
        self.template = getattr(self.engine.engine, "template", None)  # a reward model reads text
        self.pending: dict[str, tuple[Delivery, ScoreRequest]] = {}
        self.scored = 0
        self.log = structlog.get_logger().bind(service="scorer", consumer=settings.consumer)

    def summary(self) -> dict[str, Any]:
        return {"scored": self.scored, "dead_lettered": self.bus.dead_lettered}

    async def run(self, stop: asyncio.Event) -> None:
        await self.bus.ensure_group(SCORE_JOBS, SCORER_GROUP)
        await asyncio.gather(
            self._intake(stop), self.engine.run(self._on_complete, stop), self._reclaim(stop)
        )

    async def on_score(self, d: Delivery) -> None:
        req = d.message
        assert isinstance(req, ScoreRequest)
        rid = f"{req.job_id}:{d.entry_id}"
        if any(r.job_id == req.job_id for _, r in self.pending.values()):
            return
        if req.content not in CONTENTS:
            await self.bus.dead_letter(d, SCORER_GROUP, f"content: unknown {req.content!r}")
            return
        if req.content == "real" and self.template is None:
            await self.bus.dead_letter(d, SCORER_GROUP, "real content needs a reward model (SPEX_PRM)")
            return
        prompt = tuple(zip(req.prompt_node_ids, req.prompt_tokens, strict=True))
        request = EngineRequest(rid, prompt, f"{req.node_id}/s", 0, priority=req.priority)
        if self.template is not None:
            request.text = tuple(prompt_pieces(req.question, req.steps, self.template))
        self.pending[rid] = (d, req)
        self.engine.submit(request)

    async def _on_complete(self, c: Completion) -> None:
        d, req = self.pending.pop(c.rid)
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
        await self.bus.publish(query_inbox(req.query_id), result)
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
            for d in await self.bus.read([SCORE_JOBS], SCORER_GROUP, count=MAX_BATCH, block_ms=block):
                await self._dispatch(d)

        await loop_forever(stop, once, self.log, self.bus.reconnected)

    async def _reclaim(self, stop: asyncio.Event) -> None:
        async def once() -> None:
            await asyncio.sleep(self.settings.heartbeat_s)
            await self.bus.heartbeat(SCORE_JOBS, SCORER_GROUP, [d.entry_id for d, _ in self.pending.values()])
            for d in await self.bus.reclaim(
                SCORE_JOBS, SCORER_GROUP, int(3 * self.settings.heartbeat_s * 1000)
            ):
                await self._dispatch(d)

        await loop_forever(stop, once, self.log, self.bus.reconnected)


def _engine(settings: Settings) -> RealtimeEngine | Any:
    if not settings.prm:
        return RealtimeEngine(SimEngine(parse_profile(settings.reward_profile)), settings.time_scale)
    from spex.shared.hf.reward import RewardConfig, RewardEngine
    from spex.shared.hf.threaded import ThreadedEngine

    config = RewardConfig(deterministic=settings.deterministic, device=settings.device)
    return ThreadedEngine(RewardEngine.from_dir(settings.prm, config))


def main() -> int:
    return run_service("scorer", Scorer)


if __name__ == "__main__":
    raise SystemExit(main())
