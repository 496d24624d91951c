"""The HTTP ingress answers out-of-range or malformed input with a 400 (a question's own prompt
too: a chat template that does not compile, an unknown preset), and unknown or malformed query
ids with a 404. A real ingress process, a real Redis."""

import asyncio

from spex.shared.runtime.redis_server import free_port
from tests.services.cluster import Cluster
from tests.services.helpers import http, wait_http


def test_out_of_range_input_is_a_400_and_unknown_ids_a_404(redis_url):
    port = free_port()

    async def go():
        cluster = Cluster(redis_url, "processes", http_port=port)
        await cluster.start("ingress", "ingress-0")
        base = f"http://127.0.0.1:{port}/v1/questions"
        await asyncio.to_thread(wait_http, base + "/x")
        try:
            post = lambda body: asyncio.to_thread(http, "POST", base, body)  # noqa: E731
            return {
                "big target": await post({"question": "x", "algorithm": "rebase", "target": 20000}),
                "huge target": await post({"question": "x", "target": 10**30}),
                "huge seed": await post({"question": "x", "seed": 10**30}),
                "negative seed": await post({"question": "x", "seed": -1}),
                "surrogate": await asyncio.to_thread(http, "POST", base, raw=b'{"question": "\\ud800"}'),
                "nested": await asyncio.to_thread(http, "POST", base, raw=b"[" * 100_000 + b"]" * 100_000),
                "not utf-8": await asyncio.to_thread(http, "POST", base, raw=b'{"question": "\xff"}'),
                "unknown id": await asyncio.to_thread(http, "GET", f"{base}/0123456789abcdef"),
                "malformed id": await asyncio.to_thread(http, "GET", f"{base}/%00%ff..%2F"),
                "bad template": await post({"question": "x", "chat_template": "{% for m in messages %}"}),
                "bad preset": await post({"question": "x", "prompt_preset": "sal"}),
                "long delimiter": await post({"question": "x", "step_delimiter": "#" * 65}),
            }
        finally:
            await cluster.stop()

    got = asyncio.run(go())
    assert got["big target"] == (400, {"error": "target: at most 256 for rebase, not 20000"})
    for name in ("huge target", "huge seed", "negative seed", "surrogate", "nested", "not utf-8"):
        assert got[name][0] == 400, (name, got[name])
    assert got["unknown id"][0] == 404 and got["malformed id"][0] == 404
    status, reply = got["bad template"]  # compiled at submission: a 400 naming the field and line
    assert status == 400 and reply["error"].startswith("chat_template: line 1: ")
    preset = "prompt_preset: one of spex, search-and-learn (or empty), not 'sal'"
    assert got["bad preset"] == (400, {"error": preset})
    assert got["long delimiter"] == (400, {"error": "step_delimiter: at most 64 characters"})
