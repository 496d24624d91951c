"""What a coordinator does when Redis lost, or may have lost, what it wrote.

- **Redis restarted** (its run id changed): it may have lost its last writes (the AOF's fsync
  window), jobs we published among them. Every query we hold is let go and adopted again from
  its inbox — the replay re-publishes exactly what is missing — unless Redis lost the query
  itself (no epoch, no answer: it restarted without persistence), which only we can search
  again, from the request we hold.
- **Queries released while Redis was unreachable** are kept `RELEASED_KEPT_S`: if Redis comes
  back without their request and answer, nobody else could adopt them, so we search them again.
  Whoever notices first does it; a restart in Redis's first second, which no run-id check sees,
  is caught this way too.

This module decides; the service (`service.Coordinator`) acts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from spex.services.coordinator.query import HeldQuery
from spex.services.coordinator.store import QueryStore

__all__ = ["RELEASED_KEPT_S", "Recovery", "RestartPlan"]

RELEASED_KEPT_S = 60.0  # how long a released query's request is kept for a Redis restart


@dataclass
class RestartPlan:
    """What to do with the queries we held when Redis restarted."""

    run: str  # Redis's run id now
    search_again: list[HeldQuery] = field(default_factory=list)  # Redis lost them
    adopt_again: list[HeldQuery] = field(default_factory=list)  # Redis has them: replay the inbox


class Recovery:
    def __init__(self, store: QueryStore) -> None:
        self.store = store
        self.released: dict[str, tuple[float, HeldQuery]] = {}  # query id -> (when, the query)
        self._redis_run: str | None = None

    def remember(self, query: HeldQuery) -> None:
        """`query` was let go without a word to Redis (it may be unreachable)."""
        self.released[query.request.query_id] = (time.monotonic(), query)

    def forget(self, qid: str) -> None:
        """`qid` is ours again, or answered."""
        self.released.pop(qid, None)

    async def after_restart(self, held: list[HeldQuery]) -> RestartPlan:
        """If Redis restarted since the last plan `handled`, what to do with `held` (the
        queries we held before anything else this round adopted one)."""
        run = await self.store.redis_run()
        plan = RestartPlan(run)
        if self._redis_run is None or run == self._redis_run:
            return plan
        for query in held:
            if await self.store.known(query.request.query_id):
                plan.adopt_again.append(query)
            else:
                plan.search_again.append(query)
        return plan

    def handled(self, plan: RestartPlan) -> None:
        """`plan` was carried out: Redis's run id is the one it was made for."""
        self._redis_run = plan.run

    async def lost_releases(self, busy: Callable[[str], bool]) -> list[HeldQuery]:
        """Released queries Redis came back without (no request, no answer): ours to search
        again. Those `busy` (held or being adopted here) and those kept too long are forgotten."""
        horizon = time.monotonic() - RELEASED_KEPT_S
        self.released = {q: v for q, v in self.released.items() if v[0] > horizon}
        lost = []
        for qid, (_, query) in list(self.released.items()):
            if busy(qid):
                self.forget(qid)
            elif not await self.store.stored(qid):
                self.forget(qid)
                lost.append(query)
        return lost
