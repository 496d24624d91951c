"""A question is held to what the generators' engine takes: `prompt_tokens` (or, without it,
the question's estimated tokens) past the engine's bound is refused at submission, naming the
field — never accepted and then failed in the engine (which dead-lettered its jobs). On the
simulated engine the bound is the profile's KV pool less the deepest path, and a question at
the bound is answered. A real ingress process and real services, a real Redis."""

import asyncio

from spex.proto import SubmissionError
from spex.proto.submission import CHARS_PER_TOKEN
from spex.shared.roofline.hardware import parse_profile
from spex.shared.runtime.redis_server import free_port
from spex.shared.runtime.settings import Settings
from tests.services.cluster import Cluster
from tests.services.helpers import http, wait_http


def test_the_engines_bound_is_the_sim_profiles_kv_less_the_deepest_path():
    s = Settings()
    assert s.limits.max_prompt_tokens == parse_profile(s.profile).kv_capacity_tokens - 26 * s.max_step_tokens
    assert Settings(max_prompt_tokens=8_192).limits.max_prompt_tokens == 8_192


def test_prompt_tokens_past_the_engine_is_a_400_naming_the_field(redis_url):
    port = free_port()
    most = Settings().limits.max_prompt_tokens

    async def go():
        cluster = Cluster(redis_url, "processes", http_port=port)
        await cluster.start("ingress", "ingress-0")
        base = f"http://127.0.0.1:{port}/v1/questions"
        await asyncio.to_thread(wait_http, base + "/x")
        try:
            post = lambda body: asyncio.to_thread(http, "POST", base, body)  # noqa: E731
            return (
                await post({"question": "x", "prompt_tokens": 10_000_000}),
                await post({"question": "x", "prompt_tokens": most + 1}),
                await post({"question": "x", "prompt_tokens": most}),
            )
        finally:
            await cluster.stop()

    huge, past, at = asyncio.run(go())
    assert huge[0] == 400 and huge[1]["error"].startswith("prompt_tokens: at most "), huge
    reason = f"prompt_tokens: at most {most:,} (what the engine takes), not {most + 1:,}"
    assert past == (400, {"error": reason})
    assert at[0] == 202


def test_a_question_at_the_bound_is_answered_and_past_it_refused(redis_url):
    async def go():
        cluster = Cluster(redis_url, "inprocess", max_prompt_tokens=20_000)
        await cluster.start_all()
        try:
            qid = await cluster.client.submit("2+2?", algorithm="rebase", target=4, prompt_tokens=20_000)
            answer = await cluster.client.result(qid, timeout_s=60)
            refused = []
            for given in ({"prompt_tokens": 20_001}, {}):
                try:  # the second: no prompt_tokens, a question estimated past the bound
                    await cluster.client.submit("x" * (20_001 * CHARS_PER_TOKEN), **given)
                except SubmissionError as exc:
                    refused.append(exc.field)
            return answer, refused
        finally:
            await cluster.stop()

    answer, refused = asyncio.run(go())
    assert answer is not None and not answer.error, answer
    assert refused == ["prompt_tokens", "question"]
