"""The ingress refuses new questions with a 503 (Retry-After, a reason naming memory) once their
searches' reserves would pass what SPEX_MEMORY_HEADROOM of Redis's maxmemory leaves — on both
faces, before Redis itself refuses the writes — and takes them again once it has room (its
figures are at most a second old). Reads
go on. A real ingress process, a real Redis at a maxmemory just above what it uses."""

import asyncio

import redis

from spex.shared.runtime.redis_server import free_port
from tests.services.cluster import Cluster
from tests.services.helpers import http, wait_http


def test_a_redis_near_its_maxmemory_is_a_503_for_new_questions_only(redis_url):
    port = free_port()
    sync = redis.Redis.from_url(redis_url)

    async def go():
        cluster = Cluster(redis_url, "processes", http_port=port, memory_headroom=0.9)
        await cluster.start("ingress", "ingress-0")
        base = f"http://127.0.0.1:{port}"
        await asyncio.to_thread(wait_http, base + "/v1/questions/x")
        post = lambda path, body: asyncio.to_thread(http, "POST", base + path, body)  # noqa: E731
        try:
            room = await post("/v1/questions", {"question": "1+1?"})
            await asyncio.sleep(1.1)  # the ingress's figures: a second old at most
            used = int(sync.info("memory")["used_memory"])
            sync.config_set("maxmemory", int(used / 0.95))  # 95% full: past the 90% headroom
            await asyncio.sleep(1.1)
            full = await post("/v1/questions", {"question": "2+2?"})
            ask = {"model": "spex:rebase", "messages": [{"role": "user", "content": "3+3?"}]}
            chat = await post("/v1/chat/completions", ask)
            read = await asyncio.to_thread(http, "GET", f"{base}/v1/questions/{room[1]['query_id']}")
            headers = await asyncio.to_thread(_headers, base + "/v1/questions")
            sync.config_set("maxmemory", 0)
            await asyncio.sleep(1.1)
            again = await post("/v1/questions", {"question": "4+4?"})
            return room, full, chat, read, headers, again
        finally:
            sync.config_set("maxmemory", 0)
            await cluster.stop()

    room, full, chat, read, headers, again = asyncio.run(go())
    sync.close()
    assert room[0] == 202 and again[0] == 202
    assert full[0] == 503 and full[1]["error"].startswith("redis memory: "), full
    assert "maxmemory" in full[1]["error"] and "SPEX_MEMORY_HEADROOM" in full[1]["error"]
    assert chat[0] == 503 and chat[1]["error"]["type"] == "server_error", chat  # OpenAI's shape
    assert read[0] == 202  # a question in flight is still read
    assert headers["Retry-After"].isdigit()


def _headers(url):
    """The headers of a refused POST."""
    import urllib.error
    import urllib.request

    headers = {"Content-Type": "application/json"}
    req = urllib.request.Request(url, data=b'{"question": "5+5?"}', method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return dict(resp.headers)
    except urllib.error.HTTPError as exc:
        return dict(exc.headers)
