"""The OpenAI endpoint refuses what it cannot honour, never accepting and ignoring it: each such
parameter (and an unknown one, n=2, a temperature other than the operator's, a system message
anywhere but before the one user message) is a 400 in OpenAI's shape whose `param` names it; its
own 401, 404, 405 and 429 are OpenAI's shape too, while SPEX's own routes keep their one-line
errors; and a body that is not JSON says why, apart from JSON that is not an object, on both. A
real ingress process with tokens (no search runs: every request here is refused before one would
start), a real Redis."""

import asyncio
import json
import urllib.error
import urllib.request

import openai
import pytest

from spex.shared.runtime.redis_server import free_port
from tests.services.cluster import Cluster
from tests.services.helpers import http, wait_http

TOKEN = "alice-secret-token-0001"
USER = [{"role": "user", "content": "What is 2 + 2?"}]


@pytest.fixture(scope="module")
def ingress(redis_server, tmp_path_factory):
    tokens = tmp_path_factory.mktemp("tokens") / "tokens"
    tokens.write_text(f"alice {TOKEN}\n")
    port = free_port()
    loop = asyncio.new_event_loop()
    cluster = Cluster(
        redis_server.url, "processes", http_port=port, auth_tokens_file=str(tokens), client_in_flight=1
    )
    loop.run_until_complete(cluster.start("ingress", "ingress-0"))
    base = f"http://127.0.0.1:{port}"
    wait_http(f"{base}/health")
    yield base
    loop.run_until_complete(cluster.stop())
    loop.close()


def chat(base, body, token=TOKEN):
    return http("POST", f"{base}/v1/chat/completions", body, token=token)


def raw_post(url, data):
    """(status, JSON body, headers) of a POST of `data` as it is."""
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}
    req = urllib.request.Request(url, data=data, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read()), resp.headers
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), exc.headers


def openai_shaped(body, param=None, code=None, kind="invalid_request_error"):
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"], body
    assert (error["type"], error["param"], error["code"]) == (kind, param, code), body


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("temperature", 0.9),
        ("n", 2),
        ("top_p", 0.5),
        ("frequency_penalty", 0.5),
        ("presence_penalty", -1),
        ("logit_bias", {"50256": -100}),
        ("logprobs", True),
        ("top_logprobs", 3),
        ("tools", [{"type": "function", "function": {"name": "f"}}]),
        ("tool_choice", "auto"),
        ("response_format", {"type": "json_object"}),
        ("metadata", {"team": "a"}),
        ("store", True),
        ("reasoning_effort", "high"),
        ("audio", {"voice": "alloy"}),
        ("service_tier", "flex"),
    ],
)
def test_a_parameter_it_cannot_honour_is_a_400_naming_it(ingress, param, value):
    status, body = chat(ingress, {"model": "spex:rebase-4", "messages": USER, param: value})
    assert status == 400
    openai_shaped(body, param, "unsupported_value")
    assert body["error"]["message"].startswith(f"{param}: ")


@pytest.mark.parametrize(
    ("extra", "param", "code"),
    [
        ({"frobnicate": 1}, "frobnicate", "unknown_parameter"),
        ({"max_tokens": 0}, "max_tokens", "invalid_value"),
        ({"max_completion_tokens": "5"}, "max_completion_tokens", "invalid_type"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "invalid_value"),
        ({"stream_options": {"include_usage": True}}, "stream_options", "invalid_value"),
        ({"stream": True, "stream_options": {"obfuscate": True}}, "stream_options.obfuscate",
         "unknown_parameter"),
        ({"temperature": "hot"}, "temperature", "invalid_type"),
        ({"seed": -1}, "seed", "invalid_value"),
        ({"mode": "fast"}, "mode", "invalid_value"),
        ({"messages": [*USER, {"role": "system", "content": "be brief"}]}, "messages[1]",
         "unsupported_value"),
        ({"messages": [{"role": "system", "content": "a"}, {"role": "system", "content": "b"}, *USER]},
         "messages[1]", "unsupported_value"),
        ({"messages": [{"role": "system", "content": "be brief"}, *USER], "system_prompt": "x"},
         "messages[0]", "invalid_value"),
        ({"messages": [*USER, {"role": "assistant", "content": "4"}]}, "messages[1]", "unsupported_value"),
        ({"messages": [*USER, *USER]}, "messages", "unsupported_value"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
         "messages[0].content[0]", "unsupported_value"),
        ({"messages": [{**USER[0], "name": "bob"}]}, "messages[0].name", "unknown_parameter"),
        ({"model": None}, "model", "missing_required_parameter"),
    ],
)  # fmt: skip
def test_a_bad_or_unknown_parameter_is_a_400_naming_it(ingress, extra, param, code):
    status, body = chat(ingress, {"model": "spex:rebase-4", "messages": USER, **extra})
    assert status == 400
    openai_shaped(body, param, code)


