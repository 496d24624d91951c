"""The OpenAI-compatible endpoint, through OpenAI's own Python client against the live
ingress (real processes, real HTTP): a completion, a streamed one, the model list, errors."""

import asyncio

import openai
import pytest
import redis

from spex.proto import decode, names
from spex.shared.runtime.redis_server import free_port
from tests.services.cluster import Cluster
from tests.services.helpers import http, wait_http


@pytest.fixture(scope="module")
def ingress(redis_server):
    port = free_port()
    loop = asyncio.new_event_loop()
    cluster = Cluster(redis_server.url, "processes", http_port=port, time_scale=0.01)
    loop.run_until_complete(cluster.start("ingress", "ingress-0"))
    loop.run_until_complete(cluster.start_all())
    base = f"http://127.0.0.1:{port}"
    wait_http(f"{base}/health")
    yield base
    loop.run_until_complete(cluster.stop())
    loop.close()


def client(base):
    return openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=120)


def test_a_chat_completion_is_the_search_s_answer(ingress, redis_server):
    reply = client(ingress).chat.completions.create(
        model="spex:rebase-8",
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "What is 2 + 2?"}],
        seed=5,
        extra_body={"mode": "spex"},
    )
    spex = reply.model_extra["spex"]
    assert reply.object == "chat.completion" and reply.model == "spex:rebase-8"
    assert reply.choices[0].finish_reason == "stop" and reply.choices[0].message.role == "assistant"
    assert f"The answer is {spex['answer']}" in reply.choices[0].message.content
    assert reply.usage.completion_tokens > 0 and spex["nodes"] > 0
    # The same query over SPEX's own API: the same answer, and the seed and target were used.
    status, answer = http("GET", f"{ingress}/v1/questions/{spex['query_id']}")
    assert status == 200 and answer["answer"] == spex["answer"]
    assert answer["tree_digest"] == spex["tree_digest"]
    # The mode was passed through (whether it speculated depends on a budget arriving before a
    # half-second search ends: on a loaded machine it may not).
    stored = redis.Redis.from_url(redis_server.url).get(names.query_request(spex["query_id"]))
    assert decode(names.query_request(spex["query_id"]), stored).mode == "spex"
    again = client(ingress).chat.completions.create(
        model="spex:rebase-8", messages=[{"role": "user", "content": "What is 2 + 2?"}], seed=5,
        extra_body={"mode": "baseline"},
    )  # fmt: skip
    assert again.model_extra["spex"]["speculative_issued"] == 0  # the mode was passed through


def test_a_streamed_completion_sends_the_tree_then_the_answer(ingress):
    chunks = list(
        client(ingress).chat.completions.create(
            model="spex:rstar-4", messages=[{"role": "user", "content": "What is 3 + 4?"}], stream=True
        )
    )
    progress = [c.model_extra["spex"]["node"] for c in chunks if "node" in (c.model_extra.get("spex") or {})]
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(progress) > 3 and {n["state"] for n in progress} >= {"root", "primary"}
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert f"The answer is {chunks[-1].model_extra['spex']['answer']}" in content


def test_models_and_errors_speak_openai(ingress):
    ids = [m.id for m in client(ingress).models.list()]
    assert "spex:rebase-16" in ids and "spex:rstar-8" in ids
    with pytest.raises(openai.NotFoundError) as err:
        client(ingress).chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "hi"}])
    assert "spex:<algorithm>" in str(err.value)
    with pytest.raises(openai.BadRequestError) as err:
        system_only = [{"role": "system", "content": "x"}]
        client(ingress).chat.completions.create(model="spex:rebase", messages=system_only)
    assert "no user message" in str(err.value)
    with pytest.raises(openai.BadRequestError) as err:
        client(ingress).chat.completions.create(
            model="spex:rebase-4", messages=[{"role": "user", "content": "x"}], extra_body={"mode": "fast"}
        )
    assert "mode" in str(err.value)


def test_a_client_that_goes_away_cancels_its_query(ingress, redis_server):
    import http.client as httplib
    import json
    import time

    # The widest search the limits allow (a second or more at this time scale), found in the
    # in-flight set itself: the overview is recomputed once a second, and a search could end
    # between two of its snapshots.
    r = redis.Redis.from_url(redis_server.url)
    before = set(r.zrange(names.INGRESS_IN_FLIGHT, 0, -1))
    conn = httplib.HTTPConnection(ingress.removeprefix("http://"), timeout=10)
    body = {"model": "spex:rebase-256", "messages": [{"role": "user", "content": "What is 9 * 9?"}]}
    headers = {"Content-Type": "application/json"}
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body), headers=headers)
    deadline = time.monotonic() + 20
    while not (flying := set(r.zrange(names.INGRESS_IN_FLIGHT, 0, -1)) - before):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    qid = flying.pop().decode()
    conn.close()  # gone before the answer
    while (status := http("GET", f"{ingress}/v1/questions/{qid}"))[0] == 202:
        assert time.monotonic() < deadline + 20
        time.sleep(0.1)
    assert status[1]["status"] == "cancelled"
