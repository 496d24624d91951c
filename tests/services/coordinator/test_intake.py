"""The coordinator searches a question only as the ingress stored it: the request under its id
is the query's record. A question on the ingress stream that no ingress stored, or whose id
another request holds, is dead-lettered and answered by nobody; one already answered is let
be. A real Redis, one intake round."""

import asyncio

from spex.proto import SubmitQuestionRequest, encode
from spex.proto.names import COORDINATOR_GROUP, INGRESS, SINGLE, dead_letter, query_request, reply_key
from spex.services.coordinator import Coordinator
from spex.shared.runtime.connect import redis_client
from spex.shared.runtime.settings import Settings


def request(qid, msg_id=None):
    return SubmitQuestionRequest(
        msg_id=msg_id or f"submit/{qid}", query_id=qid, question="2+2?", algorithm="rebase", target=4,
        mode="baseline",
    )  # fmt: skip


def test_only_the_stored_request_is_searched(redis_url):
    async def go():
        settings = Settings(redis_url=redis_url, consumer="coord-0")
        coord = Coordinator(redis_client(settings), settings)
        r = coord.store.r
        await coord.bus.ensure_group(INGRESS, COORDINATOR_GROUP)
        await r.set(query_request("stored", SINGLE), encode(request("stored")))  # as the ingress stores it
        await r.set(query_request("taken", SINGLE), encode(request("taken", msg_id="another")))
        await r.set(reply_key("answered", SINGLE), b"x")  # answered, its request expired with the answer
        for qid in ("stored", "taken", "foreign", "answered"):
            await r.xadd(INGRESS, {"e": encode(request(qid))})
        await coord.intake_round()
        await coord.intake_round()
        reasons = {}
        for _, fields in await r.xrange(dead_letter(INGRESS)):
            reasons[fields[b"reason"].decode()] = fields[b"id"].decode()
        pending = (await r.xpending(INGRESS, COORDINATOR_GROUP))["pending"]
        replies = [q for q in ("taken", "foreign") if await r.exists(reply_key(q, SINGLE))]
        held = set(coord.queries)
        await r.aclose()
        return held, sorted(reasons), pending, replies

    held, reasons, pending, replies = asyncio.run(go())
    assert held == {"stored"}
    assert reasons == [
        "its query id belongs to another request",
        "not submitted through the ingress: no request is stored under its id",
    ]
    assert pending == 0  # every entry acked or parked: the answered one too
    assert replies == []  # nobody waits on them through the ingress: no answer written
