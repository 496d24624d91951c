"""A query a coordinator holds: its request, its machine and where its inbox stands."""

from __future__ import annotations

from dataclasses import dataclass

from spex.proto import SubmitQuestionRequest
from spex.shared.core.machine import QueryMachine

__all__ = ["HeldQuery", "Unpublishable"]


@dataclass
class HeldQuery:
    request: SubmitQuestionRequest
    machine: QueryMachine
    epoch: int  # the fencing epoch of our lease
    last_id: str = "0"  # the last inbox entry applied
    started_wall: float = 0.0  # monotonic time it was adopted (the answer's latency)
    renewed: float = 0.0  # monotonic time the lease was last confirmed
    replaying: bool = True  # its inbox is being replayed: the live reader leaves it alone

    @property
    def query_id(self) -> str:
        return self.request.query_id


class Unpublishable(Exception):
    """A command whose message cannot be encoded (over the size limit): the query fails."""
