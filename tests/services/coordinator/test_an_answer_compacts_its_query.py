"""An answer compacts what its query keeps: its tree stream becomes one record (the same tree,
read by the same cursors), what only its search read (inbox, checkpoint, sent ids, cancel
marks) expires within `SEARCH_KEPT_S`, and nothing re-creates the inbox afterwards (a late
result, a cancel). Real Redis; the searches' own pipeline, real services."""

import asyncio
import contextlib

import pytest
import redis.asyncio as aioredis

from spex.proto import AnswerResult, GenerateResult, NodeEvent, SubmitQuestionRequest, encode, names
from spex.proto.names import SINGLE
from spex.services.coordinator.store import SEARCH_KEPT_S, QueryStore
from spex.shared.runtime.bus import Bus
from spex.shared.runtime.client import IngressClient
from spex.shared.runtime.refusals import Answered
from spex.shared.runtime.views import fold_tree
from tests.services.cluster import Cluster

pytestmark = pytest.mark.every_redis  # scripts: where Redis versions differ

TTL_S = 3_600


def _events(qid, n):
    """`n` node events of a small tree, each node's text sent once and updated after."""
    out = []
    for i in range(n):
        node = {"query_id": qid, "node_id": f"n{i}", "parent_id": f"n{(i - 1) // 2}" if i else ""}
        text = f"step {i} " * 20
        out.append(NodeEvent(msg_id=f"{qid}/{i}", state="primary", running=True, text=text, t_s=i / 10,
                             **node))  # fmt: skip
        out.append(NodeEvent(msg_id=f"{qid}/{i}/g", state="primary", generated=True, reward=i / n, tokens=40,
                             t_s=i / 10 + 0.05, **node))  # fmt: skip
    return out


async def _searched(r, qid):
    """A query as a coordinator holds it: its request stored, its lease taken, its tree
    published in three writes, a result in its inbox. -> (store, request, epoch)"""
    req = SubmitQuestionRequest(msg_id=f"submit//{qid}", query_id=qid, question="2+2?", client_key=qid)
    store = QueryStore(r, "coord-a", lease_s=30.0, result_ttl_s=TTL_S, partitions=SINGLE)
    await r.set(names.query_request(qid, SINGLE), encode(req))
    epoch = (await store.adopt(qid, read_request=False)).epoch
    events = _events(qid, 60)
    for part in (events[:40], events[40:90], events[90:]):
        await store.publish_tree(qid, part)
    await Bus(r, "gen-a", partitions=SINGLE).publish(
        names.query_inbox(qid, SINGLE), _result(qid, 0), require=names.query_request(qid, SINGLE)
    )
    return store, req, epoch


def _result(qid, i):
    return GenerateResult(
        msg_id=f"{qid}/r{i}", query_id=qid, job_id=f"j{i}", node_id=f"n{i}", text="t", tokens=1,
        finish_reason="stop",
    )  # fmt: skip


def test_an_answered_querys_tree_is_one_record_that_reads_as_its_stream_did(redis_url):
    async def go():
        r = aioredis.Redis.from_url(redis_url)
        client = IngressClient(r, partitions=SINGLE)
        qid = "q1"
        store, req, epoch = await _searched(r, qid)
        before = await client.tree(qid)
        page, cursor = await client.tree_events(qid, count=50)  # a reader halfway through
        answer = AnswerResult(msg_id=f"{qid}/answer", query_id=qid, answer="4", nodes=60)
        written = await store.answer(req, epoch, answer)
        after = await IngressClient(r, partitions=SINGLE).tree(qid)  # a fresh client: nothing cached
        rest, end = await client.tree_events(qid, cursor, count=1000)
        again, _ = await client.tree_events(qid, end)
        ttls = {kind: await r.ttl(key(qid, SINGLE)) for kind, key in (
            ("tree", names.query_tree), ("record", names.query_tree_record), ("inbox", names.query_inbox),
            ("sent", names.query_sent), ("request", names.query_request), ("answer", names.reply_key),
        )}  # fmt: skip
        record_bytes = await r.memory_usage(names.query_tree_record(qid, SINGLE), samples=0)
        await r.aclose()
        return written, before, after, page + rest, again, ttls, record_bytes

    written, before, after, paged, again, ttls, record_bytes = asyncio.run(go())
    assert written
    assert len(before) == 60 and after == before  # the same tree, node for node
    assert fold_tree(paged) == before and again == []  # a cursor taken on the stream goes on
    assert ttls["tree"] == -2  # the stream is gone: its entries are in the record
    assert 0 < ttls["record"] <= TTL_S and 0 < ttls["answer"] <= TTL_S and 0 < ttls["request"] <= TTL_S
    assert 0 < ttls["inbox"] <= SEARCH_KEPT_S and 0 < ttls["sent"] <= SEARCH_KEPT_S
    assert record_bytes < 4_000  # 120 events of a stream of ~30 KB


def test_nothing_recreates_the_inbox_of_an_answered_query(redis_url):
    async def go():
        r = aioredis.Redis.from_url(redis_url)
        qid = "q2"
        store, req, epoch = await _searched(r, qid)
        await store.answer(req, epoch, AnswerResult(msg_id=f"{qid}/answer", query_id=qid, answer="4"))
        await r.delete(names.query_inbox(qid, SINGLE))  # as its short expiry does
        late = await Bus(r, "gen-b", partitions=SINGLE).publish(
            names.query_inbox(qid, SINGLE), _result(qid, 1), require=names.query_request(qid, SINGLE)
        )
        with contextlib.suppress(Answered):  # a client's cancel of what is answered already: refused
            await IngressClient(r, partitions=SINGLE).cancel(qid)
        inbox = await r.exists(names.query_inbox(qid, SINGLE))
        await r.aclose()
        return late, inbox

    assert asyncio.run(go()) == (None, 0)


def test_the_pipeline_keeps_a_compact_tree_the_client_reads(redis_url):
    async def go():
        cluster = Cluster(redis_url, "inprocess")
        await cluster.start_all(generators=2)
        r = cluster.client.r
        try:
            qid = await cluster.client.submit("3+4?", algorithm="rebase", target=16)
            answer = await cluster.client.result(qid, timeout_s=60)
            tree = await cluster.client.tree(qid)
            kinds = {k.decode().rpartition("}:")[2]: await r.ttl(k) for k in await r.keys(f"*{{q:{qid}}}*")}
            return answer, tree, kinds
        finally:
            await cluster.stop()

    answer, tree, kinds = asyncio.run(go())
    assert answer is not None and not answer.error
    assert len(tree) > answer.nodes  # the root, every node searched, and speculation, from the record
    assert "tree" not in kinds and kinds["tree.z"] > SEARCH_KEPT_S
    assert all(0 < kinds[k] <= SEARCH_KEPT_S for k in ("in", "sent", "ckpt") if k in kinds)
