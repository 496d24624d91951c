"""HTTP fuzzing: the ingress served for real (aiohttp on a loopback port, a real Redis),
without and with bearer tokens, gets arbitrary requests — JSON of any shape (deep nesting,
huge integers, NaN and Infinity literals, lone surrogate escapes), submission-shaped bodies
with extreme fields, arbitrary bytes, wrong content types, random paths under /v1/questions,
any method, any Authorization header. With Redis up, no response is a 5xx, and every refusal
is a JSON object with an "error" string (the ingress's one-line-reason contract)."""

from __future__ import annotations

import asyncio
import codecs
import http.client
import json
import math
import urllib.parse
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spex.proto.messages import PROMPT_PRESETS
from spex.proto.submission import CLIENT_FIELDS, MODES
from spex.services.ingress.service import IngressService
from spex.shared.core.search import SEARCHES
from spex.shared.runtime.connect import redis_client
from spex.shared.runtime.redis_server import RedisServer, free_port
from spex.shared.runtime.settings import Settings
from tests.fuzz import strategies as fz
from tests.fuzz.harness import CASES, NOTES, Loop, count

TOKEN = "alice-secret-token-0001"
MAX_BODY = 64 * 1024  # SPEX_MAX_MESSAGE_BYTES of the servers under test: 413 is cheap to reach
HTTP = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
STATUSES: dict[str, Counter[int]] = {}  # server -> statuses seen (the report shows them)
KNOWN: list[str] = []  # query ids the servers accepted, for paths that name a real question
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")


@pytest.fixture(scope="module")
def servers():
    """server name -> (port, the service's task): one ingress without tokens, one with."""
    loop = Loop()
    with RedisServer() as redis:

        async def start(name: str, **overrides: Any) -> tuple[int, asyncio.Event, asyncio.Task[None]]:
            port = free_port()
            s = Settings(
                redis_url=redis.url,
                consumer=f"ingress-{name}",
                http_port=port,
                max_message_bytes=MAX_BODY,
                max_question_chars=2_000,  # so a long question is a 413 within the body limit
                **overrides,
            )
            stop = asyncio.Event()
            task = asyncio.create_task(IngressService(redis_client(s), s).run(stop))
            for _ in range(200):  # until it listens
                try:
                    _, writer = await asyncio.open_connection("127.0.0.1", port)
                    writer.close()
                    break
                except OSError:
                    assert not task.done(), task
                    await asyncio.sleep(0.02)
            return port, stop, task

        running = {
            "open": loop.run(start("open")),
            "auth": loop.run(start("auth", auth_tokens=f"alice={TOKEN}")),
        }
        try:
            yield {name: (port, task) for name, (port, _, task) in running.items()}
        finally:

            async def stop_all() -> None:
                for _, stop, task in running.values():
                    stop.set()
                    await asyncio.wait_for(task, 10)

            loop.run(stop_all())
            loop.close()


# ---------------------------------------------------------------------------- requests

# JSON text a JSON encoder would not write: huge numbers, NaN and Infinity, lone surrogate
# escapes, duplicate keys, deep nesting, encodings other than UTF-8, truncations.
RAW_JSON = [
    '{"question": "1+1?", "target": ' + "9" * 5_000 + "}",  # past Python's int-parsing limit
    '{"question": "1+1?", "seed": 18446744073709551616}',
    '{"question": "1+1?", "seed": -9223372036854775809}',
    '{"question": "1+1?", "target": 1e999}',
    '{"question": NaN}',
    '{"question": "x", "target": Infinity}',
    '{"question": "x", "prompt_tokens": -Infinity}',
    '{"question": "\\ud800"}',
    '{"question": "a\\udfffb", "client_key": "\\udc80"}',
    '{"question": "ok", "reference_answer": "\\ud83d"}',
    '{"question": "ok", "algorithm": "\\u0000"}',
    '{"question": "1+1?", "question": "2+2?"}',
    '{"question": "1+1?", "target": 1, "target": "one"}',
    "[" * 100_000 + "]" * 100_000,
    '{"question": ' + "[" * 5_000 + "]" * 5_000 + "}",
    '{"a":' * 3_000 + "1" + "}" * 3_000,
    '{"question": "x"',
    "",
    " ",
    "null",
    "true",
    '"a string"',
    "1e999999",
    "-0",
    "[]",
    "{}",
    '{"": 1}',
    '{"question": ""}',
    '{"question": "   "}',
    '{"question": "x", "target": 0}',
    '{"question": "x", "target": true}',
    '{"question": "x", "target": 1.0}',
    '{"question": "x", "mode": null}',
]
RAW_BYTES = [
    codecs.BOM_UTF8 + b'{"question": "1+1?"}',
    '{"question": "1+1?"}'.encode("utf-16"),
    '{"question": "1+1?"}'.encode("utf-32-le"),
    b'{"question": "\xff\xfe"}',
    b'{"question": "\xed\xa0\x80"}',  # a UTF-8-encoded surrogate
    b"\x00" * 64,
    b"\x1f\x8b\x08\x00",  # a gzip header
    b"question=1%2B1%3F&target=3",
    b"--x\r\nContent-Disposition: form-data; name=question\r\n\r\n1+1?\r\n--x--\r\n",
]
CONTENT_TYPES = [
    None,
    "application/json",
    "application/json; charset=utf-8",
    "application/json; charset=latin-1",
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "application/octet-stream",
    "",
    "*/*",
    "application/json; boundary=\xe9",
    "ü/ü",
]


