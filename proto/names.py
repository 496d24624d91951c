"""Every Redis name SPEX uses — streams, keys, consumer groups — and the messages each carries.

A name that depends on an id is a `Name`: call it to build the name, `.parse` to get the id
back, so no service slices strings. A query's keys share the hash tag `{q:<id>}`, which keeps
them in one Redis Cluster slot (so one Lua script may touch them all).
"""

from __future__ import annotations

import re

from spex.proto.messages import (
    AnswerResult,
    BudgetUpdateEvent,
    CancelRequest,
    GenerateRequest,
    GenerateResult,
    JobFailedEvent,
    Message,
    NodeEvent,
    PromoteRequest,
    QueryStatsEvent,
    ScoreRequest,
    ScoreResult,
    SubmitQuestionRequest,
    WorkerLoadEvent,
)

__all__ = [
    "ALLOCATOR_LEASE",
    "ALLOCATOR_STATUS",
    "ANSWERS",
    "COORDINATOR_GROUP",
    "COORDINATORS_ACTIVE",
    "DEFAULT_POOL",
    "GENERATOR_GROUP",
    "GEN_CONTROL",
    "GEN_WORKERS",
    "INGRESS",
    "INGRESS_IN_FLIGHT",
    "KEYS",
    "QUERY_STATS",
    "SCORER_GROUP",
    "SCORE_JOBS",
    "STREAMS",
    "Name",
    "client_in_flight",
    "dead_letter",
    "gen_jobs",
    "message_types",
    "query_cancelled",
    "query_checkpoint",
    "query_epoch",
    "query_inbox",
    "query_lease",
    "query_request",
    "query_sent",
    "query_tree",
    "reply_key",
    "submitted_key",
    "worker_jobs",
    "worker_load",
]


class Name:
    """A family of names with one id in it: `pattern` holds `<id>` where the id goes."""

    def __init__(self, pattern: str) -> None:
        head, sep, tail = pattern.partition("<id>")
        if not sep:
            raise ValueError(f"name pattern {pattern!r} has no <id>")
        self.pattern, self._head, self._tail = pattern, head, tail
        self._re = re.compile(re.escape(head) + "(.+)" + re.escape(tail), re.S)

    def __call__(self, ident: str) -> str:
        return f"{self._head}{ident}{self._tail}"

    def parse(self, name: str | bytes) -> str | None:
        """The id in `name`, or None if `name` is not of this family."""
        text = name.decode() if isinstance(name, bytes) else name
        m = self._re.fullmatch(text)
        return m.group(1) if m else None

    @property
    def glob(self) -> str:
        """A SCAN pattern that matches every name of the family."""
        return self("*")

    def __repr__(self) -> str:
        return f"Name({self.pattern!r})"


# ---------------------------------------------------------------------------- streams
INGRESS = "ingress:new"  # questions, read by the coordinators' group
gen_jobs = Name("gen:jobs:<id>")  # generation jobs of one worker pool (shared by its workers)
DEFAULT_POOL = "default"


def worker_jobs(pool: str, worker: str) -> str:
    """The stream of one worker's own jobs (routed to it by prefix affinity); a member of the
    `gen_jobs` family, so it carries the same messages."""
    return gen_jobs(f"{pool}.{worker}")


GEN_CONTROL = "gen:control"  # cancels and promotions, fanned out to every generator (no group)
SCORE_JOBS = "score:jobs"
query_inbox = Name("{q:<id>}:in")  # every result a query received, in order; never trimmed
query_tree = Name("{q:<id>}:tree")  # the query's NodeEvents, for watchers; expires with its answer
QUERY_STATS = "stats:queries"  # coordinators → allocator telemetry (trimmed)
ANSWERS = "answers"  # every answer, for consumers that follow all queries
dead_letter = Name("dlq:<id>")  # dlq:<stream>: entries given up on, with the reason

# ---------------------------------------------------------------------------- groups
COORDINATOR_GROUP = "coord"  # on INGRESS
GENERATOR_GROUP = "gen"  # on gen_jobs(pool); KEDA scales generators on its lag
SCORER_GROUP = "score"  # on SCORE_JOBS

# ---------------------------------------------------------------------------- keys
reply_key = Name("{q:<id>}:answer")  # the query's AnswerResult, written once
query_request = Name("{q:<id>}:req")  # the SubmitQuestionRequest, for a takeover
query_lease = Name("{q:<id>}:lease")  # the owning coordinator, with a TTL
query_epoch = Name("{q:<id>}:epoch")  # fencing token, incremented per lease taken
query_checkpoint = Name("{q:<id>}:ckpt")  # hash: epoch, last applied inbox entry, digest
COORDINATORS_ACTIVE = "coord:active"  # zset: query id -> lease expiry (ms), for the reaper
INGRESS_IN_FLIGHT = "ingress:inflight"  # zset: query id -> submitted (ms), not yet answered
client_in_flight = Name("ingress:inflight:<id>")  # the same, per client (token name)
submitted_key = Name("submitted:<id>")  # <client>/<client key> -> query id and body hash
query_sent = Name("{q:<id>}:sent")  # hash: ids of the messages published for it (idempotent publish)
query_cancelled = Name("{q:<id>}:cancelled")  # hash: its jobs cancelled (a queued one never starts)
worker_load = Name("worker:<id>:load")  # a generator's WorkerLoadEvent; its TTL is liveness
ALLOCATOR_LEASE = "allocator:lease"  # the one active budget allocator
ALLOCATOR_STATUS = "allocator:status"  # JSON: its governors' slack and pools, for watchers (TTL)
GEN_WORKERS = "gen:workers"  # zset: generator worker -> its last load report (ms); kept while
# its stream may hold jobs, so peers find (and drain) the stream of a worker that died

# Stream (or stream family) -> the message types it carries.
STREAMS: dict[str | Name, tuple[type[Message], ...]] = {
    INGRESS: (SubmitQuestionRequest,),
    gen_jobs: (GenerateRequest, CancelRequest),
    GEN_CONTROL: (CancelRequest, PromoteRequest),
    SCORE_JOBS: (ScoreRequest,),
    query_inbox: (GenerateResult, ScoreResult, BudgetUpdateEvent, CancelRequest, JobFailedEvent),
    query_tree: (NodeEvent,),
    QUERY_STATS: (QueryStatsEvent,),
    ANSWERS: (AnswerResult,),
}

# Key (or key family) holding one encoded message -> its type.
KEYS: dict[str | Name, tuple[type[Message], ...]] = {
    reply_key: (AnswerResult,),
    query_request: (SubmitQuestionRequest,),
    worker_load: (WorkerLoadEvent,),
}


def message_types(name: str) -> tuple[type[Message], ...]:
    """The message types a concrete stream or key carries; ValueError if none are registered."""
    for table in (STREAMS, KEYS):
        for family, types in table.items():
            if family == name or (isinstance(family, Name) and family.parse(name) is not None):
                return types
    raise ValueError(f"no message types are registered for {name!r}")
