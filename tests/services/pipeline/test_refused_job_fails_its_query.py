"""A question too large for the ingress is a 413; a job the engine refuses (more KV than the
simulated GPU holds, let through by an operator's SPEX_MAX_PROMPT_TOKENS past what the engine
takes) fails its query instead of hanging. Real service processes, a real Redis."""

import asyncio

from spex.shared.runtime.redis_server import free_port
from tests.services.cluster import Cluster
from tests.services.helpers import http, jobs_pending, wait_http


def test_a_job_the_engine_refuses_fails_its_query_instead_of_hanging(redis_url):
    port = free_port()

    async def go():
        cluster = Cluster(redis_url, "processes", http_port=port, max_prompt_tokens=10_000_000)
        await cluster.start_all()
        await cluster.start("ingress", "ingress-0")
        base = f"http://127.0.0.1:{port}/v1/questions"
        await asyncio.to_thread(wait_http, base + "/x")
        r = cluster.client.r
        try:
            huge = await asyncio.to_thread(http, "POST", base, {"question": "x" * 1_000_000})
            # Within the operator's limit, but more KV than the simulated GPU holds.
            qid = await cluster.client.submit(
                "long context", algorithm="rebase", target=4, prompt_tokens=9_000_000
            )
            answer = await cluster.client.result(qid, timeout_s=30)
            await asyncio.sleep(0.3)
            pending = await jobs_pending(r)
            return huge, answer, pending
        finally:
            await cluster.stop()

    huge, answer, pending = asyncio.run(go())
    assert huge[0] == 413 and "question" in huge[1]["error"]
    assert answer is not None and answer.answer is None and "engine" in answer.error
    assert pending == 0
