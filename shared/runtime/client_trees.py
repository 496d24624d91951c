"""The ingress client's reads of a query's tree: its node events, from its tree stream while it
is searched and from its tree's record once it is answered (`proto.tree_record`: the stream's
entries, by the same entry ids, so a cursor taken on the stream goes on in the record)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import cast

import redis.asyncio as aioredis

from spex.proto import NodeEvent, ProtocolError, decode, names
from spex.proto.text import as_str
from spex.proto.tree_record import TreeEntries, unpack_tree
from spex.shared.runtime.bodies import TreeNodeJson
from spex.shared.runtime.replies import Entry
from spex.shared.runtime.streams import entry_after
from spex.shared.runtime.views import fold_tree

__all__ = ["TreeReader"]

KEPT_RECORDS = 8  # answered trees' records a client keeps decoded (for readers paging through)
KEPT_FOR_S = 10.0  # ... for this long each


class TreeReader:
    """The reads of queries' trees over one Redis client (`IngressClient.trees`), with the
    answered trees' records it decoded last."""

    def __init__(self, client: aioredis.Redis, partitions: names.Partitions) -> None:
        self.r, self.partitions = client, partitions
        self._records: dict[str, tuple[float, TreeEntries]] = {}  # query id -> (read at, its tree record)

    async def tree_events(
        self, query_id: str, after: str = "0", count: int = 1000
    ) -> tuple[list[NodeEvent], str]:
        """The query's node events after entry `after`, and the last entry's id to read on
        from. Unreadable entries are skipped. An answered query's are read from its tree's
        record (`proto.tree_record`), by the same entry ids as its stream's: a cursor taken on
        the stream goes on there."""
        kept = await self._tree_kept(query_id)
        if kept is None:
            entries = await self._tree_stream(query_id, after, count)
            if entries:
                return _node_events(names.query_tree(query_id, self.partitions), entries, after)
            kept = await self._tree_kept(query_id)  # answered (and its stream deleted) meanwhile?
            if kept is None:
                return [], after
        stream = names.query_tree(query_id, self.partitions)
        return _node_events(stream, _entries_after(kept, after, count), after)

    async def _tree_stream(self, query_id: str, after: str, count: int) -> list[Entry]:
        start = "-" if after == "0" else f"({after}"
        entries = await self.r.xrange(names.query_tree(query_id, self.partitions), start, "+", count=count)
        return cast(list[Entry], entries)

    async def _tree_kept(self, query_id: str) -> TreeEntries | None:
        """The entries of the query's tree record, or None while it has none. A record never
        changes once written: the last few read are kept a few seconds, for a reader that
        pages through one."""
        now = time.monotonic()
        cached = self._records.get(query_id)
        if cached is not None and now - cached[0] < KEPT_FOR_S:
            return cached[1]
        blob = cast(bytes | None, await self.r.get(names.query_tree_record(query_id, self.partitions)))
        if blob is None:
            return None
        try:
            entries = unpack_tree(bytes(blob))
        except ProtocolError:
            entries = []
        self._records[query_id] = (now, entries)
        while len(self._records) > KEPT_RECORDS:
            self._records.pop(next(iter(self._records)))
        return entries

    async def tree(self, query_id: str) -> list[TreeNodeJson]:
        """The query's tree as its events tell it so far (`fold_tree`)."""
        events: list[NodeEvent] = []
        after = "0"
        while True:
            more, read_to = await self.tree_events(query_id, after)
            events += more
            if read_to == after:  # nothing more was read
                return fold_tree(events)
            after = read_to


def _entries_after(entries: TreeEntries, after: str, count: int) -> list[tuple[str, dict[bytes, bytes]]]:
    """The first `count` of a record's `entries` after entry `after`, as a stream read gives them."""
    out = []
    for entry_id, payload in entries:
        if entry_after(entry_id, after):
            out.append((entry_id, {b"e": payload}))
            if len(out) == count:
                break
    return out


def _node_events(stream: str, entries: Sequence[Entry], after: str) -> tuple[list[NodeEvent], str]:
    """The node events of `entries` (unreadable ones skipped), and the last entry's id."""
    events: list[NodeEvent] = []
    for entry_id, fields in entries:
        after = as_str(entry_id)
        try:
            event = decode(stream, (fields or {}).get(b"e", b""))
        except ProtocolError:
            continue
        if isinstance(event, NodeEvent):
            events.append(event)
    return events, after
