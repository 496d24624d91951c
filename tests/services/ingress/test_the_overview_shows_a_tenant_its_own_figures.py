"""With tokens, `/v1/overview` shows a tenant its own figures only — its questions in flight,
none of anyone else's work, no worker loads — and everyone's to the operator's token alone
(SPEX_OPERATOR_TOKEN). (Issue 52: any tenant saw the global in-flight count and the workers'
loads.) A real ingress process, a real Redis; nothing answers, so every question stays in flight."""

import asyncio

from spex.shared.runtime.redis_server import free_port
from tests.services.cluster import Cluster
from tests.services.helpers import http, wait_http

ALICE, BOB = "alice-secret-token-0001", "bob-secret-token-00002"
OPERATOR = "operator-token-000000003"


def test_a_tenant_sees_its_own_figures_and_the_operator_everyones(redis_url):
    port = free_port()
    base = f"http://127.0.0.1:{port}"

    async def go():
        cluster = Cluster(
            redis_url, "processes", http_port=port, auth_tokens=f"alice={ALICE},bob={BOB}",
            operator_token=OPERATOR,
        )  # fmt: skip
        await cluster.start("ingress", "ingress-0")
        await asyncio.to_thread(wait_http, f"{base}/health")
        try:

            def ask(token, i):
                return http("POST", f"{base}/v1/questions", {"question": f"{i} + {i}?"}, token=token)

            alices = [(await asyncio.to_thread(ask, ALICE, i))[1]["query_id"] for i in range(2)]
            bobs = [(await asyncio.to_thread(ask, BOB, i))[1]["query_id"] for i in range(3)]
            callers = (("alice", ALICE), ("bob", BOB), ("operator", OPERATOR), ("nobody", "x" * 20))
            seen = {
                who: await asyncio.to_thread(http, "GET", f"{base}/v1/overview", token=token)
                for who, token in callers
            }
            # The operator's token opens the overview alone: not a client's routes.
            submitted = await asyncio.to_thread(ask, OPERATOR, 9)
            return alices, bobs, seen, submitted
        finally:
            await cluster.stop()

    alices, bobs, seen, submitted = asyncio.run(go())
    for who, mine in (("alice", alices), ("bob", bobs)):
        status, figures = seen[who]
        assert status == 200 and figures["scope"] == "client", figures
        assert figures["in_flight"] == len(mine)
        assert sorted(q["query_id"] for q in figures["questions"]) == sorted(mine)
        assert figures["workers"] == [] and figures["backlog"] is None and figures["answered"] is None
    status, figures = seen["operator"]
    assert status == 200 and figures["scope"] == "operator" and figures["in_flight"] == 5
    assert sorted(q["query_id"] for q in figures["questions"]) == sorted(alices + bobs)
    assert figures["backlog"] == 5
    assert seen["nobody"][0] == 401 and submitted[0] == 401
