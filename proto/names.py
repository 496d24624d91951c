"""Every Redis name SPEX uses — streams, keys, consumer groups — and the messages each carries.

A name that depends on an id is a `Name` (a query's key: a `QueryName`; one named after a
client: a `ClientName`): call it to build the name, `.parse` to get the id back, so no service
slices strings. A query's keys share the hash tag `{q:<id>}`, which keeps
them in one Redis Cluster slot (so one Lua script may touch them all).

Partitions (a Redis Cluster): with `Partitions(n)`, n > 1, every global stream and set is
split into n parts, `<name>:{pK}`, and a query's keys take its partition's tag in front,
`{pK}{q:<id>}:in` (Redis hashes the first braces only). A query's keys, the parts of the
global streams its messages go to (`placed`), its client key and its in-flight entries then
share one slot, so every script stays one atomic call on one shard, and a read of many
queries' inboxes is one command per partition. Readers read every part (`spread`). The worker
registry lives in part 0 (`home`). With one partition (a single Redis, `SINGLE`) every name is
as written here. A query's key and a client's are built with the deployment's `Partitions`
(`query_inbox(qid, partitions)`), which each service, bus and client holds: nothing here is
set by a process.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

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
from spex.proto.text import as_str

__all__ = [
    "ALLOCATOR_LEASE",
    "ALLOCATOR_STATUS",
    "ANSWERS",
    "COORDINATOR_GROUP",
    "COORDINATORS_ACTIVE",
    "COORD_MEMBERS",
    "DATA_KEPT",
    "DATA_LOST",
    "DATA_LOST_AWAITED",
    "DEFAULT_POOL",
    "GENERATOR_GROUP",
    "GEN_CONTROL",
    "GEN_WORKERS",
    "INGRESS",
    "INGRESS_IN_FLIGHT",
    "INGRESS_RESERVED",
    "INGRESS_RESERVED_TOTAL",
    "KEYS",
    "QUERY_STATS",
    "SCORER_GROUP",
    "SCORE_JOBS",
    "SINGLE",
    "STREAMS",
    "ClientName",
    "Family",
    "Name",
    "Partitions",
    "QueryName",
    "client_in_flight",
    "dead_letter",
    "gen_jobs",
    "logical",
    "message_types",
    "query_cancelled",
    "query_checkpoint",
    "query_epoch",
    "query_inbox",
    "query_lease",
    "query_request",
    "query_sent",
    "query_tree",
    "query_tree_record",
    "reply_key",
    "submitted_key",
    "worker_jobs",
    "worker_curve",
    "worker_load",
]


class Family:
    """A family of names with one id in it: `pattern` holds `<id>` where the id goes."""

    def __init__(self, pattern: str) -> None:
        head, sep, tail = pattern.partition("<id>")
        if not sep:
            raise ValueError(f"name pattern {pattern!r} has no <id>")
        self.pattern, self._head, self._tail = pattern, head, tail
        self._re = re.compile(re.escape(head) + "(.+)" + re.escape(tail), re.S)

    def _name(self, ident: str) -> str:
        return f"{self._head}{ident}{self._tail}"

    def _ident(self, name: str | bytes) -> str | None:
        text = as_str(name)
        m = self._re.fullmatch(text)
        return m.group(1) if m else None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.pattern!r})"


class Name(Family):
    """A family whose names are the same however the deployment is partitioned."""

    def __call__(self, ident: str) -> str:
        return self._name(ident)

    def parse(self, name: str | bytes) -> str | None:
        """The id in `name`, or None if `name` is not of this family."""
        return self._ident(name)

    @property
    def glob(self) -> str:
        """A SCAN pattern that matches every name of the family."""
        return self("*")


_TAG = re.compile(r"\{p\d+\}")  # a partition's hash tag, in front of a name
_SUFFIX = re.compile(r":\{p(\d+)\}$")


class QueryName(Family):
    """A key of one query: with partitions, its partition's tag goes in front."""

    def __call__(self, ident: str, partitions: Partitions) -> str:
        name = self._name(ident)
        return name if partitions.count == 1 else f"{{p{partitions.partition(ident)}}}{name}"

    def parse(self, name: str | bytes) -> str | None:
        """The query id in `name` (with its partition's tag or without), or None if `name` is
        not of this family."""
        text = as_str(name)
        m = _TAG.match(text)
        return self._ident(text[m.end() :] if m else text)

    def glob(self, partitions: Partitions) -> str:
        """A SCAN pattern that matches every name of the family."""
        return ("" if partitions.count == 1 else "{p*}") + self._name("*")