def json_values() -> st.SearchStrategy[Any]:
    leaves = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        fz.ints(),
        st.integers(min_value=2**64, max_value=10**40),
        st.floats(),  # nan and ±inf: json.dumps writes NaN and Infinity
        fz.strings(surrogates=True),
    )
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=5), st.dictionaries(fz.strings(short=True), inner, max_size=5)
        ),
        max_leaves=20,
    )


# Per client field, values of the right type at their extremes (the validator's work), then
# anything (the field check's work).
FIELD_VALUES = {
    str: fz.weighted((4, fz.strings(surrogates=True)), (1, fz.long_strings(120_000))),
    int: st.one_of(fz.ints(), st.integers(min_value=2**64, max_value=10**30), st.integers(-(10**30), -1)),
    float: st.one_of(st.floats(), st.integers(-(10**30), 10**30)),  # nan, ±inf, and whole numbers
    bool: st.booleans(),
    dict: st.dictionaries(
        fz.strings(short=True), st.one_of(st.floats(), fz.strings(short=True)), max_size=40
    ),
}
PLAUSIBLE = {
    "question": st.sampled_from(["What is 1+1?", "x", "é" * 50]),
    "algorithm": st.sampled_from(sorted(SEARCHES)),
    "mode": st.sampled_from(MODES),
    "target": st.integers(1, 8),
    "seed": st.integers(0, 2**63 - 1),
    "prompt_tokens": st.integers(0, 10_000_001),
    "client_key": st.text(max_size=20),
    "reference_answer": st.sampled_from(["", "2", "\\frac{1}{2}"]),
    "early_stop": st.booleans(),
    "early_stop_alpha": st.floats(0.01, 2.0),
    "early_stop_min_answers": st.integers(0, 8),
    "early_stop_weight": st.sampled_from(["min", "last"]),
    "baseline_twin": st.sampled_from([False, False, False, True]),  # a twin: with mode spex, no T3
    "params": st.just({}),  # what every search takes (a search's own are the validator's tests)
    "answer_selection": st.sampled_from(["", "majority", "weighted", "best"]),
    "prompt_preset": st.sampled_from(["", *PROMPT_PRESETS]),
    "system_prompt": st.sampled_from(["", "Be terse.", "é" * 50]),
    "chat_template": st.sampled_from(["", "{{ messages[0]['content'] }}", "{% for m in messages %}"]),
    "step_delimiter": st.sampled_from(["", "\n\n", "\n", "## Step"]),
}


