"""Tree coordinator service: `service` (its loop: four named rounds, adoption, effects, the
event-sourced checkpoint), `store` (every key it owns and its Lua, `scripts`), `recovery`
(Redis restarts, queries released while Redis was away), `query` (a query it holds),
`handlers` (the pure event and command tables) and `routing` (the live generator workers)."""

from spex.services.coordinator.service import Coordinator, main

__all__ = ["Coordinator", "main"]
