"""The SPEX wire contract: message structs, stream and key names, and the codec.

Read `messages.py` for every message, `streams.py` for where each travels, and `codec.py`
for how bytes become messages (and how malformed bytes fail).
"""

from proto.codec import ProtocolError, decode, encode
from proto.messages import (
    PROTOCOL_VERSION,
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
from proto.streams import STREAMS

__all__ = [
    "PROTOCOL_VERSION",
    "STREAMS",
    "AnswerResult",
    "BudgetUpdateEvent",
    "CancelRequest",
    "GenerateRequest",
    "GenerateResult",
    "Message",
    "ProtocolError",
    "QueryStatsEvent",
    "ScoreRequest",
    "ScoreResult",
    "SubmitQuestionRequest",
    "decode",
    "encode",
]
