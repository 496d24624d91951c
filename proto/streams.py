"""Stream and key names, and which message types each stream carries."""

from __future__ import annotations

from proto.messages import (
    AnswerResult,
    BudgetUpdateEvent,
    CancelRequest,
    GenerateRequest,
    GenerateResult,
    Message,
    QueryStatsEvent,
    ScoreRequest,
    ScoreResult,
    SubmitQuestionRequest,
)

__all__ = ["STREAMS", "dead_letter", "gen_jobs", "query_inbox", "reply_key"]

INGRESS = "ingress:new"
SCORE_JOBS = "score:jobs"
BUDGET = "budget:updates"
QUERY_STATS = "stats:queries"
ANSWERS = "answers"
GEN_CONTROL = "gen:control"  # cancellations, fanned out to every generator (no group)


def gen_jobs(pool: str = "default") -> str:
    return f"gen:jobs:{pool}"


def query_inbox(query_id: str) -> str:
    # The hash tag keeps a query's keys in one Redis Cluster slot (Lua scripts stay legal).
    return f"{{q:{query_id}}}:in"


def reply_key(query_id: str) -> str:
    return f"{{q:{query_id}}}:answer"


def dead_letter(stream: str) -> str:
    return f"dlq:{stream}"


# Stream (or stream family, by its fixed prefix) -> the message types it carries.
STREAMS: dict[str, tuple[type[Message], ...]] = {
    INGRESS: (SubmitQuestionRequest,),
    "gen:jobs:": (GenerateRequest, CancelRequest),
    GEN_CONTROL: (CancelRequest,),
    SCORE_JOBS: (ScoreRequest,),
    "{q:}:in": (GenerateResult, ScoreResult, BudgetUpdateEvent, CancelRequest),
    BUDGET: (BudgetUpdateEvent,),
    QUERY_STATS: (QueryStatsEvent,),
    ANSWERS: (AnswerResult,),
}
