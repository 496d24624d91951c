"""A takeover that fails fails for its own query only: a lapsed query whose keys Redis refuses
(an inbox of the wrong type) is logged and passed over, and the takeover round goes on to the
next, which is adopted; a lapsed query of a search this coordinator lacks is answered as failed,
naming the search and those it knows."""

import asyncio

import structlog

from spex.proto import SubmitQuestionRequest, encode
from spex.proto.names import (
    COORDINATOR_GROUP,
    COORDINATORS_ACTIVE,
    INGRESS,
    SINGLE,
    query_inbox,
    query_request,
    reply_key,
)
from spex.services.coordinator import Coordinator
from spex.shared.runtime.connect import redis_client
from spex.shared.runtime.settings import Settings

BROKEN = 12  # more than a loop's failures in a row before its service gives up


def request(qid: str, algorithm: str = "rebase") -> SubmitQuestionRequest:
    return SubmitQuestionRequest(
        msg_id=f"s/{qid}", query_id=qid, question="2+2?", algorithm=algorithm, target=4, mode="baseline"
    )


async def lapsed(r, req: SubmitQuestionRequest, due: int) -> None:
    """Stored as the ingress stores it, due for a takeover (its holder stopped renewing)."""
    await r.set(query_request(req.query_id, SINGLE), encode(req))
    await r.zadd(COORDINATORS_ACTIVE, {req.query_id: due})


def test_a_query_redis_refuses_is_passed_over_and_the_next_is_taken_over(redis_url):
    async def go():
        settings = Settings(redis_url=redis_url, consumer="coord-0")
        coord = Coordinator(redis_client(settings), settings)
        await coord.bus.ensure_group(INGRESS, COORDINATOR_GROUP)  # the round reclaims its entries first
        r = coord.store.r
        for i in range(BROKEN):
            await lapsed(r, request(f"bad{i}"), due=1)
            await r.set(query_inbox(f"bad{i}", SINGLE), b"not a stream")  # a key of the wrong type
        await lapsed(r, request("good"), due=2)
        with structlog.testing.capture_logs() as logs:
            for _ in range(3):
                await coord.takeover_round()  # raises nothing
            await asyncio.sleep(0.1)  # the replay's task
        failed = {e["query_id"] for e in logs if e["event"] == "takeover_failed"}
        held = set(coord.queries)
        await r.aclose()
        return failed, held

    failed, held = asyncio.run(go())
    assert failed == {f"bad{i}" for i in range(BROKEN)}
    assert held == {"good"}


def test_a_lapsed_query_of_a_search_this_coordinator_lacks_is_answered_naming_it(redis_url):
    async def go():
        settings = Settings(redis_url=redis_url, consumer="coord-0")
        coord = Coordinator(redis_client(settings), settings)
        await coord.bus.ensure_group(INGRESS, COORDINATOR_GROUP)  # the round reclaims its entries first
        await lapsed(coord.store.r, request("plugged", algorithm="pruned_sc"), due=1)
        await coord.takeover_round()
        answer = await coord.store.r.get(reply_key("plugged", SINGLE))
        await coord.store.r.aclose()
        return answer

    answer = asyncio.run(go())
    assert answer is not None and b"unknown algorithm 'pruned_sc'; known: " in answer
