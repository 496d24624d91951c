"""A query a coordinator let go while Redis was unreachable is not lost if Redis comes back
without its data (restarted without persistence): the coordinator kept its request and
searches it again; one Redis kept, or one adopted again, is left alone."""

import asyncio

from spex.proto import SubmitQuestionRequest, encode
from spex.proto.names import SINGLE, query_request
from spex.services.coordinator import Coordinator
from spex.services.coordinator.holdings import Ending
from spex.shared.runtime.connect import redis_client
from spex.shared.runtime.settings import Settings


def request(qid):
    return SubmitQuestionRequest(
        msg_id=f"submit/{qid}", query_id=qid, question="2+2?", algorithm="rebase", target=4, mode="baseline"
    )


def test_a_released_query_redis_lost_is_searched_again_and_one_it_kept_is_not(redis_url):
    async def go():
        settings = Settings(redis_url=redis_url, consumer="coord-0")
        coord = Coordinator(redis_client(settings), settings)
        r = coord.store.r
        for qid in ("lost", "kept"):
            await r.set(query_request(qid, SINGLE), encode(request(qid)))  # as the ingress stores it
            assert await coord.adopter.adopt(request(qid))
            coord.holdings.end(coord.queries[qid], Ending.RELEASED)  # as when Redis could not be reached
        assert not coord.queries and set(coord.recovery.released) == {"lost", "kept"}
        async for key in r.scan_iter(match="*lost*"):  # Redis came back without it
            await r.delete(key)
        await coord.recover()  # as each lease round does
        await asyncio.sleep(0.2)  # the search-again task
        adopted = set(coord.queries)
        stored = await r.exists(query_request("lost", SINGLE))
        await r.aclose()
        return adopted, stored, set(coord.recovery.released)

    adopted, stored, still_released = asyncio.run(go())
    assert adopted == {"lost"} and stored  # its request is stored again and it is searched again
    assert still_released == {"kept"}  # Redis has it: whoever adopts it replays its inbox
