"""Without tokens (the default), callers are told apart by the address their connection comes
from: one caller holding its cap's worth of event streams (and more, refused) leaves another
caller's event stream and chat completions, streamed or not, served — and its own completion
that waits is not refused for its own streams either (streams and waits are capped apart).
(Issue 52: 32 event streams of one caller made every other caller's chat completion, streaming
or not, and event stream a 429.) A real ingress process on loopback: the second caller connects
from 127.0.0.2."""

import asyncio

import aiohttp

from spex.shared.runtime.redis_server import free_port
from tests.services.cluster import Cluster
from tests.services.helpers import HELD, held_or_refused, http, wait_http

CAP = 3  # SPEX_HTTP_STREAMS_PER_CLIENT
CHAT = {"model": "spex:rebase-4", "messages": [{"role": "user", "content": "What is 2 + 2?"}]}


def test_one_anonymous_callers_streams_refuse_no_one_else(redis_url):
    port = free_port()
    base = f"http://127.0.0.1:{port}"

    async def go():
        cluster = Cluster(redis_url, "processes", http_port=port, http_streams_per_client=CAP)
        await cluster.start("ingress", "ingress-0")
        await asyncio.to_thread(wait_http, f"{base}/health")
        first = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        other = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, local_addr=("127.0.0.2", 0)))
        try:
            status, body = await asyncio.to_thread(http, "POST", f"{base}/v1/questions", {"question": "a?"})
            assert status == 202
            events = f"{base}/v1/questions/{body['query_id']}/events"
            hogging = asyncio.gather(*(held_or_refused(first.get(events)) for _ in range(CAP + 3)))
            await asyncio.sleep(1.0)  # the first caller's streams are open
            theirs = await asyncio.gather(
                held_or_refused(other.get(events)),
                held_or_refused(other.post(f"{base}/v1/chat/completions", json=CHAT)),
                held_or_refused(other.post(f"{base}/v1/chat/completions", json={**CHAT, "stream": True})),
                held_or_refused(first.post(f"{base}/v1/chat/completions", json=CHAT)),
            )
            return await hogging, theirs
        finally:
            await first.close()
            await other.close()
            await cluster.stop()

    hogging, theirs = asyncio.run(go())
    assert hogging.count(HELD) == CAP, hogging
    assert all(r[0] == 429 and r[2] for r in hogging if r != HELD), hogging  # its own excess, refused
    assert theirs == [HELD] * 4, theirs  # the other's stream and completions; the first's own wait