@st.composite
def submissions(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {}
    for name, kind in CLIENT_FIELDS.items():
        choice = draw(st.integers(0, 9))
        if choice < (1 if name == "question" else 3):  # the question is required: rarely left out
            continue  # left out: the default
        if choice < 8:
            body[name] = draw(PLAUSIBLE[name])
        elif choice < 9:
            body[name] = draw(FIELD_VALUES[kind])  # the right type, at an extreme
        else:
            body[name] = draw(json_values())  # likely the wrong type
    if draw(st.integers(0, 9)) == 0:
        body[draw(fz.strings(short=True))] = draw(json_values())  # an unknown field (or not)
    return body


def _dumps(value: Any) -> str:
    """JSON with NaN/Infinity literals and \\uXXXX escapes for lone surrogates."""
    return json.dumps(value, allow_nan=True, ensure_ascii=True)


bodies = fz.weighted(
    (6, submissions().map(_dumps).map(str.encode)),
    (2, json_values().map(_dumps).map(str.encode)),
    (2, st.sampled_from(RAW_JSON).map(str.encode)),
    (1, st.sampled_from(RAW_BYTES)),
    (2, st.binary(max_size=300)),
    (1, st.just(b"{" + b" " * (MAX_BODY + 1) + b"}")),  # past the body limit
)

# Header values as bytes: http.client sends them as they are. Control characters other than
# tab are left out — the HTTP parser refuses those before the application sees the request.
_header_byte = st.one_of(st.integers(0x20, 0x7E), st.integers(0x80, 0xFF), st.just(0x09))
header_bytes = st.lists(_header_byte, max_size=80).map(bytes)
authorizations = fz.weighted(  # mostly the valid token, so requests get past the check
    (12, st.just(f"Bearer {TOKEN}".encode())),
    (3, st.none()),
    (
        1,
        st.sampled_from(
            [f"bearer {TOKEN}", f"BEARER  {TOKEN} ", f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}"]
        ).map(str.encode),
    ),
    (
        1,
        st.sampled_from(["Bearer", "Bearer ", "Basic YWxpY2U6eA==", "Token " + TOKEN, "", "\t"]).map(
            str.encode
        ),
    ),
    (2, header_bytes.map(lambda b: b"Bearer " + b)),
    (1, header_bytes),
    (1, st.just(b"Bearer " + "é".encode() + TOKEN.encode())),
    (1, st.just(b"Bearer " + b"\xff" * 20)),
    (1, st.just(b"Bearer " + b"x" * 8_000)),
)


def _quote(text: str) -> str:
    """A path segment: percent-encoded, cut to 3,000 bytes (aiohttp's HTTP parser refuses a
    request line past 8,190 bytes in plain text, before the application sees it)."""
    return urllib.parse.quote(text.encode("utf-8", "surrogatepass"), safe="")[:3_000]


qid_segments = fz.weighted(
    (3, st.from_regex(r"[A-Za-z0-9_.:-]{1,64}", fullmatch=True)),  # well-formed, probably unknown
    (3, st.integers(0, 10_000).map(lambda i: KNOWN[i % len(KNOWN)] if KNOWN else "none")),  # a real one
    (2, fz.strings(surrogates=True).map(_quote)),
    (1, st.sampled_from(["%", "%zz", "%00", "%2F", "%2e%2e", "..", ".", "a" * 65, "x" * 3_000, "%F0%9F"])),
    (1, st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=30)),  # raw printable
)
paths = fz.weighted(
    (4, st.just("/v1/questions")),
    (5, qid_segments.map(lambda q: f"/v1/questions/{q}")),
    (1, st.tuples(qid_segments, qid_segments).map(lambda p: f"/v1/questions/{p[0]}/{p[1]}")),
    (
        1,
        st.sampled_from(
            ["/v1/questions/", "/v1/questions//", "/v1/questions?x=1", "/", "/v1", "/v2/questions"]
        ),
    ),
    (1, qid_segments.map(lambda q: f"/v1/questions?{q}=1")),
)
methods = fz.weighted(
    (5, st.just("POST")),
    (4, st.just("GET")),
    (2, st.just("DELETE")),
    (1, st.sampled_from(["PUT", "PATCH", "HEAD", "OPTIONS"])),
)


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    method = draw(methods)
    with_body = method in ("POST", "PUT", "PATCH") or draw(st.integers(0, 9)) == 0
    headers: dict[str, Any] = {}
    content_type = draw(fz.weighted((4, st.just("application/json")), (1, st.sampled_from(CONTENT_TYPES))))
    if content_type is not None:
        headers["Content-Type"] = content_type.encode("latin-1", "replace")
    auth = draw(authorizations)
    if auth is not None:
        headers["Authorization"] = auth
    path = draw(fz.weighted((3, st.just("/v1/questions")), (1, paths)) if method == "POST" else paths)
    return {
        "method": method,
        "path": path,
        "headers": headers,
        "body": draw(bodies) if with_body else None,
    }


