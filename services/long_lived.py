"""What the ingress's long-lived requests share — an event stream, a chat completion streamed
or waited for: a cap per client on how many it holds open (`Slots`), so one tenant cannot
starve another, and a query's progress read one poll at a time (`poll`), so none of them holds
a pooled Redis connection for its life.

A blocking XREAD per stream would hold a connection for every second it waits: a hundred open
streams would take a hundred connections from the pool every other request shares. A poll
borrows one for two short reads and gives it back, so the pool serves requests, not waiters.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from spex.proto import AnswerResult, NodeEvent
from spex.shared.runtime.client import IngressClient
from spex.shared.runtime.pool import PoolBusy

__all__ = ["POLL_S", "Slots", "SlotsFull", "poll"]

POLL_S = 0.1  # a long-lived request with nothing new looks again after this long


class SlotsFull(RuntimeError):
    """The client holds its cap's worth of long-lived requests open (HTTP 429). Recoverable:
    close one, or retry later."""


class Slots:
    """Long-lived requests open, per client; at most `per_client` each."""

    def __init__(self, per_client: int) -> None:
        self.per_client = per_client
        self._open: dict[str, int] = {}  # client -> requests open (absent: none)

    @contextlib.contextmanager
    def hold(self, client: str) -> Iterator[None]:
        """One of the client's slots for the `with` block; SlotsFull when it has none free."""
        if self._open.get(client, 0) >= self.per_client:
            raise SlotsFull(
                f"this client has {self.per_client} streams and completions open (limit {self.per_client}); "
                "close one or retry later"
            )
        self._open[client] = self._open.get(client, 0) + 1
        try:
            yield
        finally:
            self._open[client] -= 1
            if not self._open[client]:
                del self._open[client]


async def poll(
    client: IngressClient, qid: str, after: str
) -> tuple[AnswerResult | None, list[NodeEvent], str]:
    """(the answer if there is one, the tree's events after entry `after`, the entry to read on
    from). The answer is looked at first, so every event it follows is among these (or a later
    poll's, past a read's count). A busy pool skips the poll — (None, [], after) — and the
    request goes on: it holds its slot, and a moment's wait costs it nothing."""
    try:
        answer = await client.result(qid)
        events, after = await client.tree_events(qid, after)
    except PoolBusy:
        return None, [], after
    return answer, events, after
