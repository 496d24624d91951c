"""Adoption is one round trip to Redis: a question off the ingress stream (is it answered, is it
the request stored under its id, the lease, the inbox) and a query whose holder stopped
renewing (the same, its request read from Redis) each take one command, its inbox replayed
from what that command returned. (The replay's own writes are the search's, left out here.)"""

import asyncio

from spex.proto import SubmitQuestionRequest, encode
from spex.proto.names import SINGLE, query_inbox, query_lease, query_request
from spex.services.coordinator import Coordinator
from spex.services.coordinator.reports import Found, Submitted
from spex.shared.runtime.connect import redis_client
from spex.shared.runtime.settings import Settings


def request(qid: str) -> SubmitQuestionRequest:
    return SubmitQuestionRequest(msg_id=f"s/{qid}", query_id=qid, question="2+2?", target=4, mode="baseline")


def test_an_intake_and_a_takeover_each_adopt_in_one_round_trip(redis_url):
    async def go():
        settings = Settings(redis_url=redis_url, consumer="coord-0")
        coord = Coordinator(redis_client(settings), settings)
        r = coord.store.r
        replayed = {}

        async def replay(query, _issued, entries):  # what the adoption handed over
            replayed[query.query_id] = len(entries)

        coord.driver.replay = replay
        for qid in ("warm", "new", "lapsed"):
            await r.set(query_request(qid, SINGLE), encode(request(qid)))  # as the ingress stores it
        await r.xadd(query_inbox("lapsed", SINGLE), {"e": b"a result for its last holder"})
        await r.set(query_lease("lapsed", SINGLE), "coord-gone", px=1)  # its holder stopped renewing
        await asyncio.sleep(0.01)

        await coord.adopter.submitted(request("warm"))  # the script loaded, as after a first question
        sent: list[str] = []  # every command the coordinator sends, by name
        execute = r.execute_command

        async def counted(*args, **options):
            sent.append(str(args[0]))
            return await execute(*args, **options)

        r.execute_command = counted
        verdict = await coord.adopter.submitted(request("new"))
        intake, sent[:] = list(sent), []
        await coord.adopter.take_over("lapsed")
        takeover = list(sent)
        await asyncio.sleep(0.05)  # the takeover's replay task
        held = set(coord.queries)
        await r.aclose()
        return verdict, intake, takeover, replayed, held

    verdict, intake, takeover, replayed, held = asyncio.run(go())
    assert verdict == (Submitted.THIS, Found.TAKEN)
    assert intake == takeover == ["EVALSHA"], f"adoption sent {intake} (intake) and {takeover} (takeover)"
    assert replayed == {"warm": 0, "new": 0, "lapsed": 1} and held == {"warm", "new", "lapsed"}
