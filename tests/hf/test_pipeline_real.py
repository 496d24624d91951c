"""`spex up --engine hf` as separate processes answers MATH-500 questions with a model's text,
each answer graded against the dataset's reference."""

import asyncio
from dataclasses import replace

import redis.asyncio as aioredis

from spex.proto import GenerateResult, ScoreResult, decode
from spex.proto.names import query_inbox
from spex.services.launcher import up
from spex.shared.content.datasets import load_questions
from spex.shared.runtime.client import IngressClient
from spex.shared.runtime.redis_server import free_port
from spex.shared.runtime.settings import Settings


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
    questions = load_questions("math500", limit=3)

    async def ask(url):
        client = IngressClient(aioredis.Redis.from_url(url))
        try:
            qids = [
                await client.submit(
                    q.text, algorithm="rebase", target=2, mode="spex", reference_answer=q.reference_answer
                )
                for q in questions
            ]
            answers = [await client.result(qid, timeout_s=120) for qid in qids]
            inbox = {qid: await client.r.xrange(query_inbox(qid)) for qid in qids}
            return answers, {q: [decode(query_inbox(q), f[b"e"]) for _, f in e] for q, e in inbox.items()}
        finally:
            await client.aclose()

    with up(replace(settings), redis_url=redis_url) as live:
        answers, inboxes = asyncio.run(ask(live.redis_url))
    assert all(a is not None for a in answers), "a question was not answered"
    for answer, events in zip(answers, inboxes.values(), strict=True):
        assert answer.correct is not None  # graded (a random model's answers are wrong)
        assert answer.nodes >= 2
        steps = [e for e in events if isinstance(e, GenerateResult)]
        scores = [e for e in events if isinstance(e, ScoreResult)]
        assert steps and all(e.text and not e.text.startswith("Step ") for e in steps)  # a model's text
        assert all(0.0 < s.reward < 1.0 for s in scores) and scores  # the reward model's
