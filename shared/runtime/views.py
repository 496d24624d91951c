"""What readers are shown, the HTTP API, the live view and the CLI alike: what became of a
question, its nodes as JSON, its tree folded from its node events, and the cluster at a glance
(`overview`, read from Redis through the ingress client)."""

from __future__ import annotations

import json
import time
from pathlib import PurePath
from typing import TYPE_CHECKING, Literal, Protocol, cast

from spex.proto import (
    AnswerResult,
    NodeEvent,
    ProtocolError,
    ServedBy,
    decode,
    names,
)
from spex.proto.messages import REWARDS
from spex.shared.runtime.bodies import (
    NodeFields,
    NodeJson,
    NodeTimes,
    OverviewJson,
    QuestionInFlightJson,
    ServedJson,
    TreeNodeJson,
    TwinJson,
    WorkerJson,
)
from spex.shared.runtime.replies import Entry
from spex.shared.runtime.workers import WorkerRegistry

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from spex.shared.runtime.settings import Settings

__all__ = [
    "ANSWERS_SAMPLED",
    "SERVED_REWARDS",
    "SIMULATED",
    "answer_status",
    "demonstration",
    "fold_tree",
    "node_fields",
    "node_json",
    "overview",
    "served_by",
    "served_json",
    "served_reward",
    "twin_json",
]


class Reader(Protocol):
    """What `overview` reads through (the ingress client is one)."""

    r: aioredis.Redis
    partitions: names.Partitions

    async def cards(self, name: str) -> int:
        """The members of the set `name`, over its partitions."""
        ...

    async def counts(self) -> tuple[int, int]:
        """(questions in flight, of those held by a coordinator)."""
        ...


ANSWERS_SAMPLED = 2_000  # the overview's window reads at most this many recent answers
# What rewarded an answer's steps, as readers are shown it: a reward model's (`prm`) or the
# model's own log-probabilities (`logprob`) on real content; on synthetic content the simulated
# PRM's (`sim-prm`) or the simulated log-probabilities (`sim-logprob`), which are the workload's
# draws, not a model's. The wire (`ServedBy.reward`) keeps `prm` and `logprob` for both.
SIMULATED = "sim-"
SERVED_REWARDS: tuple[str, ...] = (*REWARDS, *(SIMULATED + r for r in REWARDS))


def answer_status(answer: AnswerResult) -> Literal["answered", "failed", "cancelled"]:
    """What became of a question: "failed", "cancelled" or "answered" (HTTP and CLI alike)."""
    return "failed" if answer.error else "cancelled" if answer.cancelled else "answered"


def served_by(settings: Settings) -> ServedBy:
    """What answers questions under `settings`, as each answer says it."""
    model = PurePath(settings.model).name if settings.engine != "sim" else ""
    return ServedBy(settings.engine, model, settings.content, settings.step_reward)


def demonstration(served: ServedBy | None) -> str:
    """What a reader must be told of synthetic content ("" for a model's text): its steps and
    answer are the workload's stand-ins, sized like a model's, not anything a model wrote."""
    if served is None or served.content != "synthetic":
        return ""
    where = "a simulated GPU" if served.engine == "sim" else f"the {served.engine} engine"
    return f"a demonstration: synthetic content on {where}, not a model's text or answer"


def served_reward(served: ServedBy) -> str:
    """What rewarded the steps, as readers are shown it (`SERVED_REWARDS`)."""
    return SIMULATED + served.reward if served.content == "synthetic" else served.reward


def served_json(served: ServedBy | None) -> ServedJson | None:
    """What answered, as JSON (None: an answer stored by a coordinator that did not record it)."""
    if served is None:
        return None
    out: ServedJson = {
        "engine": served.engine, "model": served.model or None, "content": served.content,
        "reward": served_reward(served),
    }  # fmt: skip
    if demonstration(served):
        out["demonstration"] = demonstration(served)
    return out


def twin_json(query_id: str, answer: AnswerResult, twin: AnswerResult | None) -> TwinJson:
    """A question's baseline twin beside it: its answer and tree digest, and whether the two
    trees and answers are the same (`lossless`; None until both are answered)."""
    if twin is None:
        return {"query_id": query_id, "status": "searching", "lossless": None}
    both = answer_status(twin) == answer_status(answer) == "answered"
    lossless = twin.tree_digest == answer.tree_digest if both else None
    return {
        "query_id": query_id, "status": answer_status(twin), "answer": twin.answer,
        "tree_digest": twin.tree_digest, "lossless": lossless,
    }  # fmt: skip


def node_fields(event: NodeEvent) -> NodeFields:
    """The fields of the node an event shows, as JSON."""
    return {
        "id": event.node_id, "parent": event.parent_id or None, "index": event.index,
        "action": event.action, "depth": event.depth, "state": event.state,
        "generated": event.generated, "running": event.running, "text": event.text,
        "tokens": event.tokens, "answer": event.answer, "reward": event.reward,
        "finish_reason": event.finish_reason,
    }  # fmt: skip


def node_json(event: NodeEvent) -> NodeJson:
    """One node event as JSON: the node's fields and the time of the event."""
    return {**node_fields(event), "t_s": event.t_s}


