"""The JSON the ingress answers with and its clients read, field by field: a question's answer
(`GET /v1/questions/{id}`, the event stream's `answer` event), its nodes (the tree, the event
stream's `node` events), what served it and its baseline twin. Written by `views` and the
ingress, read by the Python client (`spex._replies`); the docs' HTTP reference describes the
same fields. Plain dicts at run time: the bytes on the wire are `json.dumps`'s of them."""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

__all__ = [
    "AnswerJson",
    "NodeFields",
    "NodeJson",
    "NodeTimes",
    "OverviewJson",
    "QuestionInFlightJson",
    "ServedJson",
    "TreeJson",
    "TreeNodeJson",
    "TwinJson",
    "WorkerJson",
]


class ServedJson(TypedDict):
    """What answered a question: the engine, its model (None on `sim`), the content and the
    reward as readers are shown it; on synthetic content, the note that says so."""

    engine: str
    model: str | None
    content: str
    reward: str
    demonstration: NotRequired[str]


class TwinJson(TypedDict):
    """A question's baseline twin: its answer and digest once answered, and whether both trees
    and answers are the same (None until both are answered)."""

    query_id: str
    status: str
    answer: NotRequired[str | None]
    tree_digest: NotRequired[str]
    lossless: bool | None


class AnswerJson(TypedDict):
    """A question's answer: what was found, how, and at what cost."""

    status: Literal["answered", "failed", "cancelled"]
    answer: str | None
    correct: bool | None
    solution: list[str]
    nodes: int
    tokens_generated: int
    latency_s: float
    tree_digest: str
    early_stopped: bool
    speculative_issued: int
    speculative_adopted: int
    served_by: ServedJson | None
    error: NotRequired[str]  # only a failed question's
    baseline_twin: NotRequired[TwinJson]  # only where one was asked for


class NodeFields(TypedDict):
    """A node of a question's tree as it stands."""

    id: str
    parent: str | None  # None: the root
    index: int
    action: str
    depth: int
    state: str
    generated: bool
    running: bool
    text: str
    tokens: int
    answer: str | None
    reward: float | None
    finish_reason: str


class NodeJson(NodeFields):
    """A node's change (an event): its fields, and when (seconds since the query was taken up)."""

    t_s: float


class NodeTimes(TypedDict):
    """When a node was first seen, generated, scored and given up (None: not yet)."""

    issued_s: float
    generated_s: float | None
    scored_s: float | None
    ended_s: float | None


class TreeNodeJson(NodeFields):
    """A node of a folded tree: its latest fields and its times."""

    times: NodeTimes


class TreeJson(TypedDict):
    """A question's tree as searched so far (`status`: "searching" or what became of it)."""

    query_id: str
    status: str
    nodes: list[TreeNodeJson]


class QuestionInFlightJson(TypedDict):
    """A question in flight: how long it has waited and the events of its tree so far."""

    query_id: str
    waiting_s: float
    events: int


class WorkerJson(TypedDict):
    """A generator's load as it last reported it, and what the allocator gives it."""

    worker: str
    running: int
    waiting: int
    primary: int
    speculative: int
    slots: int
    kv_held: int
    kv_capacity: int
    prefix_cache_hit_rate: float
    slack: float | None  # its governor's TPOT slack (None: the allocator has not said)
    pool: int | None  # the speculative jobs the allocator lets it hold


class OverviewJson(TypedDict):
    """The cluster at a glance (`GET /v1/overview`). A client's scope has its own questions
    only: the operator's figures null and no workers."""

    scope: Literal["operator", "client"]
    in_flight: int
    backlog: int | None
    questions: list[QuestionInFlightJson]
    window_s: float
    answered: int | None
    answers_per_s: float | None
    nodes_per_s: float | None
    speculative_issued: int | None
    speculative_adopted: int | None
    hit_rate: float | None
    granted: int | None  # the speculative budget the allocator granted
    tpot_target: float | None
    workers: list[WorkerJson]
    served_by: NotRequired[ServedJson | None]  # added by the ingress: what its pipeline answers with
