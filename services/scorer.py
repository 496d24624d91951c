"""Reward scorer: batches score jobs on its reward engine (prefill-only requests, so a
batch shares one prefill step) and publishes rewards to the query's inbox (the skeleton it
shares with the generator: `spex.shared.runtime.worker`).

The jobs a read brings are checked first and handed to the engine together, after the last
check (no await between the submissions), so an in-process reward model scores them in one
padded pass rather than a pass for the first and another for the rest.

The path is written as the reward model's family reads it (`SPEX_PRM_KIND`:
`spex.shared.content.reward_prompts`). Engines: with `SPEX_PRM_URL`, the reward model on a
server, `SPEX_PRM_ENGINE`'s: SGLang (`/classify`) or vLLM (`/pooling`), whatever engine the
generators use (`SPEX_ENGINE` is theirs), its prompts in the chat template of `SPEX_PRM`'s
tokenizer where one is given; else, with `SPEX_PRM`, the reward model in process
(`spex.shared.hf.reward`), its passes in a worker thread; else `sim`, the simulated PRM in
scaled real time. A job's content says whose reward counts: `synthetic` — the workload's (the
engine only times the pass); `real` — the model's score. (The `logprob` reward needs no scorer:
the coordinator computes it from the generation.)
"""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from spex.proto import ScoreRequest, ScoreResult, Synthetic
from spex.proto.names import SCORE_JOBS, SCORER_GROUP, query_inbox, query_request
from spex.shared.content.prompts import PromptStyle, Template
from spex.shared.engine.api import Completion, EngineRequest
from spex.shared.engine.live import LiveEngine
from spex.shared.roofline.hardware import parse_profile
from spex.shared.runtime.bus import Delivery
from spex.shared.runtime.jobs import job_wanted
from spex.shared.runtime.service import loop_forever, run_service
from spex.shared.runtime.settings import Settings
from spex.shared.runtime.worker import Job, JobWorker, NoResult
from spex.shared.sim.engine import SimEngine
from spex.shared.sim.realtime import RealtimeEngine
from spex.shared.sim.workload import SyntheticWorkload, WorkloadKnobs

__all__ = ["Scorer", "main"]

MAX_BATCH = 64


