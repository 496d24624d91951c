"""What the generator and the scorer share about a job: whether it is still wanted, and how
its query is told that the job was given up on."""

from __future__ import annotations

from spex.proto import GenerateRequest, JobFailedEvent, JobKind, Message, ScoreRequest
from spex.proto.codec import Envelope
from spex.proto.names import query_cancelled, query_inbox, query_request, reply_key
from spex.shared.runtime.bus import Bus

__all__ = ["job_wanted", "tell_query"]


async def job_wanted(bus: Bus, query_id: str, job_id: str | None = None) -> bool:
    """False if the query is unknown or answered, or (given `job_id`) the job was cancelled:
    one round trip."""
    parts = bus.partitions
    async with bus.r.pipeline(transaction=False) as pipe:
        pipe.exists(query_request(query_id, parts))
        pipe.exists(reply_key(query_id, parts))
        if job_id is not None:
            pipe.hexists(query_cancelled(query_id, parts), job_id)
        known, answered, *cancelled = await pipe.execute()
    return bool(known) and not answered and not any(cancelled)


# The job requests by type name (an undecodable entry's `Envelope` names its type).
JOB_REQUESTS: dict[str, type[GenerateRequest] | type[ScoreRequest]] = {
    cls.__name__: cls for cls in (GenerateRequest, ScoreRequest)
}


async def tell_query(bus: Bus, message: Message | Envelope, reason: str) -> None:
    """A job given up on (`Bus.on_dead`): its query fails instead of waiting for it forever —
    also when the job's bytes did not decode (`Envelope`: the ids they name)."""
    kind: JobKind
    if isinstance(message, GenerateRequest | ScoreRequest):
        kind, job_id, node_id = message.job_kind, message.job_id, message.node_id
    elif (
        isinstance(message, Envelope) and message.type in JOB_REQUESTS and message.query_id and message.job_id
    ):
        kind, job_id, node_id = JOB_REQUESTS[message.type].job_kind, message.job_id, message.node_id
    else:
        return
    event = JobFailedEvent(
        msg_id=f"{message.query_id}/{job_id}/{kind}-failed",
        query_id=message.query_id,
        epoch=message.epoch,
        job_id=job_id,
        node_id=node_id,
        kind=kind,
        reason=reason,
    )
    qid, parts = message.query_id, bus.partitions
    await bus.publish(query_inbox(qid, parts), event, require=query_request(qid, parts))
