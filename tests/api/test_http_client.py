"""`spex.Client` and `spex.AsyncClient` against a real ingress with tokens (an in-process cluster
on a real Redis, real HTTP): a token is required and a wrong one refused, a question submitted
and waited for comes back typed, its tree and its event stream are read, a cancelled question
says so, and each refusal is its own exception saying whether a retry can help."""

import asyncio

import pytest
import redis

import spex
from spex.shared.runtime.redis_server import free_port
from tests.services.cluster import threaded_cluster

TOKEN = "alice-secret-token-0001"


@pytest.fixture(scope="module")
def live(redis_server, tmp_path_factory):
    redis.Redis.from_url(redis_server.url).flushall()
    tokens = tmp_path_factory.mktemp("client") / "tokens"
    tokens.write_text(f"alice {TOKEN}\n")
    with threaded_cluster(redis_server.url, auth_tokens_file=str(tokens)) as running:
        yield running


async def _stop(cluster, name):
    task, stop, _ = cluster.tasks.pop(name)
    stop.set()
    await task


def test_a_token_is_required_and_a_wrong_one_refused(live):
    url, _, _ = live
    for token, said in ((None, "needs a token"), ("not-alices-token-00000", "refused the token")):
        with pytest.raises(spex.Unauthorized, match=f"the ingress at {url} {said}") as caught:
            spex.Client(url, token=token).submit("What is 1 + 1?")
        assert caught.value.status == 401 and not caught.value.retryable
    assert "alice" not in repr(spex.Client(url, token=TOKEN)) and "secret" not in repr(
        spex.Client(url, token=TOKEN)
    )


def test_submit_wait_tree_and_events_come_back_typed(live):
    url, _, _ = live
    client = spex.Client(url, token=TOKEN)
    qid = client.submit("What is 2 + 3?", algorithm="rebase", target=4, seed=3, reference="5", mode="spex")
    events = list(client.events(qid))
    answer = client.wait(qid, timeout_s=60)
    assert isinstance(answer, spex.Answer) and answer.status == "answered" and answer.query_id == qid
    assert answer.solution and answer.nodes > 0 and answer.correct is not None
    assert answer.served_by is not None and answer.served_by.engine == "sim"
    assert isinstance(events[-1], spex.AnswerEvent) and events[-1].answer == answer
    nodes = [e for e in events if isinstance(e, spex.NodeEvent)]
    assert len(events) == len(nodes) + 1 and {"root", "primary"} <= {e.state for e in nodes}
    tree = client.tree(qid)
    assert tree.query_id == qid and tree.status == "answered"
    assert {n.id for n in tree.nodes} == {e.id for e in nodes}  # every node the stream told of
    generated = [n for n in tree.nodes if n.generated and n.parent is not None]
    assert len(generated) >= answer.nodes and all(n.times["issued_s"] is not None for n in tree.nodes)
    assert client.result(qid) == answer


def test_cancel_and_what_each_refusal_says(live):
    url, cluster, loop = live
    client = spex.Client(url, token=TOKEN)
    # With its coordinator stopped, the question waits, unsearched, to be cancelled.
    asyncio.run_coroutine_threadsafe(_stop(cluster, "coord-0"), loop).result(30)
    try:
        qid = client.submit("What is 7 + 8?")
        assert client.result(qid) is None
        with pytest.raises(TimeoutError, match="no answer within 0.2 s"):
            client.wait(qid, timeout_s=0.2)
        client.cancel(qid)
    finally:
        asyncio.run_coroutine_threadsafe(cluster.start("coordinator", "coord-0"), loop).result(30)
    assert client.wait(qid, timeout_s=60).status == "cancelled"
    with pytest.raises(spex.NotFound, match="query_id: no question 'no-such-query'") as missing:
        client.result("no-such-query")
    with pytest.raises(spex.Rejected, match="colour: unknown field") as bad:
        client.submit("x", colour=1)
    with pytest.raises(spex.Rejected, match="client_key") as reused:
        client.submit("first", client_key="k1")
        client.submit("second", client_key="k1")
    assert (missing.value.status, bad.value.status, reused.value.status) == (404, 400, 409)
    gone = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(spex.Unavailable, match=f"cannot reach the ingress at {gone}: ") as away:
        spex.Client(gone).submit("x")
    assert away.value.retryable and away.value.status is None
    with pytest.raises(ValueError, match="url: no credentials in the URL"):
        spex.Client("http://user:pass@127.0.0.1:1")


def test_the_async_client_does_the_same(live):
    url, cluster, loop = live

    async def go():
        async with spex.AsyncClient(url, token=TOKEN) as client:
            with pytest.raises(spex.Unauthorized):
                await spex.AsyncClient(url).submit("x")
            qid = await client.submit("What is 4 + 4?", algorithm="rstar", target=3, reference="8")
            events = [e async for e in client.events(qid)]
            answer = await client.wait(qid, timeout_s=60)
            tree = await client.tree(qid)
            with pytest.raises(spex.NotFound):
                await client.cancel("no-such-query")
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(_stop(cluster, "coord-0"), loop))
            try:
                waiting = await client.submit("What is 9 + 9?")
                await client.cancel(waiting)
            finally:
                await asyncio.wrap_future(
                    asyncio.run_coroutine_threadsafe(cluster.start("coordinator", "coord-0"), loop)
                )
            return events, answer, tree, await client.wait(waiting, timeout_s=60)

    events, answer, tree, cancelled = asyncio.run(go())
    assert isinstance(events[-1], spex.AnswerEvent) and events[-1].answer == answer
    assert answer.status == "answered" and answer.correct is not None and len(tree.nodes) > answer.nodes
    assert cancelled.status == "cancelled"
