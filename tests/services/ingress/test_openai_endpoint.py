"""The OpenAI-compatible endpoint, through OpenAI's own Python client against the live
ingress (real processes, real HTTP): a completion and its usage, one cut at max_tokens and at a
stop string, a streamed one (and its usage chunk), the model list, errors. What it refuses:
test_openai_refuses_what_it_cannot_honour.py."""

import asyncio

import openai
import pytest
import redis

from spex.proto import decode, names, submission
from spex.proto.names import SINGLE
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
        messages=[{"role": "user", "content": "What is 2 + 2?"}],
        seed=5,
        extra_body={"mode": "spex"},
    )
    spex, labelled = reply.model_extra["spex"], reply.choices[0].message.content
    # The simulated GPU's stand-in text says what it is, first, in the text a client reads (the
    # label is neither cut by max_tokens nor counted).
    label = f"[{spex['served_by']['demonstration']}]\n\n"
    assert labelled.startswith(label) and label.startswith(
        "[a demonstration: synthetic content on a simulated"
    )
    content = labelled.removeprefix(label)
    assert reply.object == "chat.completion" and reply.model == "spex:rebase-8"
    assert reply.choices[0].finish_reason == "stop" and reply.choices[0].message.role == "assistant"
    assert f"The answer is {spex['answer']}" in content
    assert spex["served_by"]["engine"] == "sim" and spex["served_by"]["content"] == "synthetic"
    # The usage counts the question and the reply (the coordinator's estimate: no tokenizer
    # at the ingress); the search's own tokens are SPEX's figure.
    assert reply.usage.prompt_tokens == submission.estimate_tokens("What is 2 + 2?") > 0
    assert reply.usage.completion_tokens == submission.estimate_tokens(content) > 0
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    assert spex["tokens_generated"] > reply.usage.completion_tokens and spex["nodes"] > 0
    # The same query over SPEX's own API: the same answer, and the seed and target were used.
    status, answer = http("GET", f"{ingress}/v1/questions/{spex['query_id']}")
    assert status == 200 and answer["answer"] == spex["answer"]
    assert answer["tree_digest"] == spex["tree_digest"]
    # The mode was passed through (whether it speculated depends on a budget arriving before a
    # half-second search ends: on a loaded machine it may not).
    stored = redis.Redis.from_url(redis_server.url).get(names.query_request(spex["query_id"], SINGLE))
    assert decode(names.query_request(spex["query_id"], SINGLE), stored).mode == "spex"
    again = client(ingress).chat.completions.create(
        model="spex:rebase-8", messages=[{"role": "user", "content": "What is 2 + 2?"}], seed=5,
        extra_body={"mode": "baseline"},
    )  # fmt: skip
    assert again.model_extra["spex"]["speculative_issued"] == 0  # the mode was passed through


def _unlabelled(reply):
    """A reply's content without the demonstration's label (synthetic content's)."""
    return reply.choices[0].message.content.split("]\n\n", 1)[1]


def test_max_tokens_and_stop_cut_the_reply(ingress):
    ask = {"model": "spex:rebase-8", "messages": [{"role": "user", "content": "What is 2 + 2?"}], "seed": 5}

    def first_step(reply):  # the search's own, over SPEX's API
        status, answer = http("GET", f"{ingress}/v1/questions/{reply.model_extra['spex']['query_id']}")
        assert status == 200
        return answer["solution"][0].strip()

    # The operator's temperature, n=1, top_p=1 and the like ask for nothing the search lacks.
    cut = client(ingress).chat.completions.create(
        **ask, max_tokens=5, temperature=0.3, n=1, top_p=1, logprobs=False, user="tester"
    )
    content = _unlabelled(cut)
    assert cut.choices[0].finish_reason == "length" and content and first_step(cut).startswith(content)
    assert cut.usage.completion_tokens == submission.estimate_tokens(content) <= 5
    stopped = client(ingress).chat.completions.create(**ask, stop=[":", "never"], max_completion_tokens=1000)
    content = _unlabelled(stopped)
    assert stopped.choices[0].finish_reason == "stop"
    assert first_step(stopped).startswith(content + ":") and ":" not in content


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


def test_a_streamed_completion_ends_with_its_usage_when_asked(ingress):
    chunks = list(
        client(ingress).chat.completions.create(
            model="spex:rstar-4", messages=[{"role": "user", "content": "What is 3 + 4?"}], stream=True,
            stream_options={"include_usage": True}, max_tokens=3,
        )
    )  # fmt: skip
    *rest, last = chunks
    content = "".join(c.choices[0].delta.content or "" for c in rest if c.choices).split("]\n\n", 1)[1]
    assert last.choices == [] and all(c.usage is None for c in rest)  # OpenAI's: the last chunk only
    assert [c.choices[0].finish_reason for c in rest if c.choices][-1] == "length"
    assert last.usage.prompt_tokens == submission.estimate_tokens("What is 3 + 4?")
    assert last.usage.completion_tokens == submission.estimate_tokens(content) <= 3
    assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens


def test_models_and_errors_speak_openai(ingress):
    ids = [m.id for m in client(ingress).models.list()]
    assert "spex:rebase-16" in ids and "spex:rstar-8" in ids
    with pytest.raises(openai.NotFoundError) as err:
        client(ingress).chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "hi"}])
    assert "spex:<algorithm>" in str(err.value)
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
