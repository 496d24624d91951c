"""OpenTelemetry: a query's span and its jobs' spans share the trace id its messages carry
(the SDK's in-memory exporter, the services in this process on a real Redis)."""

import asyncio

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from spex.proto import decode
from spex.proto.names import SINGLE, query_request
from spex.shared.runtime import tracing
from tests.services.cluster import Cluster


@pytest.fixture(scope="module")
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    return exporter


def test_a_query_and_its_jobs_are_one_trace(redis_url, spans):
    async def go():
        # A fixed, generous slack: the query speculates whatever the governor would have measured.
        cluster = Cluster(redis_url, "inprocess", tpot_fixed=True, tpot_slack=1.0)
        await cluster.start_all()
        try:
            qid = await cluster.client.submit("What is 2 + 5?", algorithm="rebase", target=4)
            answer = await cluster.client.result(qid, timeout_s=30)
            request = decode(
                query_request(qid, SINGLE), await cluster.client.r.get(query_request(qid, SINGLE))
            )
            return qid, answer, request.trace_id
        finally:
            await cluster.stop()

    qid, answer, trace_id = asyncio.run(go())
    mine = [s for s in spans.get_finished_spans() if s.attributes.get("spex.query_id") == qid]
    (query,) = [s for s in mine if s.name == "spex.query"]
    generates = [s for s in mine if s.name == "spex.generate"]
    scores = [s for s in mine if s.name == "spex.score"]
    assert f"{query.context.trace_id:032x}" == trace_id  # the trace id the messages carry
    assert {s.context.trace_id for s in mine} == {query.context.trace_id}
    assert {s.parent.span_id for s in generates + scores} == {query.context.span_id}
    assert query.attributes["spex.outcome"] == "answered" and query.attributes["spex.nodes"] == answer.nodes
    assert query.attributes["spex.algorithm"] == "rebase"
    issued = query.attributes["spex.speculative.issued"]
    finished = [s for s in generates if s.attributes["spex.outcome"] == "finished"]
    assert len(finished) >= answer.nodes - answer.spec_adopted and scores
    assert all(s.end_time >= s.start_time for s in mine)
    primary = [s for s in generates if s.attributes["spex.priority"] == 0]
    assert primary and len(generates) - len(primary) <= issued  # a job cancelled before it ran has none