class ClientName(Family):
    """A key named after a client or its client key (text a client chose): with partitions,
    its braces (and `%`) are escaped, so a client's own `{...}` can neither pick the key's
    slot nor pass for a partition's tag (`key:{p3}`)."""

    def __call__(self, ident: str, partitions: Partitions) -> str:
        if partitions.count > 1:
            ident = ident.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")
        return self._name(ident)

    def parse(self, name: str | bytes, partitions: Partitions) -> str | None:
        if partitions.count == 1:
            return self._ident(name)
        ident = self._ident(logical(name))
        if ident is None:
            return ident
        return ident.replace("%7B", "{").replace("%7D", "}").replace("%25", "%")


# ---------------------------------------------------------------------------- partitions
@dataclass(frozen=True)
class Partitions:
    """How a deployment splits its global streams and sets (a property of the deployment, like
    the names themselves: every process of it builds its keys with the same count). Each
    service, bus and client holds the one it was built with."""

    count: int

    def __post_init__(self) -> None:
        if not 1 <= self.count <= 16384:
            raise ValueError(f"partitions: {self.count}; 1 to 16384")

    def partition(self, ident: str) -> int:
        """The partition of a query (or of a client key): a stable hash of it."""
        return 0 if self.count == 1 else zlib.crc32(ident.encode()) % self.count

    def _part(self, name: str, k: int) -> str:
        if self.count == 1:
            return name
        # Redis hashes the first `{...}`: a name that holds a brace of its own (a client key may)
        # takes the tag in front.
        return f"{{p{k}}}{name}" if "{" in name else f"{name}:{{p{k}}}"

    def _placed_already(self, name: str) -> bool:
        return self.count == 1 or _TAG.match(name) is not None or _SUFFIX.search(name) is not None

    def placed(self, name: str, query_id: str) -> str:
        """Where a message (or entry) of query `query_id` goes on the global stream or set
        `name`: its partition's part. A query's own key (already tagged) stays as it is."""
        return name if self._placed_already(name) else self._part(name, self.partition(query_id))

    def spread(self, name: str) -> list[str]:
        """Every part of the global stream or set `name` (for its readers)."""
        if self._placed_already(name):
            return [name]
        return [self._part(name, k) for k in range(self.count)]

    def home(self, name: str) -> str:
        """A key of the worker registry (the workers' set and their load reports, written by
        one script): in partition 0."""
        return name if self._placed_already(name) else self._part(name, 0)


SINGLE = Partitions(1)  # a single Redis: every name as written here


def logical(name: str | bytes) -> str:
    """The global name a part belongs to (`gen:jobs:default:{p3}` -> `gen:jobs:default`); a
    query's own key without its partition's tag."""
    text = as_str(name)
    m = _TAG.match(text)
    return _SUFFIX.sub("", text[m.end() :] if m else text)


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
query_inbox = QueryName("{q:<id>}:in")  # every result a query received, in order, until it is answered
query_tree = QueryName("{q:<id>}:tree")  # the query's NodeEvents, for watchers, until it is answered
QUERY_STATS = "stats:queries"  # coordinators → allocator telemetry (trimmed)
ANSWERS = "answers"  # every answer, for consumers that follow all queries
dead_letter = Name("dlq:<id>")  # dlq:<stream>: entries given up on, with the reason

