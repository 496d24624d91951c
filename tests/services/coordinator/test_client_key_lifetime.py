"""A client key is the same question for as long as its answer can be read: a retry while the
question is still searched, past the result TTL since it was submitted, is the same query; once
answered, the key expires with the answer. Real services, a real Redis."""

import asyncio

import pytest

from spex.proto import names
from spex.proto.names import SINGLE
from tests.services.cluster import Cluster

pytestmark = pytest.mark.every_redis  # where Redis versions differ: every server kind


def test_a_retry_after_the_ttl_of_a_question_still_searched_is_the_same_query(redis_url):
    ttl_s = 2

    async def go():
        # Slow enough (~8 s here) that the search outlasts the TTL: the key must not expire under it.
        cluster = Cluster(redis_url, "inprocess", time_scale=0.5, result_ttl_s=ttl_s)
        await cluster.start_all()
        r = cluster.client.r
        try:
            first = await cluster.client.submit("5+5?", client_key="k1", algorithm="rebase", target=16)
            await asyncio.sleep(ttl_s + 1.5)
            searching = (
                await r.exists(names.query_request(first, SINGLE), names.reply_key(first, SINGLE)) == 1
            )
            again = await cluster.client.submit("5+5?", client_key="k1", algorithm="rebase", target=16)
            key = names.submitted_key("/k1", SINGLE)
            ttl_while_searching = await r.ttl(key)
            answer = await cluster.client.result(first, timeout_s=60)
            ttl_after = await r.ttl(key)
            return first, searching, again, ttl_while_searching, answer, ttl_after
        finally:
            await cluster.stop()

    first, searching, again, ttl_while_searching, answer, ttl_after = asyncio.run(go())
    assert searching, "the search ended before the TTL: the test shows nothing"
    assert again == first  # not a second search of the same question
    assert ttl_while_searching > 86_400  # kept while searched (a week's backstop, not the TTL)
    assert answer is not None and 0 < ttl_after <= ttl_s  # then it goes with the answer
