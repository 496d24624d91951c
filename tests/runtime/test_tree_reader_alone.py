"""A tree reader on its own, over a real Redis and no ingress client: it pages through a query's
tree stream by cursor, folds it into the tree, and reads nothing for a query with none."""

import asyncio

import redis.asyncio as aioredis

from spex.proto import NodeEvent, encode, names
from spex.proto.names import SINGLE
from spex.shared.runtime.client_trees import TreeReader


def _event(i: int) -> NodeEvent:
    parent = f"n{(i - 1) // 2}" if i else ""
    return NodeEvent(msg_id=f"q/{i}", query_id="q", node_id=f"n{i}", parent_id=parent, state="primary",
                     generated=True, text=f"step {i}", tokens=3, t_s=i / 10)  # fmt: skip


def test_it_pages_through_a_querys_tree_and_folds_it(redis_url):
    async def go():
        r = aioredis.Redis.from_url(redis_url)
        try:
            for i in range(7):
                await r.xadd(names.query_tree("q", SINGLE), {"e": encode(_event(i))})
            reader = TreeReader(r, SINGLE)
            first, cursor = await reader.tree_events("q", count=4)
            rest, end = await reader.tree_events("q", cursor)
            assert [e.node_id for e in first + rest] == [f"n{i}" for i in range(7)]
            assert await reader.tree_events("q", end) == ([], end)  # nothing after the last
            tree = await reader.tree("q")
            assert [n["id"] for n in tree] == [f"n{i}" for i in range(7)]
            assert await reader.tree_events("none") == ([], "0") and await reader.tree("none") == []
        finally:
            await r.aclose()

    asyncio.run(go())
