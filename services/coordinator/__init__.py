"""Tree coordinator service: `service` (its loop: five named rounds, intake, recovery),
`adoption` (how a query comes to be held, in one round trip), `holdings` (the queries it holds
and their lifecycle), `driver` (inbox events in, effects out, answers), `handlers` (the pure
event and command tables), `observe` (metrics and tree events), `store` (every key it owns and
its Lua, `scripts`; what they report, `reports`), `recovery` (Redis restarts, queries released
while Redis was away), `query` (a query it holds) and `routing` (the live generator workers)."""

from spex.services.coordinator.service import Coordinator, main

__all__ = ["Coordinator", "main"]
