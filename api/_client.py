"""`Client`: the HTTP service from plain (blocking) Python — a notebook, a script — over the
standard library's urllib. `AsyncClient` (`_async_client`) is the same for asyncio."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

from spex._http import (
    POLL_FIRST_S,
    POLL_MOST_S,
    QUESTIONS,
    REQUEST_TIMEOUT_S,
    STREAM_READ_TIMEOUT_S,
    check_url,
    headers,
    question_path,
    refusal,
    reply_json,
    submission,
    unreachable,
)
from spex._replies import Answer, Event, EventStream, Tree

if TYPE_CHECKING:
    from http.client import HTTPResponse

    from spex.shared.runtime.bodies import AnswerJson, TreeJson

__all__ = ["Client"]


class Client:
    """A client of SPEX's HTTP ingress (`spex up` prints its URL; `spex worker ingress` serves
    it). Every method is one request (`wait` polls, `events` holds one stream open) and raises
    a `ClientError` the ingress's refusal names: `Unauthorized`, `NotFound`, `Rejected`, or
    `Unavailable` where a retry can help.

    Args:
        url: The ingress's base URL, `http://HOST:PORT`.
        token: The bearer token, where the ingress asks for one (`SPEX_AUTH_TOKENS`).
        timeout_s: How long one request may take.

    Example:
        ```python
        client = spex.Client("http://127.0.0.1:8080", token=os.environ.get("SPEX_TOKEN"))
        qid = client.submit("What is 2 + 3?", algorithm="rebase", target=8, reference="5")
        answer = client.wait(qid, timeout_s=120)
        print(answer.answer, answer.correct, answer.solution)
        ```
    """

    def __init__(self, url: str, token: str | None = None, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.url = check_url(url)
        self._token = token or None
        self.timeout_s = timeout_s

    def __repr__(self) -> str:  # never the token
        return f"Client({self.url!r}, token={'set' if self._token else 'none'})"

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to let go of (each request has its own connection); for symmetry with
        `AsyncClient` and `with` blocks."""

    def submit(
        self,
        question: str,
        *,
        algorithm: str | None = None,
        target: int | None = None,
        seed: int | None = None,
        mode: str | None = None,
        reference: str | None = None,
        client_key: str | None = None,
        early_stop: bool | None = None,
        early_stop_alpha: float | None = None,
        early_stop_min_answers: int | None = None,
        early_stop_weight: str | None = None,
        baseline_twin: bool | None = None,
        prompt_tokens: int | None = None,
        **fields: Any,
    ) -> str:
        """Submit a question; returns its query id. A field left `None` takes the ingress's
        default (docs: the HTTP API's `Question` schema, which also lists `fields`: any other
        field of it, sent as is).

        Args:
            question: The question.
            algorithm: The search (`rebase`, `ets`, `rstar`, `rest`).
            target: Its width (REBASE, ETS) or rollouts (MCTS).
            seed: What its random choices derive from (with its query id).
            mode: `"spex"` (with speculation, the ingress's default) or `"baseline"`.
            reference: A reference answer to grade the answer against.
            client_key: An idempotency key: submitting again under it gives the same id.
            early_stop: Adaptive early termination (T3).
            early_stop_alpha: T3's margin scale α.
            early_stop_min_answers: T3 waits for this many answers.
            early_stop_weight: An answer's T3 weight: `"min"` or `"last"`.
            baseline_twin: Also search it with speculation off; its answer then says whether
                both trees are the same (`Answer.baseline_twin`).
            prompt_tokens: The question's length in tokens (default: estimated).
        """
        given = {
            "algorithm": algorithm, "target": target, "seed": seed, "mode": mode, "reference": reference,
            "client_key": client_key, "early_stop": early_stop, "early_stop_alpha": early_stop_alpha,
            "early_stop_min_answers": early_stop_min_answers, "early_stop_weight": early_stop_weight,
            "baseline_twin": baseline_twin, "prompt_tokens": prompt_tokens,
        }  # fmt: skip
        _, reply = self._call("POST", QUESTIONS, submission(question, given, fields))
        return str(reply["query_id"])

    def result(self, query_id: str) -> Answer | None:
        """The question's answer, or `None` while it is being searched."""
        status, reply = self._call("GET", question_path(query_id))
        return Answer.from_json(query_id, cast("AnswerJson", reply)) if status == 200 else None

    def wait(self, query_id: str, timeout_s: float | None = None) -> Answer:
        """The question's answer once it has one (looking again at growing intervals, up to a
        second); `TimeoutError` if none came within `timeout_s` (`None`: wait as long as it takes)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        pause = POLL_FIRST_S
        while True:
            answer = self.result(query_id)
            if answer is not None:
                return answer
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"{query_id}: no answer within {timeout_s} s")
            time.sleep(pause if left is None else min(pause, left))
            pause = min(POLL_MOST_S, pause * 1.5)

    def cancel(self, query_id: str) -> None:
        """Cancel the question's search (an answered question keeps its answer)."""
        self._call("DELETE", question_path(query_id))

    def tree(self, query_id: str) -> Tree:
        """The question's tree as searched so far."""
        return Tree.from_json(cast("TreeJson", self._call("GET", question_path(query_id, "/tree"))[1]))

    def events(self, query_id: str) -> Iterator[Event]:
        """The question's tree as it grows: a `NodeEvent` each time a node changes, then one
        `AnswerEvent`, then the iteration ends. An ingress holds a few streams open per token
        (`SPEX_HTTP_STREAMS_PER_CLIENT`): close the iterator (or read it to its end) when done."""
        request = urllib.request.Request(
            self.url + question_path(query_id, "/events"),
            headers=headers(self._token) | {"Accept": "text/event-stream"},
        )
        stream = EventStream(query_id)
        with self._open(request, STREAM_READ_TIMEOUT_S) as reply:
            try:
                for raw in reply:
                    yield from stream.feed(raw.decode())
                    if stream.done:
                        return
            except OSError as exc:  # the connection dropped, or went silent past the keepalives
                timed_out = isinstance(exc, TimeoutError)
                raise unreachable(self.url, exc, STREAM_READ_TIMEOUT_S if timed_out else None) from None
        stream.ended()

    def overview(self) -> dict[str, Any]:
        """The cluster at a glance (`GET /v1/overview`: the docs' HTTP reference lists its fields)."""
        return self._call("GET", "/v1/overview")[1]

    def _call(
        self, method: str, path: str, body: dict[str, object] | None = None
    ) -> tuple[int, dict[str, object]]:
        """(status, JSON object) of a 2xx reply; any other reply, or none, a `ClientError`."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers=headers(self._token, data is not None)
        )
        with self._open(request, self.timeout_s) as reply:
            return reply.status, reply_json(self.url, reply.status, reply.read())

    def _open(self, request: urllib.request.Request, timeout_s: float) -> HTTPResponse:
        try:
            return urllib.request.urlopen(request, timeout=timeout_s)
        except urllib.error.HTTPError as exc:
            raise refusal(
                self.url, exc.code, exc.read(), self._token, exc.headers.get("Retry-After")
            ) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            if isinstance(reason, TimeoutError):
                raise unreachable(self.url, reason, timeout_s) from None
            reason = reason.strerror if isinstance(reason, OSError) and reason.strerror else reason
            raise unreachable(self.url, reason) from None
