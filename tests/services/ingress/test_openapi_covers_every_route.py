"""The ingress's OpenAPI document lists exactly the routes its app registers — a route added
without documentation fails here, as does a documented one no longer served — and it is a
well-formed OpenAPI 3.1 document: its schemas are JSON Schema, its references resolve, each
path's parameters are declared. No server: the app's router is read as built."""

import re

import pytest
import redis.asyncio as aioredis

from spex.services.ingress.openapi import OPENAPI_VERSION, document
from spex.services.ingress.service import OPEN_PATHS, IngressService
from spex.shared.runtime.settings import Settings

METHODS = {"get", "put", "post", "delete", "patch", "options", "head", "trace"}


def served() -> set[tuple[str, str]]:
    """(method, path) of every route the ingress's app registers (aiohttp's implicit HEAD of
    each GET aside)."""
    app = IngressService(aioredis.Redis(), Settings()).app()
    return {
        (route.method, route.resource.canonical)
        for route in app.router.routes()
        if route.method != "HEAD" and route.resource is not None
    }


def documented(doc) -> set[tuple[str, str]]:
    return {(method.upper(), path) for path, ops in doc["paths"].items() for method in ops}


def test_every_route_is_documented_and_every_documented_route_is_served():
    routes, doc = served(), document(OPEN_PATHS)
    assert routes - documented(doc) == set(), "served but not in spex.services.ingress.openapi"
    assert documented(doc) - routes == set(), "documented but not served"


def test_the_routes_served_without_a_token_are_the_ones_documented_so():
    doc = document(OPEN_PATHS)
    open_ops = {path for path, ops in doc["paths"].items() for op in ops.values() if op.get("security") == []}
    assert open_ops == OPEN_PATHS
    for path, ops in doc["paths"].items():
        for op in ops.values():
            assert ("401" in op["responses"]) == (path not in OPEN_PATHS), path


def test_the_document_is_well_formed_openapi_3_1():
    jsonschema = pytest.importorskip("jsonschema")
    doc = document(OPEN_PATHS)
    assert doc["openapi"] == OPENAPI_VERSION and doc["info"]["title"] and doc["info"]["version"]
    assert doc["security"] == [{"bearer": []}]
    assert doc["components"]["securitySchemes"]["bearer"] == {
        **doc["components"]["securitySchemes"]["bearer"], "type": "http", "scheme": "bearer"
    }  # fmt: skip
    schemas = doc["components"]["schemas"]
    for name, schema in schemas.items():
        jsonschema.Draft202012Validator.check_schema(schema)  # OpenAPI 3.1's schemas are 2020-12's
        assert re.fullmatch(r"[A-Za-z0-9._-]+", name)
    refs = re.findall(r"'\$ref': '#/components/schemas/([^']+)'", repr(doc))
    assert refs and set(refs) <= set(schemas), set(refs) - set(schemas)
    ids, tags = [], [tag["name"] for tag in doc["tags"]]
    assert len(tags) == len(set(tags)) and all(tag["description"] for tag in doc["tags"])
    for path, ops in doc["paths"].items():
        assert path.startswith("/") and set(ops) <= METHODS, path
        for op in ops.values():
            ids.append(op["operationId"])
            assert len(op["tags"]) == 1 and op["tags"][0] in tags, path
            assert op["summary"] and op["responses"], path
            for status, response in op["responses"].items():
                assert re.fullmatch(r"[1-5][0-9][0-9]", status) and response["description"], (path, status)
            declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert declared == set(re.findall(r"\{(\w+)\}", path)), path
            assert all(p["required"] for p in op.get("parameters", []) if p["in"] == "path")
    assert len(ids) == len(set(ids)), "operation ids are unique"
