"""The HTTP ingress over real HTTP: submit, poll, idempotency, one-line errors, backpressure."""

import asyncio
import json
import time
import urllib.error
import urllib.request

from spex.shared.runtime.redis_server import free_port
from tests.services.cluster import Cluster


def http(method, url, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_submit_and_poll_over_http(redis_url):
    port = free_port()

    async def go():
        cluster = Cluster(redis_url, "processes", http_port=port, backlog_limit=2)
        await cluster.start("ingress", "ingress-0")
        base = f"http://127.0.0.1:{port}/v1/questions"
        deadline = time.monotonic() + 10
        while True:  # wait for the server
            try:
                http("GET", f"{base}/none")
                break
            except OSError:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
        try:
            bad = await asyncio.to_thread(http, "POST", base, {"question": "x", "target": "many"})
            unknown = await asyncio.to_thread(http, "POST", base, {"question": "x", "colour": 1})
            bad_t3 = await asyncio.to_thread(http, "POST", base, {"question": "x", "early_stop_alpha": -1})
            first = await asyncio.to_thread(
                http,
                "POST",
                base,
                {"question": "1+1?", "algorithm": "rstar", "target": 3, "client_key": "h1"},
            )
            again = await asyncio.to_thread(
                http,
                "POST",
                base,
                {"question": "1+1?", "algorithm": "rstar", "target": 3, "client_key": "h1"},
            )
            other = await asyncio.to_thread(http, "POST", base, {"question": "2+2?", "client_key": "h2"})
            full = await asyncio.to_thread(http, "POST", base, {"question": "3+3?", "client_key": "h3"})
            pending = await asyncio.to_thread(http, "GET", f"{base}/{first[1]['query_id']}")
            # Now let the pipeline answer it.
            await cluster.start_all()
            qid = first[1]["query_id"]
            deadline = time.monotonic() + 30
            while True:
                done = await asyncio.to_thread(http, "GET", f"{base}/{qid}")
                if done[0] == 200 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.1)
            return bad, unknown, bad_t3, first, again, other, full, pending, done
        finally:
            await cluster.stop()

    bad, unknown, bad_t3, first, again, other, full, pending, done = asyncio.run(go())
    assert bad == (400, {"error": "target: expected int"})
    assert bad_t3[0] == 400 and bad_t3[1]["error"].startswith("early_stop_alpha: must be above 0")
    assert unknown == (400, {"error": "colour: unknown field"})
    assert first[0] == 202 and again == first  # same client key, same query
    assert other[0] == 202
    assert full[0] == 429 and "retry later" in full[1]["error"]  # backlog limit 2
    assert pending == (202, {"status": "searching"})
    assert done[0] == 200 and done[1]["status"] == "answered" and done[1]["nodes"] > 0
    assert done[1]["early_stopped"] is False  # T3 is off unless asked for
