"""What the HTTP clients (`Client`, `AsyncClient`) share of the transport: the ingress's routes
and request bodies, and its refusals as exceptions that say whether a retry can help. The
replies' types are `_replies`'. The routes are the ingress's (`spex.services.ingress`, the
docs' HTTP reference)."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping

__all__ = [
    "ClientError",
    "NotFound",
    "Rejected",
    "Unauthorized",
    "Unavailable",
    "check_url",
    "headers",
    "question_path",
    "refusal",
    "reply_json",
    "submission",
    "unreachable",
]

QUESTIONS = "/v1/questions"
REQUEST_TIMEOUT_S = 30.0  # one request; the ingress answers at once (it waits on nothing)
POLL_FIRST_S = 0.1  # waiting for an answer: the first pause between looks ...
POLL_MOST_S = 1.0  # ... growing by half each look up to this (the ingress has no blocking read)
# An event stream's read: the ingress sends a keepalive every 15 s (`services.watch.KEEPALIVE_S`).
STREAM_READ_TIMEOUT_S = 60.0


class ClientError(Exception):
    """The ingress refused a request, answered it with an error, or did not answer.

    Attributes:
        status: The HTTP status (`None`: no answer at all).
        said: The ingress's own one-line reason (`None`: no answer, or not the ingress's JSON).
        retryable: Whether sending the same request later can help.
        retry_after_s: How long the ingress asked to wait first (its `Retry-After`), if it did.
    """

    retryable = False

    def __init__(
        self,
        message: str,
        status: int | None = None,
        said: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.said, self.retry_after_s = status, said, retry_after_s


class Unauthorized(ClientError):
    """401: the ingress asks for a bearer token and none, or a wrong one, was given."""


class NotFound(ClientError):
    """404: no such question (or another token's)."""


class Rejected(ClientError):
    """A request to fix, not to repeat: a bad field (400), a client key reused for another
    question (409), a body too large (413) or of another type than JSON (415)."""


class Unavailable(ClientError):
    """Not now: too many questions in flight (429), the ingress busy or its queue away (503),
    another server error, or no answer at all (unreachable, timed out). Retry later."""

    retryable = True


def check_url(url: str) -> str:
    """The ingress's base URL without a trailing slash; ValueError for anything else (a URL with
    credentials too: the token goes in a header, never in a URL that logs keep)."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError(f"url: give the ingress's URL, http://HOST:PORT (or https://), not {url!r}")
    if parsed.username or parsed.password:
        raise ValueError("url: no credentials in the URL: give the bearer token as token=")
    return url.rstrip("/")


def question_path(query_id: str, tail: str = "") -> str:
    return f"{QUESTIONS}/{urllib.parse.quote(query_id, safe='')}{tail}"


def headers(token: str | None, body: bool = False) -> dict[str, str]:
    out = {"Accept": "application/json"}
    if body:
        out["Content-Type"] = "application/json"
    if token:
        out["Authorization"] = f"Bearer {token}"
    return out


def submission(question: str, given: Mapping[str, object], extra: Mapping[str, object]) -> dict[str, object]:
    """The body of POST /v1/questions: the question and every field given (None: left out, the
    ingress's default); `reference` is the wire's `reference_answer`."""
    body: dict[str, object] = {"question": question}
    for name, value in {**given, **extra}.items():
        if value is not None:
            body["reference_answer" if name == "reference" else name] = value
    return body


def reply_json(url: str, status: int, raw: bytes) -> dict[str, object]:
    """A reply's JSON object, or the ClientError of a server that is not the ingress."""
    try:
        out = json.loads(raw)
    except ValueError:
        out = None
    if not isinstance(out, dict):
        raise ClientError(
            f"{url} answered HTTP {status}, and not in the ingress's JSON: is it the ingress?", status
        )
    return out


def refusal(url: str, status: int, raw: bytes, token: str | None, retry_after: str | None) -> ClientError:
    """The exception of a reply with an error status."""
    said = reply_json(url, status, raw).get("error")
    wait_s = _seconds(retry_after)
    if status == 401:
        given = "refused the token" if token else "needs a token"
        return Unauthorized(f"the ingress at {url} {given}", status, said if isinstance(said, str) else None)
    if not isinstance(said, str):
        return ClientError(f"{url} answered HTTP {status}", status)
    if status >= 500:
        return Unavailable(f"the ingress at {url} answered HTTP {status}: {said}", status, said, wait_s)
    message = said if status in (400, 404, 409, 413) else f"{said} (HTTP {status})"
    if status == 404:
        return NotFound(message, status, said)
    if status in (408, 429):
        return Unavailable(message, status, said, wait_s)
    return Rejected(message, status, said)


def unreachable(url: str, reason: object, timeout_s: float | None = None) -> Unavailable:
    if timeout_s is not None:
        return Unavailable(f"the ingress at {url} did not answer within {timeout_s:g} s")
    return Unavailable(f"cannot reach the ingress at {url}: {reason}")


def _seconds(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
