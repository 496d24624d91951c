"""The ingress client: submit questions, wait for answers, cancel.

`submit` is one script — remember the client key, count the question in flight, append to
the ingress stream — so a retried submission with the same client key is answered once, and
a backlog over `backlog_limit` questions in flight is refused (backpressure) instead of
queued without bound. Answers come back on the query's reply key. The HTTP ingress, the
Celery adapter, the launcher and the `spex submit` command all go through this client.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import redis.asyncio as aioredis

from spex.proto import (
    AnswerResult,
    CancelRequest,
    ProtocolError,
    SubmissionError,
    SubmitQuestionRequest,
    decode,
    encode,
    names,
    submission,
)

__all__ = ["Backpressure", "IngressClient"]

_SUBMIT = """
local existing = redis.call('GET', KEYS[1])
if existing then return {0, existing} end
local inflight = tonumber(redis.call('GET', KEYS[3]) or '0')
if inflight >= tonumber(ARGV[3]) then return {-1, tostring(inflight)} end
redis.call('SET', KEYS[1], ARGV[1], 'EX', 86400)
redis.call('INCR', KEYS[3])
redis.call('XADD', KEYS[2], '*', 'e', ARGV[2])
return {1, ARGV[1]}
"""


class Backpressure(RuntimeError):
    """The ingress backlog is full. Recoverable: retry later."""


class IngressClient:
    def __init__(self, client: aioredis.Redis, backlog_limit: int = 10_000) -> None:
        self.r = client
        self.backlog_limit = backlog_limit
        self._submit = client.register_script(_SUBMIT)

    async def submit(
        self,
        question: str,
        *,
        query_id: str | None = None,
        client_key: str | None = None,
        algorithm: str | None = None,
        target: int | None = None,
        seed: int | None = None,
        mode: str | None = None,
        prompt_tokens: int | None = None,
        reference_answer: str | None = None,
    ) -> str:
        """Submit a question; returns its query id (the first one's, for a repeated client
        key). A field left None takes `SubmitQuestionRequest`'s default; a bad one raises
        `SubmissionError` naming it."""
        qid = query_id or uuid.uuid4().hex[:16]
        given = {
            "algorithm": algorithm,
            "target": target,
            "seed": seed,
            "mode": mode,
            "prompt_tokens": prompt_tokens,
            "reference_answer": reference_answer,
        }
        fields = submission.check_fields({k: v for k, v in given.items() if v is not None})
        key = client_key or qid
        req = submission.validate(
            SubmitQuestionRequest(
                msg_id=f"submit/{key}",
                query_id=qid,
                trace_id=uuid.uuid4().hex,
                created_ms=int(time.time() * 1000),
                question=question,
                client_key=key,
                **fields,
            )
        )
        try:
            payload = encode(req)
        except ProtocolError as exc:
            raise SubmissionError("question", f"too long: {exc}") from None
        keys = [names.submitted_key(key), names.INGRESS, names.INGRESS_IN_FLIGHT]
        status, value = await self._submit(keys=keys, args=[qid, payload, self.backlog_limit])
        if int(status) == -1:
            raise Backpressure(
                f"{value.decode()} questions in flight (limit {self.backlog_limit}); retry later"
            )
        return value.decode() if isinstance(value, bytes) else str(value)

    async def result(self, query_id: str, timeout_s: float | None = None) -> AnswerResult | None:
        """The answer, waiting up to `timeout_s` (None: only look)."""
        key = names.reply_key(query_id)
        deadline = time.monotonic() + (timeout_s or 0.0)
        while True:
            blob = await self.r.get(key)
            if blob is not None:
                answer = decode(key, bytes(blob) if isinstance(blob, bytes) else blob.encode())
                assert isinstance(answer, AnswerResult)
                return answer
            if timeout_s is None or time.monotonic() >= deadline:
                return None
            await asyncio.sleep(0.05)

    async def cancel(self, query_id: str) -> None:
        msg = CancelRequest(msg_id=f"{query_id}/cancel", query_id=query_id, reason="client cancelled")
        await self.r.xadd(names.query_inbox(query_id), {"e": encode(msg)})

    async def aclose(self) -> None:
        await self.r.aclose()
