"""Tree coordinator service: `service` (the Redis loops, leases and event-sourced
checkpoints), `handlers` (the pure event and command tables) and `scripts` (its Lua)."""

from spex.services.coordinator.service import Coordinator, main

__all__ = ["Coordinator", "main"]
