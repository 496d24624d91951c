"""The SPEX wire contract: message structs, Redis names, the codec, and the submission rules.

Read `messages.py` for every message, `names.py` for every stream and key and what each
carries, `codec.py` for how bytes become messages (and how malformed bytes fail), and
`submission.py` for what a valid question is.
"""

from spex.proto.codec import ProtocolError, decode, encode
from spex.proto.messages import (
    CONTENTS,
    MAX_MESSAGE_BYTES,
    PRIMARY,
    PROTOCOL_VERSION,
    SPECULATIVE,
    AnswerResult,
    BudgetUpdateEvent,
    CancelRequest,
    GenerateRequest,
    GenerateResult,
    JobFailedEvent,
    LogprobSummary,
    Message,
    PromoteRequest,
    QueryStatsEvent,
    ScoreRequest,
    ScoreResult,
    SubmitQuestionRequest,
    WorkerLoadEvent,
)
from spex.proto.submission import ALGORITHMS, Limits, SubmissionError, SubmissionTooLarge

__all__ = [
    "ALGORITHMS",
    "CONTENTS",
    "MAX_MESSAGE_BYTES",
    "PRIMARY",
    "PROTOCOL_VERSION",
    "SPECULATIVE",
    "AnswerResult",
    "BudgetUpdateEvent",
    "CancelRequest",
    "GenerateRequest",
    "GenerateResult",
    "JobFailedEvent",
    "Limits",
    "LogprobSummary",
    "Message",
    "PromoteRequest",
    "ProtocolError",
    "QueryStatsEvent",
    "ScoreRequest",
    "SubmissionTooLarge",
    "ScoreResult",
    "SubmissionError",
    "SubmitQuestionRequest",
    "WorkerLoadEvent",
    "decode",
    "encode",
]
