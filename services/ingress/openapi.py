"""The ingress's HTTP API as an OpenAPI 3.1 document, built in code: the ingress serves it at
`GET /openapi.json`, and `spex.cli.docs_reference` renders the docs' HTTP reference from it.

Each route's operation is written here beside the statuses it answers; the schemas they take
and return are `spex.services.ingress.openapi_schemas`'s. A test holds the operations equal to the
routes the ingress's app registers (tests/services/ingress/test_openapi_covers_every_route.py),
so no route is served undocumented and no documented one is missing.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from spex.proto import submission
from spex.services.ingress.backpressure import RETRIED, RETRY_AFTER_S
from spex.services.ingress.openai_api import WAIT_S
from spex.services.ingress.openapi_schemas import Schema, ref, schemas
from spex.shared.runtime.availability import REFUSING_RETRY_AFTER_S
from spex.shared.runtime.pool import POOL_WAIT_S
from spex.shared.runtime.refusals import MemoryFull

__all__ = ["OPENAPI_VERSION", "document"]

OPENAPI_VERSION = "3.1.0"
API_VERSION = "1"  # the paths' /v1/
JSON = "application/json"
SSE = "text/event-stream"
UNAVAILABLE = (
    f"the ingress is busy (no Redis connection free within {POOL_WAIT_S:g} s), Redis is unreachable, "
    "or Redis refuses writes (out of memory, a failed snapshot, a read-only replica); a new question "
    "also while Redis is near its maxmemory (SPEX_MEMORY_HEADROOM)"
)
OPEN_TOO_MANY = (
    "SPEX_HTTP_STREAMS_PER_CLIENT event streams and streamed completions open already, or as many "
    "completions waiting (per caller: a token's client, or without tokens an address)"
)
RETRY_AFTER: Schema = {
    "description": f"seconds to wait before retrying, on every 429 and 503: at least {RETRY_AFTER_S} "
    f"({REFUSING_RETRY_AFTER_S} while Redis refuses writes, {MemoryFull.retry_after_s} while it has no room "
    "for a new question's search)",
    "schema": {"type": "integer", "minimum": 0},
}

# The groups of operations, in the order the reference shows them.
TAGS = [
    {"name": "Questions", "description": "SPEX's own API: submit a question, read its answer, cancel it."},
    {
        "name": "Watch",
        "description": "What the ingress shows of the searches: a tree, its events, the cluster.",
    },
    {"name": "OpenAI", "description": "The OpenAI-compatible face: `model` names the search."},
    {"name": "Probes", "description": "Liveness and readiness, for an orchestrator."},
    {"name": "Meta", "description": "This API's description."},
]
QID: Schema = {
    "name": "qid",
    "in": "path",
    "required": True,
    "description": "the query id POST /v1/questions answered with (malformed or unknown: a 404)",
    "schema": {"type": "string", "pattern": f"^{submission.QUERY_ID.pattern}$"},
}


def _json(description: str, schema: Schema) -> Schema:
    return {"description": description, "content": {JSON: {"schema": schema}}}


def _text(description: str, media_type: str) -> Schema:
    return {"description": description, "content": {media_type: {"schema": {"type": "string"}}}}


def _refused(description: str) -> Schema:
    return _json(description, ref("Error"))


def _openai_refused(description: str) -> Schema:
    return _json(description, ref("OpenAIError"))


def _body(schema: str) -> Schema:
    return {"required": True, "content": {JSON: {"schema": ref(schema)}}}


def _op(op_id: str, tag: str, summary: str, responses: dict[str, Schema], **more: Any) -> Schema:
    """One operation: its id, its group, what it does, what it answers (and its parameters or
    request body, `more`)."""
    return {"operationId": op_id, "tags": [tag], "summary": summary, **more, "responses": responses}


def _questions() -> dict[str, dict[str, Schema]]:
    """SPEX's own API: submit, read, cancel (`spex.services.ingress`)."""
    unreachable = _refused(UNAVAILABLE)
    no_such = _refused("no such question (or another client's)")
    submit = {
        "202": _json("accepted (or the same client key's question): its id", ref("QueryId")),
        "400": _refused("a bad field, or a body that is not a JSON object"),
        "408": _refused("the body was not sent in time"),
        "409": _refused("the client key names a different question"),
        "413": _refused("the body (or the question) is too large"),
        "415": _refused("a body of another type than application/json"),
        "429": _refused("too many questions in flight (this client's, or the backlog's)"),
        "503": _refused(
            f"{UNAVAILABLE}; a question under a client key not found while Redis's loss of its data "
            "stands (the coordinators are storing their questions again, client keys first)"
        ),
    }
    read = {
        "200": _json("answered, failed or cancelled", ref("Answer")),
        "202": _json(
            "still being searched (or, while Redis's loss of its data stands, being stored again): "
            '{"status": "searching"}',
            ref("Status"),
        ),
        "404": no_such,
        "503": unreachable,
    }
    cancel = {
        "202": _json('{"status": "cancelling"}', ref("Status")),
        "404": no_such,
        "409": _refused("the question is answered already: nothing to cancel (GET it for its answer)"),
        "503": unreachable,
    }
    return {
        "/v1/questions": {
            "post": _op(
                "submitQuestion", "Questions", "submit a question", submit, requestBody=_body("Question")
            )
        },
        "/v1/questions/{qid}": {
            "get": _op("getQuestion", "Questions", "a question's answer", read, parameters=[QID]),
            "delete": _op("cancelQuestion", "Questions", "cancel a question", cancel, parameters=[QID]),
        },
    }


