"""Every 429 and 503 the ingress sends carries Retry-After, on SPEX's routes and the OpenAI
face alike: a client over its questions in flight, a full backlog, and with Redis away every
route that reads it and `/ready` (a busy pool's 503: test_a_busy_pool_is_back_pressure_not_an_
outage.py; a client past its long-lived requests' cap: test_one_tenant_cannot_starve_another.py).
Real ingress processes, a real Redis (and a port where none listens)."""

import asyncio

from spex.shared.runtime.redis_server import free_port
from tests.services.cluster import Cluster
from tests.services.helpers import http_headed, wait_http

ALICE, BOB = "alice-secret-token-0001", "bob-secret-token-00002"
TOKENS = f"alice={ALICE},bob={BOB}"
QID = "0123456789abcdef"
CHAT = {"model": "spex:rebase-4", "messages": [{"role": "user", "content": "What is 2 + 2?"}]}


def refusals(base, requests):
    """(what, status, body, Retry-After) of each (what, method, path, body, token) request."""
    out = []
    for what, method, path, body, token in requests:
        status, reply, headers = http_headed(method, f"{base}{path}", body, token=token)
        out.append((what, status, reply, headers.get("Retry-After")))
    return out


def test_refusals_for_too_much_work_say_when_to_retry(redis_url):
    port = free_port()
    base = f"http://127.0.0.1:{port}"

    async def go():
        cluster = Cluster(
            redis_url, "processes", http_port=port, auth_tokens=TOKENS, backlog_limit=2, client_in_flight=1
        )
        await cluster.start("ingress", "ingress-0")  # no pipeline: what is submitted stays in flight
        await asyncio.to_thread(wait_http, f"{base}/health")
        try:
            first = await asyncio.to_thread(
                http_headed, "POST", f"{base}/v1/questions", {"question": "1?"}, ALICE
            )
            assert first[0] == 202, first
            mine = [
                ("client full", "POST", "/v1/questions", {"question": "2?"}, ALICE),
                ("client full, openai", "POST", "/v1/chat/completions", CHAT, ALICE),
            ]
            over = await asyncio.to_thread(refusals, base, mine)
            second = await asyncio.to_thread(
                http_headed, "POST", f"{base}/v1/questions", {"question": "3?"}, BOB
            )
            assert second[0] == 202, second
            full = [
                ("backlog full", "POST", "/v1/questions", {"question": "4?"}, BOB),
                ("backlog full, openai", "POST", "/v1/chat/completions", CHAT, BOB),
            ]
            return over + await asyncio.to_thread(refusals, base, full)
        finally:
            await cluster.stop()

    for what, status, body, retry_after in asyncio.run(go()):
        assert status == 429 and retry_after == "1", (what, status, body, retry_after)


def test_with_redis_away_every_route_s_503_says_when_to_retry(redis_url):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    away = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there

    async def go():
        cluster = Cluster(redis_url, "processes", http_port=port)
        cluster.urls["ingress-0"] = away
        await cluster.start("ingress", "ingress-0")
        await asyncio.to_thread(wait_http, f"{base}/health")
        try:
            every = [
                ("submit", "POST", "/v1/questions", {"question": "1?"}, None),
                ("read", "GET", f"/v1/questions/{QID}", None, None),
                ("cancel", "DELETE", f"/v1/questions/{QID}", None, None),
                ("tree", "GET", f"/v1/questions/{QID}/tree", None, None),
                ("events", "GET", f"/v1/questions/{QID}/events", None, None),
                ("overview", "GET", "/v1/overview", None, None),
                ("chat", "POST", "/v1/chat/completions", CHAT, None),
                ("ready", "GET", "/ready", None, None),
            ]
            return await asyncio.to_thread(refusals, base, every)
        finally:
            await cluster.stop()

    replies = asyncio.run(go())
    for what, status, body, retry_after in replies:
        assert status == 503 and retry_after == "1", (what, status, body, retry_after)
    chat = next(body for what, _, body, _ in replies if what == "chat")
    assert chat["error"]["type"] == "server_error"  # OpenAI's shape on its face
