"""The engine interfaces every backend implements: `api` (the virtual clock: the bench loop
steps it) and `live` (the wall clock: a service runs it)."""

from spex.shared.engine.api import (
    UNTIL_STOP,
    Completion,
    CompletionReason,
    Engine,
    EngineLoad,
    EngineRequest,
    EngineStats,
    StopReason,
)
from spex.shared.engine.live import LiveEngine, OnComplete

__all__ = [
    "UNTIL_STOP",
    "Completion",
    "CompletionReason",
    "Engine",
    "EngineLoad",
    "EngineRequest",
    "EngineStats",
    "LiveEngine",
    "OnComplete",
    "StopReason",
]