class Scorer(JobWorker[Job[ScoreRequest]]):
    service = "scorer"
    job_kind = ScoreRequest.job_kind
    group = SCORER_GROUP
    engine_name = "reward engine"

    def __init__(self, client: aioredis.Redis, settings: Settings) -> None:
        super().__init__(client, settings, _engine(settings))
        self.reward_format = settings.reward_format()
        self.handlers = {ScoreRequest: self.on_score}
        self._checked: list[tuple[Job[ScoreRequest], EngineRequest]] = []  # to start together

    def summary(self) -> dict[str, int]:
        return {"scored": self.done, "dead_lettered": self.bus.dead_lettered}

    async def run(self, stop: asyncio.Event) -> None:
        await self.bus.ensure_group(SCORE_JOBS, SCORER_GROUP)
        await asyncio.gather(
            self.run_engine(stop),
            loop_forever(stop, self._intake_round, self.log, self.bus.reconnected),
            loop_forever(stop, self._reclaim_round, self.log, self.bus.reconnected),
        )

    async def on_score(self, d: Delivery) -> None:
        req = d.message
        assert isinstance(req, ScoreRequest)
        if any(job.request.job_id == req.job_id for job, _ in self._checked) or await self.held_already(d):
            return
        if not await job_wanted(self.bus, req.query_id):  # unknown or answered: nothing to score for
            await self.bus.ack(d, SCORER_GROUP)
            return
        problem = _job_problem(req, reward_model=self.reads_text)
        if problem:
            await self.bus.dead_letter(d, SCORER_GROUP, problem)
            return
        prompt = tuple(zip(req.prompt_node_ids, req.prompt_tokens, strict=True))
        rid = f"{req.job_id}:{d.entry_id}"
        request = EngineRequest(rid, prompt, f"{req.node_id}/s", 0, priority=req.priority)
        if self.engine.template is not None:
            try:
                text = await self.prompt_text(req, prompt)
            except ValueError as exc:  # e.g. a chat layout for a reward model without a chat template
                await self.bus.dead_letter(d, SCORER_GROUP, f"prompt: {exc}")
                return
            if text is None:  # its query is gone: nothing to score for
                await self.bus.ack(d, SCORER_GROUP)
                return
            request.text = text
        self._checked.append((Job(d, req), request))

    def path_pieces(
        self, question: str, steps: list[str], template: Template, style: PromptStyle
    ) -> list[str]:
        """The path as the reward model's family reads it (`RewardFormat.pieces`)."""
        return self.reward_format.pieces(question, steps, template, style)

    async def _start_checked(self) -> None:
        """Hand every checked job to the engine, back to back: one pass can take them all."""
        checked, self._checked = self._checked, []
        for job, request in checked:
            await self.start(job, request)

    async def publish(self, job: Job[ScoreRequest], c: Completion) -> None:
        req = job.request
        if req.content == "real":
            if c.reward is None:
                raise NoResult(f"reward engine: {c.text or 'no reward'}")
            reward = c.reward
        else:
            where = req.synthetic or Synthetic()  # a job without the extension: the defaults' world
            workload = SyntheticWorkload(WorkloadKnobs(), where.seed)
            reward = workload.prm_reward(
                workload.question(where.question or req.query_id), req.prompt_node_ids[1:]
            )
        result = ScoreResult(
            msg_id=f"{req.query_id}/{req.job_id}/reward",
            query_id=req.query_id,
            trace_id=req.trace_id,
            epoch=req.epoch,
            job_id=req.job_id,
            node_id=req.node_id,
            reward=reward,
        )
        qid, parts = req.query_id, self.partitions
        await self.bus.publish(query_inbox(qid, parts), result, require=query_request(qid, parts))

    async def _intake_round(self) -> None:
        if self.unwritten:  # results first (`worker`)
            await asyncio.sleep(0.1)
            return
        block, held = self.settings.block_ms, self.held()
        try:
            for d in await self.bus.read(
                [SCORE_JOBS], SCORER_GROUP, count=MAX_BATCH, block_ms=block, held=held
            ):
                await self.dispatch(d)
        finally:
            await self._start_checked()

    async def _reclaim_round(self) -> None:
        await asyncio.sleep(self.settings.heartbeat_s)
        await self.loss.check()
        await self.heartbeat(SCORE_JOBS)
        try:
            await self.reclaim(SCORE_JOBS)
        finally:
            await self._start_checked()
        await self.bus.trim_now_and_then(SCORE_JOBS)


def _job_problem(req: ScoreRequest, reward_model: bool) -> str:
    """Why this scorer cannot score `req` (a one-line reason), or "" if it can."""
    if req.content == "real" and not reward_model:
        return "real content needs a reward model (SPEX_PRM or SPEX_PRM_URL)"
    if len(req.prompt_node_ids) < 2 or len(req.prompt_node_ids) != len(req.prompt_tokens):
        return "prompt_node_ids: the question and the steps to the scored one, as many as prompt_tokens"
    if any(t < 0 for t in req.prompt_tokens):
        return "prompt_tokens: must not be negative"
    return ""


def _engine(settings: Settings) -> LiveEngine:
    s = settings
    if s.prm_url:  # the reward model on a server; SPEX_PRM, if given: its tokenizer
        from spex.shared.serving import open_engine

        engine = open_engine(
            s.prm_engine, s.prm_url, s.engine_timeout_s, s.prm, s.deterministic, reward=True,
            prm=s.reward_format(),
        )  # fmt: skip
        engine.wait_s = s.engine_wait_s  # a reward model still loading answers after minutes
        return engine
    if not s.prm:
        return RealtimeEngine(SimEngine(parse_profile(s.reward_profile)), s.time_scale)
    from spex.shared.hf.reward import RewardConfig, RewardEngine
    from spex.shared.hf.threaded import ThreadedEngine

    config = RewardConfig(
        max_batch=MAX_BATCH,
        deterministic=settings.deterministic,
        device=settings.device,
        dtype=settings.dtype or None,
    )
    return ThreadedEngine(RewardEngine.from_dir(settings.prm, config, settings.reward_format()))


def main() -> int:
    return run_service("scorer", Scorer)


if __name__ == "__main__":
    raise SystemExit(main())
