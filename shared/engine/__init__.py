"""The engine interface every backend implements (`api`)."""

from spex.shared.engine.api import UNTIL_STOP, Completion, Engine, EngineLoad, EngineRequest, EngineStats

__all__ = ["UNTIL_STOP", "Completion", "Engine", "EngineLoad", "EngineRequest", "EngineStats"]
