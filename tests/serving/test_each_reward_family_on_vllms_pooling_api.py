"""Each reward-model family served by vLLM's pooling API, through the serving engine and the
scorer, against a server speaking that API (`fake_vllm_pooling`): a step-tag model's rows come at
its tags only and the step's reward is P(right) at the last one; a plus-minus model's rows are
(good, bad) a token and the reward is P(good) at the last; the text the server gets is the family's
layout; a server that pools no row at SPEX's tag, or no two logits, is refused at start in one line
naming the vLLM flag."""

from __future__ import annotations

import asyncio
import math

import pytest

from spex.proto import ScoreResult, decode, encode
from spex.proto.names import SCORE_JOBS, SINGLE, query_inbox
from spex.services.scorer import Scorer
from spex.shared.content.prompt_style import DEFAULT_STYLE
from spex.shared.content.prompts import plain_template
from spex.shared.content.reward_prompts import STEP_TAG_SYSTEM_PROMPT, RewardFormat
from spex.shared.engine.api import EngineRequest
from spex.shared.runtime.service import redis_client
from spex.shared.runtime.settings import Settings
from spex.shared.serving import open_engine
from spex.shared.serving.backend import EngineMisconfigured
from tests.services.helpers import known_query, score_job, wait_for
from tests.serving.driving import driving
from tests.serving.fake_vllm_pooling import fake_pooling, step_rows, token_logits, tokens

QUESTION = "What is 2 + 3?"
STEPS = ["Two plus three.", "That is 5.", "The answer is \\boxed{5}."]


def softmax(logits: list[float], index: int) -> float:
    exps = [math.exp(x) for x in logits]
    return exps[index] / sum(exps)


async def served(fmt: RewardFormat, rows: str, **server: object) -> tuple[list[float | None], list[dict]]:
    """Each path of STEPS scored on the fake server by a serving engine of family `fmt`."""
    async with fake_pooling(rows=rows, **server) as fake:
        e = open_engine("vllm", fake.url, 10.0, reward=True, prm=fmt)
        async with driving(e) as d:
            rids = []
            for n in range(1, len(STEPS) + 1):
                req = EngineRequest(f"r{n}", (("q", 8),), f"n{n}", 0)
                req.text = tuple(fmt.pieces(QUESTION, STEPS[:n], plain_template, DEFAULT_STYLE))
                e.submit(req)
                rids.append(req.rid)
            done = await d.wait(*rids, timeout_s=10.0)
        return [c.reward for c in done], fake.bodies


def test_a_step_tag_models_reward_is_p_right_at_the_last_tag() -> None:
    fmt = RewardFormat("step-tag")
    rewards, bodies = asyncio.run(served(fmt, "step"))
    probe, *jobs = bodies
    assert probe["input"] == "1<extra_0>"  # one step, tagged
    for n, (reward, body) in enumerate(zip(rewards, jobs), 1):
        text = body["input"]
        assert text.startswith(f"{STEP_TAG_SYSTEM_PROMPT}\n\n{QUESTION}\n\n") and text.endswith("<extra_0>")
        assert text.count("<extra_0>") == n
        assert reward == pytest.approx(softmax(step_rows(text, "<extra_0>")[-1], 1))


def test_a_plus_minus_models_reward_is_p_good_at_the_last_token() -> None:
    fmt = RewardFormat("plus-minus")
    rewards, bodies = asyncio.run(served(fmt, "token"))
    probe, *jobs = bodies
    assert probe["input"] == "1 ки"
    for n, (reward, body) in enumerate(zip(rewards, jobs), 1):
        text = body["input"]
        assert text == f"{QUESTION} " + "\n".join(f"{s} ки" for s in STEPS[:n])
        assert reward == pytest.approx(softmax(token_logits(tokens(text)[-1]), 0))  # (good, bad): good


async def refusal(fmt: RewardFormat, rows: str, **server: object) -> str:
    async with fake_pooling(rows=rows, **server) as fake:
        e = open_engine("vllm", fake.url, 10.0, reward=True, prm=fmt)
        try:
            with pytest.raises(EngineMisconfigured) as refused:
                await e.start(wait_s=5.0)
        finally:
            await e.close()
        return str(refused.value).split(": ", 1)[1]


def test_a_server_whose_step_pooler_rows_at_another_token_is_refused_naming_pooler_config() -> None:
    message = asyncio.run(refusal(RewardFormat("step-tag"), "step", step_tag="<other>"))
    assert message.startswith("/pooling gives no row at the step tag '<extra_0>': start it with ")
    assert "--pooler-config '{\"step_tag_id\": N}'" in message and "\n" not in message


def test_a_causal_lm_served_without_its_token_head_is_refused_naming_convert_classify() -> None:
    message = asyncio.run(refusal(RewardFormat("plus-minus"), "embedding"))
    assert message.startswith("/pooling gives 64 numbers a row, not the good and bad tokens' logits")
    assert "--convert classify --hf-overrides '{\"classifier_from_token\": [\"+\", \"-\"]," in message


def test_the_scorer_writes_its_familys_layout_and_publishes_the_reward(redis_url: str) -> None:
    async def go() -> tuple[list, list[dict]]:
        async with fake_pooling(rows="step") as fake:
            settings = Settings(
                redis_url=redis_url, consumer="scorer-a", block_ms=50, engine="vllm", engine_url="http://gen:1",
                content="real", prm_url=fake.url, prm_engine="vllm", prm_kind="step-tag",
            )  # fmt: skip
            r = redis_client(settings)
            scorer = Scorer(r, settings)
            await scorer.prepare()
            stop = asyncio.Event()
            task = asyncio.create_task(scorer.run(stop))
            try:
                await known_query(r)
                job = score_job(
                    ["root", "n0", "n1"], job_id="j2", node_id="n1", content="real", question=QUESTION,
                    steps=STEPS[:2], split="newline",
                )  # fmt: skip
                await r.xadd(SCORE_JOBS, {"e": encode(job)})

                async def scored() -> bool:
                    return await r.xlen(query_inbox("q", SINGLE)) == 1

                assert await wait_for(scored)
                stream = query_inbox("q", SINGLE)
                inbox = [decode(stream, f[b"e"]) for _, f in await r.xrange(stream)]
            finally:
                stop.set()
                await task
                await r.aclose()
            return inbox, fake.bodies

    inbox, bodies = asyncio.run(go())
    [result] = [m for m in inbox if isinstance(m, ScoreResult)]
    text = bodies[-1]["input"]
    assert text == f"{STEP_TAG_SYSTEM_PROMPT}\n\n{QUESTION}\n\n{STEPS[0]}<extra_0>{STEPS[1]}<extra_0>"
    assert result.reward == pytest.approx(softmax(step_rows(text, "<extra_0>")[-1], 1))
