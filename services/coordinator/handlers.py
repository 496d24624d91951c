"""The coordinator's two type → handler tables, pure functions both (tested without Redis):

- `EVENT_HANDLERS`: an inbox message → the query machine's commands;
- `COMMAND_HANDLERS`: a command → the effects the service performs, in order (dispatch a job to
  the generators, publish a message, mark a job cancelled, write the answer). The service
  writes them as returned: what an answer records of I/O (its latency, its grade) comes in
  with `Outgoing`.

Message ids are built from job and node identities, so a re-run of the same commands (a
replay after a takeover) produces the same ids, and the idempotent publish drops the copies.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from spex.proto import (
    AnswerResult,
    BudgetUpdateEvent,
    CancelRequest,
    Content,
    GenerateRequest,
    GenerateResult,
    JobFailedEvent,
    Message,
    PromoteRequest,
    PromptFormat,
    ScoreRequest,
    ScoreResult,
    ServedBy,
    Split,
    SubmitQuestionRequest,
    Synthetic,
)
from spex.proto.names import GEN_CONTROL, SCORE_JOBS
from spex.shared.content.prompt_style import carried_format
from spex.shared.content.prompts import DEFAULT_SPLIT, DEFAULT_TEMPERATURE, PromptStyle
from spex.shared.core.commands import (
    CancelCommand,
    Command,
    FinishCommand,
    GenerateCommand,
    PromoteCommand,
    ScoreCommand,
)
from spex.shared.core.ids import digest
from spex.shared.core.machine import QueryMachine
from spex.shared.core.search import SEARCHES
from spex.shared.core.tree import Node

__all__ = [
    "COMMAND_HANDLERS",
    "EVENT_HANDLERS",
    "Answer",
    "Dispatch",
    "Effect",
    "MarkCancelled",
    "Outgoing",
    "Publish",
    "effects",
    "failed",
]

# ---------------------------------------------------------------------------- events in


def on_generated(m: QueryMachine, msg: GenerateResult, now_s: float) -> list[Command]:
    # A number the search cannot order by (NaN, ±inf) is the engine's failure, not a step.
    if not math.isfinite(msg.logprobs.mean):
        return m.on_failed(msg.job_id, msg.node_id, "generate", f"log-probability {msg.logprobs.mean}", now_s)
    return m.on_generated(
        msg.job_id, msg.node_id, msg.text, msg.tokens, msg.finish_reason, msg.logprobs.mean, now_s
    )


def on_scored(m: QueryMachine, msg: ScoreResult, now_s: float) -> list[Command]:
    if not math.isfinite(msg.reward):
        return m.on_failed(msg.job_id, msg.node_id, "score", f"reward {msg.reward}", now_s)
    return m.on_scored(msg.node_id, msg.reward, now_s)


def on_budget(m: QueryMachine, msg: BudgetUpdateEvent, now_s: float) -> list[Command]:
    return m.on_budget(msg.share, now_s)


def on_cancel(m: QueryMachine, msg: CancelRequest, now_s: float) -> list[Command]:
    return m.cancel(now_s)


def on_failed(m: QueryMachine, msg: JobFailedEvent, now_s: float) -> list[Command]:
    return m.on_failed(msg.job_id, msg.node_id, msg.kind, msg.reason, now_s)


EVENT_HANDLERS: dict[type[Message], Callable[[QueryMachine, Any, float], list[Command]]] = {
    GenerateResult: on_generated,
    ScoreResult: on_scored,
    BudgetUpdateEvent: on_budget,
    CancelRequest: on_cancel,
    JobFailedEvent: on_failed,
}

# ---------------------------------------------------------------------------- commands out


@dataclass(frozen=True)
class Outgoing:
    """What a query's messages carry besides the command itself."""

    request: SubmitQuestionRequest
    epoch: int  # fencing token of the lease the coordinator holds
    machine: QueryMachine
    content: Content = "synthetic"  # what the engines write: the workload's steps, or a model's
    temperature: float = DEFAULT_TEMPERATURE  # real content: the generator's sampling temperature
    split: Split = DEFAULT_SPLIT  # real content: where a step ends
    min_step_tokens: int = 0  # real content: a shorter step goes on past its delimiter
    prompt: PromptFormat = PromptFormat()  # real content: the question's own over the deployment's
    # Measured by the service before commands that end the query become effects:
    latency_s: float = 0.0  # since the query was adopted here
    correct: bool | None = None  # the answer graded against the request's reference (None: ungraded)
    served_by: ServedBy | None = None  # what answers: engine, model, content, reward


@dataclass(frozen=True)
class Dispatch:
    """Send a job to the generator workers; the service's router picks its stream (the
    query's worker while it has room, else the shared pool)."""

    message: GenerateRequest


@dataclass(frozen=True)
class Publish:
    stream: str
    message: Message


@dataclass(frozen=True)
class MarkCancelled:
    """Remember that `job_id` (of `query_id`) is cancelled, so a generator that has not started
    it never does."""

    query_id: str
    job_id: str


@dataclass(frozen=True)
class Answer:
    """Write the query's answer (fenced by the lease) and let the query go."""

    message: AnswerResult


Effect = Dispatch | Publish | MarkCancelled | Answer


