"""A coordinator that sees Redis restart lets every query it holds go, to adopt it again from
its inbox. If that round fails midway (Redis still loading its AOF answers INFO but not
EXISTS), the next round must see the restart again and finish the job — not take the new run
id as handled and keep queries whose lost jobs nobody re-publishes."""

import asyncio
import contextlib

from redis.exceptions import BusyLoadingError

from spex.proto import SubmitQuestionRequest
from spex.proto.names import SINGLE, query_request
from spex.services.coordinator import Coordinator
from spex.shared.runtime.connect import redis_client
from spex.shared.runtime.settings import Settings


def test_a_restart_round_that_failed_midway_is_carried_out_by_the_next(redis_url):
    async def go():
        settings = Settings(redis_url=redis_url, consumer="coord-0")
        coord = Coordinator(redis_client(settings), settings)
        req = SubmitQuestionRequest(msg_id="s/q", query_id="q", question="2+2?", target=4, mode="baseline")
        await coord.store.r.set(query_request("q", SINGLE), b"x")
        assert await coord.adopter.adopt(req)
        await coord.recover()  # the first round: Redis's run id noted
        coord.recovery._redis_run = "a run before this one"  # as if Redis restarted since

        known = coord.store.known
        loading = [True]

        async def still_loading(qid):
            if loading.pop() if loading else False:
                raise BusyLoadingError("LOADING Redis is loading the dataset in memory")
            return await known(qid)

        coord.store.known = still_loading
        with contextlib.suppress(BusyLoadingError):
            await coord.recover()
        held_after_failed_round = set(coord.queries)
        await coord.recover()
        held_after_next_round = set(coord.queries)
        await coord.store.r.aclose()
        return held_after_failed_round, held_after_next_round, set(coord.recovery.released)

    failed, after, released = asyncio.run(go())
    assert failed == {"q"}  # nothing was done before the failure
    assert after == set() and released == {"q"}  # let go: whoever adopts it replays its inbox
