"""What watchers and the metrics see of the queries a coordinator holds: the growth of each
query's speculation and token counts (Prometheus), and the nodes of its tree that changed
(its tree stream, which the live view and the HTTP API read)."""

from __future__ import annotations

import time
from collections.abc import Iterable

from spex.proto import NodeEvent
from spex.services.coordinator.query import HeldQuery
from spex.services.coordinator.store import QueryStore
from spex.shared.runtime.metrics import SPECULATION, TOKENS

__all__ = ["TREE_EVERY_S", "Observer"]

TREE_EVERY_S = 0.1  # how often, at most, a query's tree changes go to its watchers
# The speculation counts of `QueryStats` and their outcome label in metrics.SPECULATION.
SPECULATION_OUTCOMES = {
    "spec_issued": "issued",
    "spec_adopted": "adopted",
    "spec_cancelled": "cancelled",
    "spec_evicted": "evicted",
}
# Wasted is speculative − consumed, derived where it is read: a speculative node counts as
# generated when it finishes and as consumed only when the search takes it, later.
TOKEN_KINDS = {
    "tokens_generated": "generated",
    "spec_tokens": "speculative",
    "spec_tokens_consumed": "consumed",
}
COUNTED = (*SPECULATION_OUTCOMES, *TOKEN_KINDS)  # the counts whose growth is added up


class Observer:
    def __init__(self, store: QueryStore, tree_events: bool) -> None:
        self.store = store
        self.tree_events = tree_events

    async def observe(self, query: HeldQuery, final: bool = False) -> None:
        """Count what `query` did since it was last observed, and send its tree's changes —
        at most every TREE_EVERY_S (looking costs a pass over the tree; `send_due` sends what
        waited), and always the final tree."""
        self._count(query)
        if not self.tree_events:
            return
        if not final and time.monotonic() - query.tree_sent < TREE_EVERY_S:
            query.tree_due = True
            return
        query.tree_sent, query.tree_due = time.monotonic(), False
        m, req = query.machine, query.request
        # Seconds since the question was submitted: the same origin for whoever owns it.
        t_s = round(time.time() - req.created_ms / 1000, 4) if req.created_ms else 0.0
        events = [
            NodeEvent(
                msg_id=f"{req.query_id}/node/{v.id}/{m.events}",
                query_id=req.query_id,
                trace_id=req.trace_id,
                node_id=v.id,
                parent_id=v.parent,
                index=v.index,
                action=v.action,
                depth=v.depth,
                state=v.state,
                generated=v.generated,
                running=v.running,
                text=v.text if new_text else "",
                tokens=v.tokens,
                answer=v.answer,
                reward=v.reward,
                finish_reason=v.finish_reason,
                t_s=t_s,
            )  # fmt: skip
            for v, new_text in query.watch.changes(m)
        ]
        await self.store.publish_tree(req.query_id, events)

    async def send_due(self, queries: Iterable[HeldQuery]) -> None:
        """The tree changes that waited for their turn."""
        due = time.monotonic() - TREE_EVERY_S
        for query in [q for q in queries if q.tree_due and q.tree_sent <= due]:
            await self.observe(query)

    @staticmethod
    def _count(query: HeldQuery) -> None:
        counts = tuple(getattr(query.machine.stats, name) for name in COUNTED)
        before = query.counted or (0,) * len(COUNTED)
        grown = {name: now - then for name, now, then in zip(COUNTED, counts, before, strict=True)}
        query.counted = counts
        if query.replaying and query.epoch > 1:
            return  # a previous owner's work, counted by it
        for name, outcome in SPECULATION_OUTCOMES.items():
            if grown[name] > 0:
                SPECULATION.labels(outcome).inc(grown[name])
        for name, kind in TOKEN_KINDS.items():
            if grown[name] > 0:
                TOKENS.labels(kind).inc(grown[name])