def generate(q: Outgoing, cmd: GenerateCommand) -> list[Effect]:
    req, node = q.request, cmd.node
    ids, tokens = zip(*cmd.prompt, strict=True)
    message = GenerateRequest(
        msg_id=f"{req.query_id}/{cmd.job_id}/gen",
        query_id=req.query_id,
        trace_id=req.trace_id,
        epoch=q.epoch,
        job_id=cmd.job_id,
        node_id=node.id,
        parent_id=node.parent.id if node.parent else "",
        child_index=node.index,
        action=node.action,
        prompt_node_ids=list(ids),
        prompt_tokens=list(tokens),
        seed=node.seed,
        max_new_tokens=cmd.max_new_tokens,
        priority=cmd.priority,
        content=q.content,
        synthetic=_synthetic(q),
        question_stored=True,
        steps=_texts(node.parent),
        stop=list(PromptStyle.of(q.split, q.prompt).stop_strings()) if q.content == "real" else [],
        temperature=q.temperature,
        split=q.split,
        min_tokens=q.min_step_tokens if q.content == "real" else 0,
        prompt=carried_format(q.prompt, req),
    )
    return [Dispatch(message)]


def score(q: Outgoing, cmd: ScoreCommand) -> list[Effect]:
    req = q.request
    ids, tokens = zip(*cmd.prompt, strict=True)
    message = ScoreRequest(
        msg_id=f"{req.query_id}/{cmd.node.id}/score",
        query_id=req.query_id,
        trace_id=req.trace_id,
        epoch=q.epoch,
        job_id=q.machine.score_job_id(cmd.node.id),
        node_id=cmd.node.id,
        prompt_node_ids=list(ids),
        prompt_tokens=list(tokens),
        priority=cmd.priority,
        content=q.content,
        synthetic=_synthetic(q),
        question_stored=True,
        steps=_texts(cmd.node),
        split=q.split,
        # The reward model reads the path in its own chat template: the generator's stays here.
        prompt=msgspec.structs.replace(carried_format(q.prompt, req), chat_template=""),
    )
    return [Publish(SCORE_JOBS, message)]


def cancel(q: Outgoing, cmd: CancelCommand) -> list[Effect]:
    qid = q.request.query_id
    message = CancelRequest(
        msg_id=f"{qid}/{cmd.job_id}/cancel", query_id=qid, trace_id=q.request.trace_id, epoch=q.epoch,
        job_id=cmd.job_id,
    )  # fmt: skip
    return [MarkCancelled(qid, cmd.job_id), Publish(GEN_CONTROL, message)]


def promote(q: Outgoing, cmd: PromoteCommand) -> list[Effect]:
    """Fanned out like a cancel: the generator that has the job (or gets it later) raises it."""
    qid = q.request.query_id
    message = PromoteRequest(
        msg_id=f"{qid}/{cmd.job_id}/promote", query_id=qid, trace_id=q.request.trace_id, epoch=q.epoch,
        job_id=cmd.job_id,
    )  # fmt: skip
    return [Publish(GEN_CONTROL, message)]


def finish(q: Outgoing, cmd: FinishCommand) -> list[Effect]:
    req, m = q.request, q.machine
    message = AnswerResult(
        msg_id=f"{req.query_id}/answer",
        query_id=req.query_id,
        trace_id=req.trace_id,
        epoch=q.epoch,
        answer=cmd.answer,
        solution=m.solution_steps(),
        nodes=len(m.tree) - 1,
        tokens_generated=m.stats.tokens_generated,
        tree_digest=digest(m.tree.digest(rewards=q.content == "synthetic"), m.answer),  # as the bench's
        error=m.error,
        early_stopped=cmd.early_stopped,
        cancelled=m.cancelled,
        spec_issued=m.stats.spec_issued,
        spec_adopted=m.stats.spec_adopted,
        latency_s=q.latency_s,
        correct=q.correct,
        served_by=q.served_by,
    )
    return [Answer(message)]


def failed(q: Outgoing, reason: str) -> Answer:
    """The query cannot go on (a job it needs cannot be sent): its answer, failed."""
    req = q.request
    message = AnswerResult(
        msg_id=f"{req.query_id}/answer", query_id=req.query_id, trace_id=req.trace_id, epoch=q.epoch,
        answer=None, error=f"failed: {reason}", latency_s=q.latency_s, correct=q.correct,
        served_by=q.served_by,
    )  # fmt: skip
    return Answer(message)


def _synthetic(q: Outgoing) -> Synthetic | None:
    """The simulator's extension of a job of synthetic content: the workload's seed (the
    question's), the step-length model of its search's family, and whose synthetic question it
    is (a baseline twin's is its original's)."""
    if q.content != "synthetic":
        return None
    return Synthetic(q.request.seed, SEARCHES[q.request.algorithm].family, q.request.twin_of)


def _texts(node: Node | None) -> list[str]:
    """The text of every step from the root's child down to `node`."""
    return [n.text for n in node.path()] if node is not None else []


COMMAND_HANDLERS: dict[type, Callable[[Outgoing, Any], list[Effect]]] = {
    GenerateCommand: generate,
    ScoreCommand: score,
    CancelCommand: cancel,
    PromoteCommand: promote,
    FinishCommand: finish,
}


def effects(q: Outgoing, commands: list[Command]) -> list[Effect]:
    """Every effect of `commands`, in order."""
    return [effect for cmd in commands for effect in COMMAND_HANDLERS[type(cmd)](q, cmd)]
