"""What a worker reads of a job's query beyond the job: the question and the question's own prompt
texts, stored once under the query (`spex.proto.names.query_request`) rather than carried by each
of the jobs queued at once (`GenerateRequest.question_stored`, `carried_format`)."""

from __future__ import annotations

from collections import OrderedDict
from typing import cast

import msgspec
import redis.asyncio as aioredis

from spex.proto import GenerateRequest, ScoreRequest, SubmitQuestionRequest, decode
from spex.proto.messages import PromptFormat
from spex.proto.names import Partitions, query_request
from spex.shared.content.prompt_style import question_format

__all__ = ["QUESTIONS_KEPT", "StoredRequests"]

QUESTIONS_KEPT = 64  # the stored requests a worker keeps, of the queries it ran jobs for last


class StoredRequests:
    """The stored requests of the queries a worker ran jobs for last, each read once a query."""

    def __init__(self, r: aioredis.Redis, partitions: Partitions) -> None:
        self.r, self.partitions = r, partitions
        self._kept: OrderedDict[str, SubmitQuestionRequest] = OrderedDict()  # query id -> request

    async def prompt(self, req: GenerateRequest | ScoreRequest) -> tuple[str, PromptFormat] | None:
        """The question a job's prompt begins with and the prompt's texts: the job's own if it
        carries them, else its query's stored question, and the prompt settled again from what
        the job carries and the question's own texts. None: no such request (its query answered
        and expired, or unknown)."""
        if not req.question_stored:
            return req.question, req.prompt
        stored = self._kept.get(req.query_id)
        if stored is None:
            key = query_request(req.query_id, self.partitions)
            blob = cast(bytes | None, await self.r.get(key))
            request = decode(key, blob) if blob is not None else None
            if not isinstance(request, SubmitQuestionRequest):
                return None
            stored = self._kept[req.query_id] = request
            while len(self._kept) > QUESTIONS_KEPT:
                self._kept.popitem(last=False)
        self._kept.move_to_end(req.query_id)
        own = question_format(req.prompt, stored)
        if isinstance(req, ScoreRequest):  # the reward model reads the path in its own chat template
            own = msgspec.structs.replace(own, chat_template="")
        return stored.question, own
