"""The OpenAI `user` (and `safety_identifier`) field is bounded — past MAX_USER_CHARS a 400
naming it — and the ingress's log keeps a digest of it, never what the client sent (issue 52: no
limit, and written whole into the log line). A real ingress process, its log read back."""

import asyncio
import hashlib

import aiohttp

from spex.services.ingress.openai_params import MAX_USER_CHARS
from spex.shared.runtime.redis_server import free_port
from tests.services.cluster import Cluster
from tests.services.helpers import held_or_refused, http, wait_http

CHAT = {"model": "spex:rebase-4", "messages": [{"role": "user", "content": "What is 2 + 2?"}]}
USER = "end-user-4711@example.org"


def test_user_is_bounded_and_logged_as_a_digest(redis_url):
    port = free_port()
    base = f"http://127.0.0.1:{port}"

    async def go():
        cluster = Cluster(redis_url, "processes", http_port=port)
        await cluster.start("ingress", "ingress-0")
        await asyncio.to_thread(wait_http, f"{base}/health")
        try:
            long = {**CHAT, "user": "u" * (MAX_USER_CHARS + 1)}
            refused = await asyncio.to_thread(http, "POST", f"{base}/v1/chat/completions", long)
            unsafe = {**CHAT, "safety_identifier": "s" * (MAX_USER_CHARS + 1)}
            refused_too = await asyncio.to_thread(http, "POST", f"{base}/v1/chat/completions", unsafe)
            async with aiohttp.ClientSession() as session:  # nothing answers: it waits, held
                ask = session.post(f"{base}/v1/chat/completions", json={**CHAT, "user": USER})
                await held_or_refused(ask, 2)
            await asyncio.sleep(0.5)
            return refused, refused_too, cluster.logs()
        finally:
            await cluster.stop()

    refused, refused_too, logs = asyncio.run(go())
    assert refused[0] == 400 and refused[1]["error"]["param"] == "user", refused
    assert f"at most {MAX_USER_CHARS}" in refused[1]["error"]["message"]
    assert refused_too[0] == 400 and refused_too[1]["error"]["param"] == "safety_identifier"
    assert "chat_completion_submitted" in logs, logs
    assert USER not in logs and hashlib.sha256(USER.encode()).hexdigest()[:16] in logs
