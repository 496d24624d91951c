"""One tenant holding more long-lived requests than its cap cannot starve another: alice opens
streamed and waiting chat completions and an event stream, far past her cap, on an ingress with
a pool of 8 connections; she holds her cap's worth of each kind (streams, completions waiting)
and the rest are 429s with Retry-After (in
OpenAI's shape on its face), while bob's submissions are all 202, `/ready` all 200 and bob's own
streams are served. Nothing answers (no pipeline), so alice's requests stay open throughout. A
real ingress process, a real Redis."""

import asyncio

import aiohttp

from spex.shared.runtime.redis_server import free_port
from tests.services.cluster import Cluster
from tests.services.helpers import HELD, held_or_refused, http_headed, wait_http

ALICE, BOB = "alice-secret-token-0001", "bob-secret-token-00002"
CAP = 4  # SPEX_HTTP_STREAMS_PER_CLIENT
POOL = 8  # SPEX_HTTP_REDIS_CONNECTIONS
STREAMED, WAITING = 12, 6  # alice's chat completions, streamed and not
CHAT = {"model": "spex:rebase-4", "messages": [{"role": "user", "content": "What is 2 + 2?"}]}


def chat(session, base, token, stream):
    body = {**CHAT, "stream": stream}
    return held_or_refused(session.post(f"{base}/v1/chat/completions", json=body, headers=auth(token)))


def events(session, base, token, qid):
    return held_or_refused(session.get(f"{base}/v1/questions/{qid}/events", headers=auth(token)))


def auth(token):
    return {"Authorization": f"Bearer {token}"}


def submit(base, token, question):
    return asyncio.to_thread(http_headed, "POST", f"{base}/v1/questions", {"question": question}, token)


def test_a_tenant_past_its_cap_gets_429s_and_another_is_served(redis_url):
    port = free_port()
    base = f"http://127.0.0.1:{port}"

    async def go():
        cluster = Cluster(
            redis_url, "processes", http_port=port, auth_tokens=f"alice={ALICE},bob={BOB}",
            http_redis_connections=POOL, http_streams_per_client=CAP,
        )  # fmt: skip
        await cluster.start("ingress", "ingress-0")
        await asyncio.to_thread(wait_http, f"{base}/health")
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        try:
            status, mine, _ = await submit(base, ALICE, "a?")
            assert status == 202
            asks = [chat(session, base, ALICE, True) for _ in range(STREAMED)]
            asks += [chat(session, base, ALICE, False) for _ in range(WAITING)]
            alice = asyncio.gather(*asks, events(session, base, ALICE, mine["query_id"]))
            await asyncio.sleep(1.0)  # alice's requests are in: her cap's worth held, polling
            posts = [submit(base, BOB, f"{i}?") for i in range(20)]
            probes = [asyncio.to_thread(http_headed, "GET", f"{base}/ready") for _ in range(20)]
            bobs = await asyncio.gather(*posts, *probes, chat(session, base, BOB, True))
            accepted = [body["query_id"] for status, body, _ in bobs[:20] if status == 202]
            bobs.append(await events(session, base, BOB, accepted[0]) if accepted else None)
            return await alice, bobs
        finally:
            await session.close()
            await cluster.stop()

    alice, bobs = asyncio.run(go())
    held = [r for r in alice if r == HELD]
    refused = [r for r in alice if r != HELD]
    assert len(held) == 2 * CAP, alice  # her cap's worth of streams, and of completions waiting
    for status, body, retry_after in refused:
        assert (status, retry_after) == (429, "1"), body
        message = body["error"] if isinstance(body["error"], str) else body["error"]["message"]
        assert f"limit {CAP}" in message, body
    chats = [body for _, body, _ in refused if isinstance(body["error"], dict)]
    assert all(b["error"]["type"] == "rate_limit_error" for b in chats) and len(chats) >= len(refused) - 1
    posts, probes, streams = bobs[:20], bobs[20:40], bobs[40:]
    assert [status for status, _, _ in posts] == [202] * 20, posts
    assert [(status, body) for status, body, _ in probes] == [(200, {"status": "ready"})] * 20
    assert streams == [HELD, HELD]  # his chat stream and his event stream opened and stayed open
