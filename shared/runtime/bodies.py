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
    "ServedJson",
    "TreeJson",
    "TreeNodeJson",
    "TwinJson",
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
