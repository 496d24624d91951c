"""Cancelling a question that is answered already says so: a 409 naming it, not a 202 as if
it were being cancelled (issue 52); its answer is still read with a GET. A real ingress, a real
Redis; the answer is written as a coordinator writes it."""

import asyncio

from spex.proto import AnswerResult
from spex.proto.names import SINGLE
from spex.services.coordinator.store import QueryStore
from spex.shared.runtime.redis_server import free_port
from tests.services.cluster import Cluster
from tests.services.helpers import http, wait_http


def test_a_cancel_of_an_answered_question_is_a_409(redis_url):
    port = free_port()
    base = f"http://127.0.0.1:{port}/v1/questions"

    async def go():
        cluster = Cluster(redis_url, "inprocess", http_port=port)
        await cluster.start("ingress", "ingress-0")
        await asyncio.to_thread(wait_http, base + "/x")
        store = QueryStore(cluster.client.r, "coord-0", lease_s=5.0, result_ttl_s=60, partitions=SINGLE)
        try:
            status, body = await asyncio.to_thread(http, "POST", base, {"question": "2 + 2?"})
            qid = body["query_id"]
            searching = await asyncio.to_thread(http, "DELETE", f"{base}/{qid}")
            answered = await asyncio.to_thread(http, "POST", base, {"question": "3 + 3?"})
            done = answered[1]["query_id"]
            epoch = (await store.adopt(done, read_request=False)).epoch
            reply = AnswerResult(msg_id=f"{done}/answer", query_id=done, answer="6")
            await store.answer(await cluster.client.request(done), epoch, reply)
            refused = await asyncio.to_thread(http, "DELETE", f"{base}/{done}")
            read = await asyncio.to_thread(http, "GET", f"{base}/{done}")
            return status, searching, refused, read, done
        finally:
            await cluster.stop()

    status, searching, refused, read, done = asyncio.run(go())
    assert status == 202 and searching == (202, {"status": "cancelling"})
    assert refused[0] == 409 and "answered already" in refused[1]["error"] and done in refused[1]["error"]
    assert read[0] == 200 and read[1]["answer"] == "6"
