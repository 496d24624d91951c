"""The engine interfaces every backend implements: `api` (the virtual clock: the bench loop
steps it) and `live` (the wall clock: a service runs it)."""

from spex.shared.engine.api import (
    ENGINES,
    SERVERS,
    UNTIL_STOP,
    Completion,
    CompletionReason,
    Engine,
    EngineLoad,
    EngineName,
    EngineRequest,
    EngineStats,
    ServerName,
    StopReason,
)
from spex.shared.engine.live import LiveEngine, OnComplete

__all__ = [
    "ENGINES",
    "SERVERS",
    "UNTIL_STOP",
    "Completion",
    "CompletionReason",
    "Engine",
    "EngineLoad",
    "EngineName",
    "EngineRequest",
    "EngineStats",
    "LiveEngine",
    "OnComplete",
    "ServerName",
    "StopReason",
]
