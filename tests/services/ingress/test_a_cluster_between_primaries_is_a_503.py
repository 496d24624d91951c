"""A Redis Cluster between primaries (a slot unserved in a failover: redis-py raises
`SlotNotCoveredError`, which is not a `RedisError`) is Redis unavailable: the ingress answers
503 with Retry-After, not 500; a wrong password after start is a 503 that names no secret; and
Redis back again serves again. A real ingress in this process, a real Redis, real HTTP; the
failures are the client's, raised where the cluster client raises them."""

import asyncio

from redis.exceptions import AuthenticationError, SlotNotCoveredError

from spex.shared.runtime.redis_server import free_port
from tests.services.cluster import Cluster
from tests.services.helpers import http_retry_after, wait_http


def test_an_unserved_slot_and_a_refused_password_are_503s(redis_url):
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1/questions"

    async def go():
        cluster = Cluster(redis_url, "inprocess", http_port=port)
        await cluster.start("ingress", "ingress-0")
        service = cluster.tasks["ingress-0"][2]
        submit = service.client.submit
        try:
            await asyncio.to_thread(wait_http, f"http://127.0.0.1:{port}/health")
            replies = []
            failures = (SlotNotCoveredError("slot 1234 is not covered"), AuthenticationError("WRONGPASS"))
            for failure in failures:

                async def failing(*args, failure=failure, **kwargs):
                    raise failure

                service.client.submit = failing
                replies.append(await asyncio.to_thread(http_retry_after, "POST", url, {"question": "1+1?"}))
            service.client.submit = submit
            replies.append(await asyncio.to_thread(http_retry_after, "POST", url, {"question": "1+1?"}))
            return replies
        finally:
            await cluster.stop()

    unserved, password, back = asyncio.run(go())
    assert unserved[0] == 503 and unserved[1] == "1", unserved
    assert unserved[2]["error"] == "the queue is unreachable; retry later"
    assert password[0] == 503 and password[1] is not None and "credentials" in password[2]["error"], password
    assert back[0] == 202, back
