"""A live ingress serves its OpenAPI document at GET /openapi.json, without a token, and
every GET route the document lists (those without a path parameter) is there: none answers
404 or 405, and each JSON answer is valid by the schema the document gives it, with no
property it leaves out. A real ingress
(in this process), a real Redis, real HTTP."""

import asyncio
import json
import urllib.error
import urllib.request

import pytest

from spex.services.ingress.openapi import document
from spex.services.ingress.service import OPEN_PATHS
from spex.shared.runtime.redis_server import free_port
from tests.services.cluster import Cluster
from tests.services.helpers import wait_http

TOKEN = "openapi-test-token-000001"


def fetch(url, token=None):
    """(status, content type, body bytes) of one GET."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as resp:
            return resp.status, resp.headers.get_content_type(), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get_content_type(), exc.read()


def test_the_document_is_served_and_every_documented_get_route_answers(redis_url):
    jsonschema = pytest.importorskip("jsonschema")
    port = free_port()
    doc = document(OPEN_PATHS)
    plain_gets = [path for path, ops in doc["paths"].items() if "get" in ops and "{" not in path]

    async def go():
        cluster = Cluster(redis_url, "inprocess", http_port=port, auth_tokens=f"alice={TOKEN}")
        await cluster.start("ingress", "ingress-0")
        base = f"http://127.0.0.1:{port}"
        try:
            await asyncio.to_thread(wait_http, f"{base}/health")
            served = await asyncio.to_thread(fetch, f"{base}/openapi.json")  # no token
            answers = {path: await asyncio.to_thread(fetch, base + path, TOKEN) for path in plain_gets}
            return served, answers
        finally:
            await cluster.stop()

    served, answers = asyncio.run(go())
    assert served[:2] == (200, "application/json")
    assert json.loads(served[2]) == json.loads(json.dumps(doc))
    assert {"/", "/health", "/ready", "/v1/overview", "/v1/models", "/openapi.json"} <= set(answers)
    for path, (status, content_type, body) in answers.items():
        assert status not in (404, 405), (path, status, body[:200])
        response = doc["paths"][path]["get"]["responses"][str(status)]
        assert content_type in response["content"], (path, content_type)
        if content_type == "application/json":
            schema = {**response["content"][content_type]["schema"], "components": doc["components"]}
            jsonschema.validate(json.loads(body), schema)
            named = schema.get("$ref", "").rpartition("/")[2]  # no property left undocumented
            if named:
                assert set(json.loads(body)) <= set(doc["components"]["schemas"][named]["properties"]), path