def test_openai_s_client_sees_the_refusals_as_openai_s(ingress):
    client = openai.OpenAI(base_url=f"{ingress}/v1", api_key=TOKEN, max_retries=0, timeout=30)
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="spex:rebase-4", messages=USER, n=2)
    assert (
        err.value.param == "n" and err.value.code == "unsupported_value" and "one answer" in err.value.message
    )
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="spex:rebase-4", messages=USER, temperature=0.9)
    assert err.value.param == "temperature" and "send 0.3" in err.value.message
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="spex:rebase-4", messages=USER, extra_body={"best_of": 2})
    assert err.value.param == "best_of" and err.value.code == "unknown_parameter"
    with pytest.raises(openai.NotFoundError) as err:
        client.chat.completions.create(model="gpt-4o", messages=USER)
    assert err.value.param == "model" and err.value.code == "model_not_found"
    with pytest.raises(openai.AuthenticationError) as err:
        openai.OpenAI(base_url=f"{ingress}/v1", api_key="not-a-token-at-all-000", max_retries=0).models.list()
    assert err.value.code == "invalid_api_key" and err.value.type == "invalid_request_error"


def test_the_openai_routes_refuse_in_openai_s_shape_and_the_native_ones_in_theirs(ingress):
    status, body = chat(ingress, {"model": "spex:rebase-4", "messages": USER}, token=None)
    assert status == 401
    openai_shaped(body, None, "invalid_api_key")
    status, body = http("GET", f"{ingress}/v1/models")
    assert status == 401
    openai_shaped(body, None, "invalid_api_key")
    status, body = http("GET", f"{ingress}/v1/chat/completions", token=TOKEN)  # a method it lacks
    assert status == 405
    openai_shaped(body)
    status, body = http("POST", f"{ingress}/v1/chat/nothing", {}, token=TOKEN)
    assert status == 404
    openai_shaped(body)
    # SPEX's own routes: their one-line error, as before.
    assert http("GET", f"{ingress}/v1/questions/q1") == (
        401,
        {"error": "authorization: a valid bearer token is required"},
    )
    # A client over its limit (one question in flight here): 429 with Retry-After, in each shape.
    status, accepted = http("POST", f"{ingress}/v1/questions", {"question": "1 + 1?"}, token=TOKEN)
    assert status == 202
    status, native, headers = raw_post(f"{ingress}/v1/questions", json.dumps({"question": "2 + 2?"}).encode())
    assert status == 429 and isinstance(native["error"], str) and headers["Retry-After"] == "1"
    body = json.dumps({"model": "spex:rebase-4", "messages": USER}).encode()
    status, refused, headers = raw_post(f"{ingress}/v1/chat/completions", body)
    assert status == 429 and headers["Retry-After"] == "1"
    openai_shaped(refused, None, "rate_limit_exceeded", kind="rate_limit_error")
    assert http("DELETE", f"{ingress}/v1/questions/{accepted['query_id']}", token=TOKEN)[0] == 202


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/questions"])
def test_a_body_that_is_not_json_says_why(ingress, path):
    said = {}
    for name, data in {
        "not json": b"model=spex",
        "cut short": b'{"question": "x",',
        "empty": b"",
        "a list": json.dumps([{"question": "x"}]).encode(),
    }.items():
        status, body, _ = raw_post(f"{ingress}{path}", data)
        assert status == 400, (name, body)
        error = body["error"]
        said[name] = error["message"] if path.startswith("/v1/chat") else error
        if path.startswith("/v1/chat"):
            openai_shaped(body, "body", "invalid_json")
    assert said["not json"] == "body: not valid JSON: expecting value at line 1 column 1"
    assert said["cut short"].startswith("body: not valid JSON: ") and "line 1 column 18" in said["cut short"]
    assert said["empty"] == "body: empty: send a JSON object"
    assert said["a list"] == "body: must be a JSON object, not an array"