# ---------------------------------------------------------------------------- groups
COORDINATOR_GROUP = "coord"  # on INGRESS
GENERATOR_GROUP = "gen"  # on gen_jobs(pool); KEDA scales generators on its lag
SCORER_GROUP = "score"  # on SCORE_JOBS

# ---------------------------------------------------------------------------- keys
reply_key = QueryName("{q:<id>}:answer")  # the query's AnswerResult, written once
# Its tree stream's entries in one record (`tree_record`), written with the answer, which the
# stream is deleted for; it expires with the answer.
query_tree_record = QueryName("{q:<id>}:tree.z")
query_request = QueryName("{q:<id>}:req")  # the SubmitQuestionRequest, for a takeover
query_lease = QueryName("{q:<id>}:lease")  # the owning coordinator, with a TTL
query_epoch = QueryName("{q:<id>}:epoch")  # fencing token, incremented per lease taken
query_checkpoint = QueryName("{q:<id>}:ckpt")  # hash: epoch, last applied inbox entry, digest
COORDINATORS_ACTIVE = "coord:active"  # zset: query id -> lease expiry (ms), for the reaper
INGRESS_IN_FLIGHT = "ingress:inflight"  # zset: query id -> submitted (ms), not yet answered
INGRESS_RESERVED = "ingress:reserved"  # hash: query id -> bytes its search may hold (`reserve`), in flight
INGRESS_RESERVED_TOTAL = "ingress:reserved:total"  # the sum of ingress:reserved's bytes (memory admission)
INGRESS_READY = "ingress:ready"  # written (expiring) by each /ready: Redis takes writes
client_in_flight = ClientName("ingress:inflight:<id>")  # the same, per client (token name)
submitted_key = ClientName("submitted:<id>")  # <client>/<client key> -> query id and body hash
# The data's epoch: a token the first submission leaves, and whoever marks a loss anew (no TTL):
# seen and then gone, Redis lost its data (`spex.shared.runtime.data_loss`).
DATA_KEPT = "data:kept"
DATA_LOST = "data:lost"  # hash: when a loss began (ms) and who noticed it; expires (the longest wait)
DATA_LOST_AWAITED = "data:lost:awaited"  # set: coordinators storing again what they held at the loss
COORD_MEMBERS = "coord:members"  # zset: coordinator -> its last lease round (ms, Redis's clock)
query_sent = QueryName("{q:<id>}:sent")  # hash: ids of the messages published for it (idempotent publish)
query_cancelled = QueryName("{q:<id>}:cancelled")  # hash: its jobs cancelled (a queued one never starts)
worker_load = Name("worker:<id>:load")  # a generator's WorkerLoadEvent; its TTL is liveness
# JSON: the step curve a generator's engine was measured at (`spex profile --json`'s format),
# which the allocator budgets that worker by; absent: the catalog profile (SPEX_PROFILE).
worker_curve = Name("worker:<id>:curve")
ALLOCATOR_LEASE = "allocator:lease"  # the one active budget allocator
ALLOCATOR_STATUS = "allocator:status"  # JSON: its governors' slack and pools, for watchers (TTL)
GEN_WORKERS = "gen:workers"  # zset: generator worker -> its last load report (ms); kept while
# its stream may hold jobs, so peers find (and drain) the stream of a worker that died

# Stream (or stream family) -> the message types it carries.
STREAMS: dict[str | Name | QueryName, tuple[type[Message], ...]] = {
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
KEYS: dict[str | Name | QueryName, tuple[type[Message], ...]] = {
    reply_key: (AnswerResult,),
    query_request: (SubmitQuestionRequest,),
    worker_load: (WorkerLoadEvent,),
}


def message_types(name: str) -> tuple[type[Message], ...]:
    """The message types a concrete stream or key carries; ValueError if none are registered."""
    name = logical(name)
    for table in (STREAMS, KEYS):
        for family, types in table.items():
            if family == name or (isinstance(family, (Name, QueryName)) and family.parse(name) is not None):
                return types
    raise ValueError(f"no message types are registered for {name!r}")
