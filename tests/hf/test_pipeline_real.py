"""`spex up --engine hf` as separate processes answers MATH-500 questions with a model's text,
each answer graded against the dataset's reference; the generator publishes the step curve
speculation is budgeted by — measured at its start, or the profile file it was given — and the
allocator budgets by it."""

import asyncio
import json
from dataclasses import replace

import redis.asyncio as aioredis

from spex.proto import GenerateResult, ScoreResult
from spex.proto.names import ALLOCATOR_STATUS, SINGLE, worker_curve
from spex.services.launcher import up
from spex.shared.roofline.measured import Cell, profile_json
from spex.shared.runtime.redis_server import free_port
from spex.shared.runtime.settings import Settings
from tests.services.helpers import ask_math500


def published(url: str) -> tuple[dict, dict]:
    """gen-0's published curve, and the allocator's status (waiting for its next round)."""

    async def read() -> tuple[dict, dict]:
        r = aioredis.Redis.from_url(url)
        try:
            curve = await r.get(SINGLE.home(worker_curve("gen-0")))
            for _ in range(100):
                status = json.loads(await r.get(ALLOCATOR_STATUS) or b"{}")
                if "gen-0" in status.get("curve", {}):
                    break
                await asyncio.sleep(0.05)
            return json.loads(curve or b"{}"), status
        finally:
            await r.aclose()

    return asyncio.run(read())


def test_the_pipeline_answers_three_math500_questions_with_text(redis_url, tiny_model, tiny_prm):
    settings = Settings(
        engine="hf",
        model=tiny_model,
        prm=tiny_prm,
        content="real",
        max_step_tokens=16,
        max_depth=2,
        http_port=free_port(),
        block_ms=50,
    )
    with up(replace(settings), redis_url=redis_url) as live:
        answers, inboxes = ask_math500(live.redis_url)
        curve, status = published(live.redis_url)
    assert all(a is not None for a in answers), "a question was not answered"
    for answer, events in zip(answers, inboxes, strict=True):
        assert answer.correct is not None  # graded (a random model's answers are wrong)
        assert answer.nodes >= 2
        steps = [e for e in events if isinstance(e, GenerateResult)]
        scores = [e for e in events if isinstance(e, ScoreResult)]
        assert steps and all(e.text and not e.text.startswith("Step ") for e in steps)  # a model's text
        assert all(0.0 < s.reward < 1.0 for s in scores) and scores  # the reward model's
    # No profile file: the generator swept its engine at start, every batch up to its own.
    assert "start-up sweep" in curve["meta"]["engine"]
    assert {c["batch"] for c in curve["cells"]} == {1, 2, 4, 8, 16} and all(
        c["tpot_s"] > 0 for c in curve["cells"]
    )
    assert status["curve"]["gen-0"] == curve["meta"]["engine"] and status["objective"] == "slo"


def test_a_profile_file_is_the_curve_and_throughput_the_objective(redis_url, tiny_model, tmp_path):
    steep = [Cell(b, c, 0.02 * (1 + 0.09 * (b - 1)), b / (0.02 * (1 + 0.09 * (b - 1)))) for b in (1, 4, 16)
             for c in (128, 1024)]  # fmt: skip
    path = tmp_path / "curve.json"
    path.write_text(profile_json(steep, {"engine": "a steep curve"}))
    settings = Settings(
        engine="hf", model=tiny_model, content="real", max_step_tokens=16, max_depth=2, http_port=free_port(),
        block_ms=50, objective="throughput", profile_file=str(path), startup_sweep=True,
    )  # fmt: skip
    with up(settings, redis_url=redis_url) as live:
        answers, _ = ask_math500(live.redis_url, count=2)
        curve, status = published(live.redis_url)
    assert all(a is not None and a.nodes >= 2 for a in answers)
    assert curve["meta"]["engine"] == "a steep curve"  # the file, not a sweep
    assert status["curve"]["gen-0"] == "a steep curve" and status["objective"] == "throughput"
