"""The JSON SPEX's OpenAI face answers with (`openai_api`), field by field, in OpenAI's shapes: a
refusal, a model of `GET /v1/models`, a `chat.completion` and its streamed
`chat.completion.chunk`s, each with SPEX's own `spex` field beside OpenAI's. Plain dicts at run
time: the bytes on the wire are `json.dumps`'s of them. The request's body is read as a JSON
object and checked parameter by parameter (`openai_params`)."""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

from spex.shared.core.search.base import ParamValue
from spex.shared.runtime.bodies import NodeJson, ServedJson

__all__ = [
    "Chunk",
    "ChunkChoice",
    "ChunkHead",
    "Completion",
    "ErrorBody",
    "ModelCard",
    "ModelList",
    "SearchAbout",
    "SpexError",
    "SpexNode",
    "SpexReply",
    "Usage",
]


class ErrorDetail(TypedDict):
    message: str
    type: str  # invalid_request_error, rate_limit_error or server_error
    param: str | None
    code: str | None


class ErrorBody(TypedDict):
    """A refusal: `{"error": {"message", "type", "param", "code"}}`."""

    error: ErrorDetail


class SearchAbout(TypedDict):
    """What a listed model's search is (its `spex` field)."""

    search: str
    family: str
    answer_selection: str
    parameters: dict[str, ParamValue]  # name -> default
    origin: str
    summary: str


class ModelCard(TypedDict):
    id: str  # spex:<search>-<target>
    object: Literal["model"]
    created: int
    owned_by: str
    spex: SearchAbout


class ModelList(TypedDict):
    object: Literal["list"]
    data: list[ModelCard]


class Usage(TypedDict):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class SpexReply(TypedDict):
    """SPEX's own field of a completion (and of a stream's last chunk): the query and its answer."""

    query_id: str
    answer: str | None
    nodes: int
    tokens_generated: int
    latency_s: float
    tree_digest: str
    speculative_issued: int
    speculative_adopted: int
    correct: bool | None
    error: str | None
    served_by: ServedJson | None


class SpexNode(TypedDict):
    """SPEX's own field of a chunk that carries a change of the tree."""

    query_id: str
    node: NodeJson


class SpexError(TypedDict):
    """SPEX's own field of a chunk that says the search failed (or the queue went away)."""

    query_id: str
    error: str


class Message(TypedDict):
    role: Literal["assistant"]
    content: str


class Choice(TypedDict):
    index: int
    message: Message
    finish_reason: str


class Completion(TypedDict):
    """A `chat.completion`: one choice, its usage, and SPEX's field."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    spex: SpexReply


class Delta(TypedDict):
    role: NotRequired[Literal["assistant"]]
    content: NotRequired[str]


class ChunkChoice(TypedDict):
    index: int
    delta: Delta
    finish_reason: str | None


class ChunkHead(TypedDict):
    """What every chunk of one stream carries first (`usage`: null on each but the usage's own,
    where the usage was asked for)."""

    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    usage: NotRequired[None]


class Chunk(TypedDict):
    """A chunk's own part, after its head: its choices, then SPEX's field or the usage."""

    choices: list[ChunkChoice]
    spex: NotRequired[SpexReply | SpexNode | SpexError]
    usage: NotRequired[Usage]
