"""The ingress's replies as typed values: a question's `Answer`, its `Tree`, and its event
stream's `NodeEvent`s and `AnswerEvent` (`EventStream` reads server-sent events). Replies are
read by field name and unknown fields are ignored, so a newer ingress's additions pass."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, cast

from spex._http import Unavailable

if TYPE_CHECKING:
    from spex.shared.runtime.bodies import AnswerJson, TreeJson, TreeNodeJson

__all__ = [
    "Answer",
    "AnswerEvent",
    "BaselineTwin",
    "Event",
    "EventStream",
    "NodeEvent",
    "ServedBy",
    "Tree",
    "TreeNode",
]


@dataclass(frozen=True)
class ServedBy:
    """What answered a question: the engine, its model, the content and the reward.

    Attributes:
        engine: `sim`, `hf`, `vllm` or `sglang`.
        model: The model's name (`None` on `sim`).
        content: `"real"` (the model's text) or `"synthetic"` (the workload's stand-ins).
        reward: `"prm"` (a reward model's) or `"logprob"` (the model's own log-probabilities);
            on synthetic content `"sim-prm"` or `"sim-logprob"`, the workload's simulated ones.
        demonstration: On synthetic content, the note that the steps are not a model's.
    """

    engine: str
    model: str | None
    content: str
    reward: str
    demonstration: str | None = None


@dataclass(frozen=True)
class BaselineTwin:
    """A question's baseline twin (submitted with `baseline_twin=True`): the same search with
    speculation off. `lossless`: both trees and answers the same (`None` until both answered)."""

    query_id: str
    status: str
    answer: str | None = None
    tree_digest: str | None = None
    lossless: bool | None = None


@dataclass(frozen=True)
class Answer:
    """A question's answer, as `GET /v1/questions/{id}` gives it.

    Attributes:
        query_id: The question's id.
        status: `"answered"`, `"failed"` or `"cancelled"`.
        answer: The chosen answer (`None`: none found).
        correct: Graded against the reference sent with it (`None`: none was sent).
        solution: The steps of the best solution.
        nodes: Steps the search generated.
        tokens_generated: Their tokens.
        latency_s: From submission to answer.
        tree_digest: A digest of the searched tree: the same search, the same digest.
        early_stopped: Adaptive early termination (T3) ended the search.
        speculative_issued: Speculative generations issued for it.
        speculative_adopted: Of those, the ones its search used.
        served_by: What answered it (`None`: an answer stored by a coordinator that did not record it).
        error: Why it failed (`None` unless it did).
        baseline_twin: Its baseline twin, where one was asked for.
    """

    query_id: str
    status: Literal["answered", "failed", "cancelled"]
    answer: str | None
    correct: bool | None
    solution: tuple[str, ...]
    nodes: int
    tokens_generated: int
    latency_s: float
    tree_digest: str
    early_stopped: bool
    speculative_issued: int
    speculative_adopted: int
    served_by: ServedBy | None
    error: str | None = None
    baseline_twin: BaselineTwin | None = None

    @classmethod
    def from_json(cls, query_id: str, data: AnswerJson) -> Answer:
        served, twin = data.get("served_by"), data.get("baseline_twin")
        return cls(
            query_id=query_id,
            status=data.get("status", "answered"),
            answer=data.get("answer"),
            correct=data.get("correct"),
            solution=tuple(data.get("solution") or ()),
            nodes=int(data.get("nodes", 0)),
            tokens_generated=int(data.get("tokens_generated", 0)),
            latency_s=float(data.get("latency_s", 0.0)),
            tree_digest=str(data.get("tree_digest", "")),
            early_stopped=bool(data.get("early_stopped", False)),
            speculative_issued=int(data.get("speculative_issued", 0)),
            speculative_adopted=int(data.get("speculative_adopted", 0)),
            served_by=_known(ServedBy, served) if isinstance(served, dict) else None,
            error=data.get("error"),
            baseline_twin=_known(BaselineTwin, twin) if isinstance(twin, dict) else None,
        )


@dataclass(frozen=True)
class TreeNode:
    """One node of a question's tree (`GET /v1/questions/{id}/tree`).

    Attributes:
        id: Its id (the root's is the query's tree key).
        parent: Its parent's id (`None` for the root).
        index: Its place among its parent's children.
        action: What its parent's search asked of it.
        depth: Steps from the root.
        state: `root`, `primary`, `adopted` (speculated, then used), `speculative`,
            `cancelled` or `unused`.
        generated: Its step is written.
        running: Its generation is in flight.
        text: The step's text.
        tokens: The step's tokens.
        answer: The answer it gives, if it is a terminal step.
        reward: Its reward, once scored.
        finish_reason: How its generation ended (`stop`, `eos`, `length`, `abort`; `""` until then).
        times: Seconds since the coordinator took the query up: `issued_s`, `generated_s`,
            `scored_s`, `ended_s` (each `None` until it happened).
    """

    id: str
    parent: str | None
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
    times: dict[str, float | None]


@dataclass(frozen=True)
class Tree:
    """A question's tree as searched so far: `status` is `"searching"` or what became of it."""

    query_id: str
    status: str
    nodes: tuple[TreeNode, ...]

    @classmethod
    def from_json(cls, data: TreeJson) -> Tree:
        nodes = tuple(_known(TreeNode, {"times": {}, **n}) for n in data.get("nodes", ()))
        return cls(str(data.get("query_id", "")), str(data.get("status", "")), nodes)

    def to_json(self) -> TreeJson:
        """The tree as the ingress's JSON (its known fields)."""
        nodes = [cast("TreeNodeJson", asdict(n)) for n in self.nodes]
        return {"query_id": self.query_id, "status": self.status, "nodes": nodes}


@dataclass(frozen=True)
class NodeEvent:
    """A node changed (the event stream's `node` event): its fields now, and when (`t_s`,
    seconds since the coordinator took the query up). See `TreeNode` for the fields."""

    id: str
    parent: str | None
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
    t_s: float


@dataclass(frozen=True)
class AnswerEvent:
    """The question is answered (the event stream's last event)."""

    answer: Answer


Event: TypeAlias = NodeEvent | AnswerEvent


def _known(cls: type, data: Mapping[str, object]) -> Any:
    """`cls` from `data`'s fields of its own (the rest ignored: a newer ingress's additions)."""
    names = cls.__dataclass_fields__  # type: ignore[attr-defined]
    return cls(**{k: v for k, v in data.items() if k in names})


class EventStream:
    """Server-sent events parsed line by line (`feed` each line as it arrives); `done` once the
    answer came. An `error` event (the queue went away mid-stream) is an `Unavailable`."""

    def __init__(self, query_id: str) -> None:
        self.query_id = query_id
        self.done = False
        self._event, self._data = "", ""

    def feed(self, line: str) -> Iterator[Event]:
        line = line.rstrip("\r\n")
        if line.startswith(":"):  # a keepalive comment
            return
        if line:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                self._event = value
            elif name == "data":
                self._data = f"{self._data}\n{value}" if self._data else value
            return
        event, data, self._event, self._data = self._event, self._data, "", ""
        if not data:
            return
        fields = json.loads(data)
        if event == "node":
            yield _known(NodeEvent, fields)
        elif event == "answer":
            self.done = True
            yield AnswerEvent(Answer.from_json(str(fields.get("query_id", self.query_id)), fields))
        elif event == "error":
            raise Unavailable(f"the event stream of {self.query_id} ended: {fields.get('error')}")

    def ended(self) -> None:
        """The stream closed: an Unavailable unless the answer came."""
        if not self.done:
            raise Unavailable(f"the event stream of {self.query_id} ended before its answer")