def send(port: int, req: dict[str, Any]) -> tuple[int, bytes, dict[str, str]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    try:
        conn.request(req["method"], req["path"], body=req["body"], headers=req["headers"])
        resp = conn.getresponse()
        return resp.status, resp.read(), dict(resp.getheaders())
    finally:
        conn.close()


def check(server: str, req: dict[str, Any], status: int, raw: bytes, content_type: str = "") -> None:
    STATUSES.setdefault(server, Counter())[status] += 1
    what = f"{req['method']} {req['path'][:120]!r} -> {status} {raw[:300]!r}"
    assert status < 500, f"a 5xx with Redis up: {what}"
    if req["method"] == "HEAD":
        return  # no body by definition
    if status == 200 and content_type.startswith(("text/html", "text/event-stream")):
        return  # the web view's page, a query's live events: not JSON by design
    try:
        body = json.loads(raw)
    except ValueError:
        pytest.fail(f"not a JSON body: {what}")
    if status >= 400:
        assert isinstance(body, dict), what
        assert isinstance(body.get("error"), str) and body["error"].strip(), f"no error string: {what}"
    elif status == 202 and req["method"] == "POST" and isinstance(body, dict) and "query_id" in body:
        KNOWN.append(body["query_id"])


def _fuzz(servers, server: str) -> None:
    port, task = servers[server]
    test = f"http ingress ({server})"

    @HTTP
    @given(req=requests())
    def case(req):
        status, raw, headers = send(port, req)
        check(server, req, status, raw, headers.get("Content-Type", ""))
        count(test, 1, 1)

    case()
    assert not task.done(), "the ingress service ended"
    assert CASES[test]["examples"] >= 250
    seen = STATUSES[server]
    # The fuzzing reached both acceptance and the refusals (not only one answer to everything).
    assert seen[202] > 0 and seen[400] > 0 and seen[404] > 0, seen
    if server == "auth":
        assert seen[401] > 0, seen
    NOTES[test] = "statuses: " + ", ".join(f"{k} ×{v}" for k, v in sorted(seen.items()))


def test_open_ingress_never_answers_5xx(servers):
    _fuzz(servers, "open")


def test_ingress_with_tokens_never_answers_5xx(servers):
    _fuzz(servers, "auth")


def test_a_request_past_the_body_limit_is_a_json_413(servers):
    port, _ = servers["open"]
    req = {"method": "POST", "path": "/v1/questions", "headers": {}, "body": b"[" * (MAX_BODY + 1)}
    status, raw, _ = send(port, req)
    assert status == 413 and "error" in json.loads(raw)


def test_nan_literals_are_refused_by_type(servers):
    port, _ = servers["open"]
    for literal in ("NaN", "Infinity", "-Infinity"):
        req = {
            "method": "POST",
            "path": "/v1/questions",
            "headers": {},
            "body": f'{{"question": "x", "seed": {literal}}}'.encode(),
        }
        status, raw, _ = send(port, req)
        assert (status, json.loads(raw)) == (400, {"error": "seed: expected int"}), literal
    assert math.isnan(json.loads("NaN"))  # Python's json accepts the literal: the type check refuses it


def test_routing_refusals_are_json_too(servers):
    """aiohttp's own 404 and 405 (no such route, a method a route lacks) were plain text."""
    port, _ = servers["open"]
    for method, path, status in [
        ("GET", "/v1/questions/a/b", 404),
        ("GET", "/v1/questions/", 404),
        ("PUT", "/v1/questions/q1", 405),
        ("GET", "/v1/questions", 405),
    ]:
        got, raw, headers = send(port, {"method": method, "path": path, "headers": {}, "body": None})
        assert got == status and json.loads(raw)["error"], (method, path, got, raw)
        if status == 405:
            assert headers.get("Allow"), headers


def test_a_token_that_is_not_utf8_is_refused_not_a_500(servers):
    port, _ = servers["auth"]
    req = {
        "method": "GET",
        "path": "/v1/questions/q1",
        "headers": {"Authorization": b"Bearer \xff\xfe"},
        "body": None,
    }
    status, raw, _ = send(port, req)
    assert (status, json.loads(raw)) == (401, {"error": "authorization: a valid bearer token is required"})
