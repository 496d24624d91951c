"""With bearer tokens, idempotency keys and results are scoped per token: a key is one
question per token, another token cannot read or cancel it, and no token is on a command line.
Real service processes, a real Redis."""

import asyncio
from pathlib import Path

from spex.shared.runtime.redis_server import free_port
from tests.services.cluster import Cluster
from tests.services.helpers import http, wait_http

TOKENS = {"alice": "alice-secret-token-0001", "bob": "bob-secret-token-000002"}


def test_keys_and_results_are_scoped_per_token(redis_url, tmp_path):
    port = free_port()
    tokens = tmp_path / "tokens"
    tokens.write_text("".join(f"{n} {t}\n" for n, t in TOKENS.items()))

    async def go():
        cluster = Cluster(redis_url, "processes", http_port=port, auth_tokens_file=str(tokens))
        await cluster.start_all()
        await cluster.start("ingress", "ingress-0")
        base = f"http://127.0.0.1:{port}/v1/questions"
        await asyncio.to_thread(wait_http, base + "/x")
        call = lambda *a, **k: asyncio.to_thread(http, *a, **k)  # noqa: E731
        try:
            body = {"question": "1+2?", "algorithm": "rstar", "target": 3, "client_key": "k"}
            anonymous = await call("POST", base, body)
            wrong = await call("POST", base, body, token="not-a-token-at-all-000")
            alice = await call("POST", base, body, token=TOKENS["alice"])
            again = await call("POST", base, body, token=TOKENS["alice"])
            different = await call("POST", base, {**body, "question": "9+9?"}, token=TOKENS["alice"])
            bob = await call("POST", base, body, token=TOKENS["bob"])
            qid = alice[1]["query_id"]
            await cluster.client.result(qid, timeout_s=30)
            mine = await call("GET", f"{base}/{qid}", token=TOKENS["alice"])
            theirs = await call("GET", f"{base}/{qid}", token=TOKENS["bob"])
            cancel = await call("DELETE", f"{base}/{qid}", token=TOKENS["bob"])
            cmdlines = [Path(f"/proc/{p.pid}/cmdline").read_bytes() for p in cluster.procs.values()]
            return anonymous, wrong, alice, again, different, bob, mine, theirs, cancel, cmdlines
        finally:
            await cluster.stop()

    anonymous, wrong, alice, again, different, bob, mine, theirs, cancel, cmdlines = asyncio.run(go())
    assert anonymous[0] == 401 and wrong[0] == 401
    assert alice[0] == 202 and again == alice
    assert different[0] == 409 and "client_key" in different[1]["error"]
    assert bob[0] == 202 and bob[1]["query_id"] != alice[1]["query_id"]  # bob's own question
    assert mine[0] == 200 and mine[1]["status"] == "answered"
    assert theirs[0] == 404 and cancel[0] == 404
    assert not any(t.encode() in c for c in cmdlines for t in TOKENS.values())
