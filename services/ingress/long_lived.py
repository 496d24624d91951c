"""What the ingress's long-lived requests share — an event stream, a chat completion streamed
or waited for: a cap per caller on how many it holds open (`Slots`), so one caller cannot
starve another, and a query's progress read one poll at a time (`poll`), so none of them holds
a pooled Redis connection for its life.

A caller is a token's client name; without tokens, the address the connection comes from (a
reverse proxy in front of the ingress makes every caller its own address: use tokens there).
Streams (event streams, streamed completions) and waits (a completion not streamed) are capped
apart, so no stream of anyone's ever refuses a completion that waits.

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

__all__ = ["POLL_S", "STREAM", "WAIT", "Slots", "SlotsFull", "poll"]

POLL_S = 0.1  # a long-lived request with nothing new looks again after this long
STREAM = "event streams and streamed completions"  # what a caller holds open, by kind
WAIT = "completions waiting"


class SlotsFull(RuntimeError):
    """The client holds its cap's worth of long-lived requests open (HTTP 429). Recoverable:
    close one, or retry later."""


class Slots:
    """Long-lived requests open, per caller and kind (`STREAM`, `WAIT`); at most `per_caller` each."""

    def __init__(self, per_caller: int) -> None:
        self.per_caller = per_caller
        self._open: dict[tuple[str, str], int] = {}  # (caller, kind) -> requests open (absent: none)

    @contextlib.contextmanager
    def hold(self, caller: str, kind: str) -> Iterator[None]:
        """One of the caller's slots of `kind` for the `with` block; SlotsFull when it has none free."""
        key = (caller, kind)
        if self._open.get(key, 0) >= self.per_caller:
            raise SlotsFull(
                f"this client has {self.per_caller} {kind} open (limit {self.per_caller}); "
                "close one or retry later"
            )
        self._open[key] = self._open.get(key, 0) + 1
        try:
            yield
        finally:
            self._open[key] -= 1
            if not self._open[key]:
                del self._open[key]


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
