"""The queries one coordinator holds, and the named transitions of a query's lifecycle here:

    (free) --adopting, then hold--> REPLAYING --live--> LIVE --end(Ending)--> (free)

A query is *adopting* while the script that takes its lease runs (`busy`, not held yet: the
adoption may find it answered or held elsewhere), *replaying* while its inbox is applied to a
fresh machine (the live inbox reader leaves it alone), and *live* afterwards. Every way
a coordinator stops holding a query is one `Ending`; whoever adopts a query that was not
answered (this coordinator or another) starts again from its inbox.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from contextlib import contextmanager

from structlog.typing import FilteringBoundLogger

from spex.services.coordinator.query import HeldQuery, Phase
from spex.services.coordinator.recovery import Recovery
from spex.shared.runtime.metrics import QUERIES_OWNED

__all__ = ["Ending", "Holdings"]


class Ending(enum.Enum):
    """Why a coordinator stops holding a query."""

    ANSWERED = "answered"  # its answer (or failure) is written: nothing is left to do
    RELEASED = "released"  # let go without a word to Redis (it may be unreachable; `Recovery` keeps it)
    LOST = "lost"  # our lease lapsed and another coordinator holds the query now
    FORGOTTEN = "forgotten"  # Redis lost its state: we search it again from the request we hold


class Holdings:
    """The queries held by coordinator `owner` (by id) and those being adopted."""

    def __init__(self, owner: str, recovery: Recovery, log: FilteringBoundLogger) -> None:
        self.owner = owner
        self.recovery = recovery
        self.log = log
        self.queries: dict[str, HeldQuery] = {}
        self._adopting: set[str] = set()
        self.released = 0  # queries let go without a word to Redis so far (a count only grows)

    def busy(self, qid: str) -> bool:
        """`qid` is held here, or being adopted here."""
        return qid in self.queries or qid in self._adopting

    @contextmanager
    def adopting(self, qid: str) -> Iterator[None]:
        """While the lease on `qid` is being taken (no second adoption starts meanwhile)."""
        self._adopting.add(qid)
        try:
            yield
        finally:
            self._adopting.discard(qid)

    def hold(self, query: HeldQuery) -> None:
        """The lease is ours: held (and renewed) from now on, its inbox being replayed."""
        query.phase = Phase.REPLAYING
        self.queries[query.query_id] = query
        self.recovery.forget(query.query_id)  # ours again: a Redis restart is handled as for any held query
        QUERIES_OWNED.labels(self.owner).set(len(self.queries))

    @staticmethod
    def live(query: HeldQuery) -> None:
        """The replay is done: the live inbox reader goes on from the last entry applied."""
        query.phase = Phase.LIVE

    def end(self, query: HeldQuery, ending: Ending) -> bool:
        """Stop holding `query` for `ending`; False if it was not held here (any more)."""
        qid = query.query_id
        if ending is Ending.ANSWERED:
            self.recovery.forget(qid)  # whether or not still held here: it is answered
        if self.queries.get(qid) is not query:
            return False
        del self.queries[qid]
        QUERIES_OWNED.labels(self.owner).set(len(self.queries))
        if query.span is not None:
            if not query.machine.done:
                query.span.set_attribute("spex.outcome", "let go")  # another coordinator goes on
            query.span.end()
            query.span = None
        if ending is Ending.RELEASED:
            self.released += 1
            self.recovery.remember(query)
            self.log.warning("query_released", query_id=qid)
        elif ending is Ending.LOST:
            self.log.warning("lease_lost", query_id=qid)
        return True