def fold_tree(events: list[NodeEvent]) -> list[TreeNodeJson]:
    """A query's nodes from its events, in the order they first appeared: each node's latest
    fields, and when it was first seen (`issued_s`), generated, scored and, for speculation
    that was never used, given up (`ended_s`). Seconds since the query was taken up."""
    nodes: dict[str, TreeNodeJson] = {}
    for event in events:
        t = event.t_s
        seen = nodes.get(event.node_id)
        first: NodeTimes = {"issued_s": t, "generated_s": None, "scored_s": None, "ended_s": None}
        times = seen["times"] if seen else first
        node: TreeNodeJson = {**node_fields(event), "times": times}
        if seen and not node["text"]:
            node["text"] = seen["text"]  # a node's text is sent once
        if event.generated and times["generated_s"] is None:
            times["generated_s"] = t
        if event.reward is not None and times["scored_s"] is None:
            times["scored_s"] = t
        if event.state in ("cancelled", "unused"):
            times["ended_s"] = times["ended_s"] or t
        else:
            times["ended_s"] = None  # asked for again after all
        nodes[event.node_id] = node
    return list(nodes.values())


async def overview(
    ingress: Reader, client: str | None = None, window_s: float = 60.0, listed: int = 50
) -> OverviewJson:
    """The cluster at a glance. The operator's (`client` None): the questions in flight (the
    oldest `listed`, each with its tree's events so far), the backlog nobody has taken,
    answers and speculation over the last `window_s` (its last `ANSWERS_SAMPLED` answers at
    most), each generator's load and its governor's slack. A client's (a tenant's): its own
    questions in flight and the oldest `listed` of them, and nothing of the rest — the figures
    it may not see are null, the workers an empty list (`scope` says which)."""
    r, parts, now_ms = ingress.r, ingress.partitions, int(time.time() * 1000)
    mine = names.INGRESS_IN_FLIGHT if client is None else names.client_in_flight(client, parts)
    in_flight: list[tuple[bytes, float]] = []
    for part in parts.spread(mine):  # the oldest of each part, then the oldest of those
        in_flight += cast(list[tuple[bytes, float]], await r.zrange(part, 0, listed - 1, withscores=True))
    in_flight = sorted(in_flight, key=lambda member: member[1])[:listed]
    async with r.pipeline(transaction=False) as pipe:
        for qid, _ in in_flight:
            pipe.xlen(names.query_tree(qid.decode(), parts))
        sizes = await pipe.execute()
    questions: list[QuestionInFlightJson] = [
        {"query_id": qid.decode(), "waiting_s": round((now_ms - ms) / 1000, 1), "events": n}
        for (qid, ms), n in zip(in_flight, sizes, strict=True)
    ]
    if client is not None:
        return {
            "scope": "client", "in_flight": await ingress.cards(mine), "backlog": None,
            "questions": questions, "window_s": window_s, "answered": None, "answers_per_s": None,
            "nodes_per_s": None, "speculative_issued": None, "speculative_adopted": None, "hit_rate": None,
            "granted": None, "tpot_target": None, "workers": [],
        }  # fmt: skip
    recent: list[Entry] = []
    since = f"{now_ms - int(window_s * 1000)}"
    for part in parts.spread(names.ANSWERS):
        recent += cast(list[Entry], await r.xrevrange(part, "+", since, count=ANSWERS_SAMPLED))
    total, held = await ingress.counts()
    status: bytes | str | None = await r.get(names.ALLOCATOR_STATUS)
    live = await WorkerRegistry(r, parts).live()  # a worker's load key expires with it: no key, no worker
    answered = issued = adopted = nodes = 0
    for _, fields in recent:
        try:
            answer = decode(names.ANSWERS, (fields or {}).get(b"e", b""))
        except ProtocolError:
            continue
        if isinstance(answer, AnswerResult):
            answered += 1
            issued, adopted = issued + answer.spec_issued, adopted + answer.spec_adopted
            nodes += answer.nodes
    allocator = json.loads(status) if status else {}
    workers: list[WorkerJson] = []
    for load in live.values():
        workers.append({
            "worker": load.worker, "running": load.running, "waiting": load.waiting,
            "primary": load.primary, "speculative": load.spec, "slots": load.slots,
            "kv_held": load.kv_held, "kv_capacity": load.kv_capacity,
            "prefix_cache_hit_rate": round(load.prefix_cache_hit_rate, 3),
            "slack": allocator.get("slack", {}).get(load.worker),
            "pool": allocator.get("pool", {}).get(load.worker),
        })  # fmt: skip
    return {
        "scope": "operator",
        "in_flight": total,
        "backlog": max(0, total - held),
        "questions": questions,
        "window_s": window_s,
        "answered": answered,
        "answers_per_s": round(answered / window_s, 3),
        "nodes_per_s": round(nodes / window_s, 2),
        "speculative_issued": issued,
        "speculative_adopted": adopted,
        "hit_rate": round(adopted / issued, 3) if issued else None,
        "granted": allocator.get("granted"),
        "tpot_target": allocator.get("tpot_target"),
        "workers": sorted(workers, key=lambda w: w["worker"]),
    }
