"""The scorer with `SPEX_PRM_URL` and `SPEX_PRM_ENGINE=vllm` scores real steps on a server
speaking vLLM's pooling API and publishes each reward to its query; started against a server
that cannot score, it refuses in one line naming the vLLM flag. A real Redis."""

import asyncio
import math

import pytest

from spex.proto import ScoreResult, decode, encode
from spex.proto.names import SCORE_JOBS, SINGLE, query_inbox
from spex.services.scorer import Scorer
from spex.shared.content.prompts import prompt_pieces
from spex.shared.runtime.service import redis_client
from spex.shared.runtime.settings import Settings
from spex.shared.serving.backend import EngineMisconfigured
from tests.services.helpers import known_query, score_job, wait_for
from tests.serving.fake_vllm_pooling import fake_pooling, token_logits, tokens

QUESTION = "What is 2 + 3?"
STEPS = ["2 + 3 = 5.", "The answer is \\boxed{5}."]


def settings(redis_url, prm_url):
    return Settings(
        redis_url=redis_url, consumer="scorer-a", block_ms=50, engine="vllm", engine_url="http://gen:1",
        content="real", prm_url=prm_url, prm_engine="vllm",
    )  # fmt: skip


def test_each_step_gets_the_servers_reward_at_its_last_token(redis_url):
    async def go():
        async with fake_pooling() as server:
            s = settings(redis_url, server.url)
            r = redis_client(s)
            scorer = Scorer(r, s)
            await scorer.prepare()
            stop = asyncio.Event()
            task = asyncio.create_task(scorer.run(stop))
            try:
                await known_query(r)
                for depth in (1, 2):  # a step, and the one after it
                    job = score_job(
                        ["root", *[f"n{i}" for i in range(depth)]], job_id=f"j{depth}", node_id=f"n{depth}",
                        content="real", question=QUESTION, steps=STEPS[:depth], split="newline",
                    )  # fmt: skip
                    await r.xadd(SCORE_JOBS, {"e": encode(job)})

                async def both():
                    return await r.xlen(query_inbox("q", SINGLE)) == 2

                assert await wait_for(both)
                inbox = [
                    decode(query_inbox("q", SINGLE), f[b"e"])
                    for _, f in await r.xrange(query_inbox("q", SINGLE))
                ]
            finally:
                stop.set()
                await task
                await r.aclose()
            return inbox

    results = {m.job_id: m.reward for m in asyncio.run(go()) if isinstance(m, ScoreResult)}
    for depth in (1, 2):
        text = "".join(prompt_pieces(QUESTION, STEPS[:depth], style="newline"))  # plain: no tokenizer given
        wrong, right = token_logits(tokens(text)[-1])
        assert results[f"j{depth}"] == pytest.approx(1.0 / (1.0 + math.exp(wrong - right)))


def test_a_server_that_serves_generation_is_refused_at_start(redis_url):
    async def go():
        async with fake_pooling(pooling=False) as server:
            s = settings(redis_url, server.url)
            scorer = Scorer(redis_client(s), s)
            with pytest.raises(EngineMisconfigured) as refused:
                await scorer.prepare()
            await scorer.engine.close()
            return str(refused.value)

    assert asyncio.run(go()).endswith(
        "no /pooling: serve the reward model with --runner pooling (not for generation)"
    )
