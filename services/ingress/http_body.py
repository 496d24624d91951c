"""A request's JSON body, read the one way every ingress route that takes one reads it (SPEX's
own `POST /v1/questions` and the OpenAI face's `POST /v1/chat/completions`): a declared length
past the limit is refused before the body is read, a body not sent in time is a 408, and a
body that is not JSON says why — the parser's reason and where — apart from JSON of the wrong
shape (a list where an object belongs). Each route answers a `BodyRefused` in its own shape.
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

__all__ = ["BODY_TIMEOUT_S", "BodyRefused", "json_object", "read_json_object"]

BODY_TIMEOUT_S = 15.0  # a body not read in whole within this is a 408
# What a JSON value that is not an object is, for the reason a body is refused.
_KINDS = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}


class BodyRefused(ValueError):
    """A body the route cannot take: its HTTP status, the reason, and whether the connection
    must close too (a body left unread on it)."""

    def __init__(self, status: int, problem: str, close: bool = False) -> None:
        super().__init__(f"body: {problem}")
        self.status, self.close = status, close


def json_object(raw: bytes) -> dict[str, object]:
    """The JSON object `raw` holds; BodyRefused (400) saying whether it is not JSON at all (and
    where the parser stopped) or JSON of another kind."""
    if not raw.strip():
        raise BodyRefused(400, "empty: send a JSON object")
    try:
        body = json.loads(raw)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise BodyRefused(400, f"not valid JSON: {exc.msg.lower()} at {where}") from None
    except UnicodeDecodeError as exc:
        raise BodyRefused(400, f"not valid JSON: not UTF-8 text (byte {exc.start})") from None
    except RecursionError:
        raise BodyRefused(400, "not valid JSON: nested too deeply") from None
    if not isinstance(body, dict):
        kind = _KINDS.get(type(body), "null")
        raise BodyRefused(400, f"must be a JSON object, not {kind}")
    return body


async def read_json_object(request: web.Request, max_body: int) -> dict[str, object]:
    """The request's body as a JSON object, at most `max_body` bytes; BodyRefused if not."""
    too_large = BodyRefused(413, f"larger than {max_body:,} bytes", close=True)
    if request.content_length is not None and request.content_length > max_body:
        raise too_large  # refused unread
    try:
        raw = await asyncio.wait_for(request.read(), BODY_TIMEOUT_S)
    except web.HTTPRequestEntityTooLarge:
        raise too_large from None
    except TimeoutError:
        raise BodyRefused(408, f"not sent within {BODY_TIMEOUT_S:.0f} s", close=True) from None
    return json_object(raw)