def _watch() -> dict[str, dict[str, Schema]]:
    """What the ingress shows of the searches, and its probes (`spex.services.ingress.watch`)."""
    unreachable = _refused(UNAVAILABLE)
    no_such = _refused("no such question (or another client's)")
    tree = {"200": _json("its nodes so far", ref("Tree")), "404": no_such, "503": unreachable}
    events = {
        "200": _text("a `node` event per change of a node (a Node), then an `answer` event (an Answer)", SSE),
        "404": no_such,
        "429": _refused(OPEN_TOO_MANY),
        "503": unreachable,
    }
    ready = {
        "200": _json('{"status": "ready"}', ref("Status")),
        "503": _json(
            "Redis does not take a write (unreachable, or refusing writes): "
            '{"status": "unready", "error": "..."}',
            {"type": "object"},
        ),
    }
    return {
        "/v1/questions/{qid}/tree": {
            "get": _op("getTree", "Watch", "a question's tree", tree, parameters=[QID])
        },
        "/v1/questions/{qid}/events": {
            "get": _op("streamEvents", "Watch", "a question's tree as it grows", events, parameters=[QID])
        },
        "/v1/overview": {
            "get": _op(
                "getOverview",
                "Watch",
                "the cluster at a glance",
                {"200": _json("its figures", ref("Overview")), "503": unreachable},
            )
        },
        "/": {
            "get": _op("getLiveView", "Watch", "the live web view", {"200": _text("the page", "text/html")})
        },
        "/health": {
            "get": _op(
                "getHealth",
                "Probes",
                "the process answers",
                {"200": _json('{"status": "ok"}', ref("Status"))},
            )
        },
        "/ready": {"get": _op("getReady", "Probes", "the process reaches Redis", ready)},
        "/openapi.json": {
            "get": _op(
                "getOpenAPI",
                "Meta",
                "this document",
                {"200": _json("the OpenAPI document", {"type": "object"})},
            )
        },
    }


def _openai() -> dict[str, dict[str, Schema]]:
    """The OpenAI-compatible face (`spex.services.ingress.openai_api`)."""
    completion = {
        "description": "the completion (with stream: chat.completion.chunk events, then data: [DONE])",
        "content": {JSON: {"schema": ref("ChatCompletion")}, SSE: {"schema": {"type": "string"}}},
    }
    unreachable = _openai_refused(UNAVAILABLE)
    chat = {
        "200": completion,
        "400": _openai_refused("a parameter refused (error.param names it), or a body not a JSON object"),
        "404": _openai_refused("no such model"),
        "408": _openai_refused("the body was not sent in time"),
        "409": _openai_refused("the client key names a different question"),
        "413": _openai_refused("the body is too large"),
        "429": _openai_refused(f"too many questions in flight, or {OPEN_TOO_MANY}"),
        "500": _openai_refused("the search failed"),
        "503": unreachable,
        "504": _openai_refused(f"no answer within {WAIT_S:.0f} s"),
    }
    models = {"200": _json("a sample of the model names (any target is served)", ref("Models"))}
    for responses in (chat, models):
        responses["401"] = _openai_refused("no token, or a wrong one (where tokens are set): invalid_api_key")
    return {
        "/v1/models": {"get": _op("listModels", "OpenAI", "the searches, as OpenAI models", models)},
        "/v1/chat/completions": {
            "post": _op(
                "createChatCompletion",
                "OpenAI",
                "ask SPEX as an OpenAI model",
                chat,
                requestBody=_body("ChatRequest"),
            )
        },
    }


def document(open_paths: Collection[str]) -> Schema:
    """The OpenAPI document of the ingress, whose `open_paths` are served without a token
    (every other route needs one where tokens are configured, and answers 401 without it)."""
    paths = {**_questions(), **_watch(), **_openai()}
    for path, operations in paths.items():
        for operation in operations.values():
            if path in open_paths:
                operation["security"] = []
            else:
                operation["responses"].setdefault(
                    "401", _refused("no token, or a wrong one (where tokens are set)")
                )
            for status, response in operation["responses"].items():
                if int(status) in RETRIED:
                    response["headers"] = {"Retry-After": RETRY_AFTER}
            operation["responses"] = dict(sorted(operation["responses"].items()))
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "SPEX ingress",
            "version": API_VERSION,
            "description": "Submit questions to be searched, follow their trees, read their answers; "
            "an OpenAI-compatible face on the same. Every refusal is one line of JSON.",
        },
        "security": [{"bearer": []}],
        "tags": TAGS,
        "paths": paths,
        "components": {
            "schemas": schemas(),
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "Authorization: Bearer <token>, a token of SPEX_AUTH_TOKENS or "
                    "SPEX_AUTH_TOKENS_FILE; with neither set, no token is asked for",
                }
            },
        },
    }
