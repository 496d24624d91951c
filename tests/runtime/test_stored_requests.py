"""A worker's stored requests: a job that does not carry its question reads it, and the question's
own prompt texts, from its query's stored request — once a query — and a score job's prompt
leaves the generator's chat template behind; a query whose request is gone gives None."""

import asyncio

import redis.asyncio as aioredis

from spex.proto import GenerateRequest, ScoreRequest, SubmitQuestionRequest
from spex.proto.codec import encode
from spex.proto.messages import PromptFormat
from spex.proto.names import SINGLE, query_request
from spex.shared.runtime.stored_requests import StoredRequests

OWN = SubmitQuestionRequest(
    msg_id="m", query_id="q1", question="What is 2 + 3?", system_prompt="Be terse.", chat_template="{{ x }}"
)
CARRIED = PromptFormat("", "", "\n###\n")  # the deployment's delimiter; the question's own texts left out
JOB = {"msg_id": "j", "job_id": "j", "node_id": "n", "prompt_node_ids": ["r"], "prompt_tokens": [3]}
GENERATE = {**JOB, "parent_id": "r", "child_index": 0, "action": "expand", "seed": 1}


async def read(redis_url: str) -> list:
    r = aioredis.from_url(redis_url)
    try:
        await r.set(query_request("q1", SINGLE), encode(OWN))
        stored = StoredRequests(r, SINGLE)
        gen = GenerateRequest(query_id="q1", question_stored=True, prompt=CARRIED, **GENERATE)
        score = ScoreRequest(query_id="q1", question_stored=True, prompt=CARRIED, **JOB)
        first = await stored.prompt(gen)
        await r.delete(query_request("q1", SINGLE))  # read once a query: kept after the first job
        again, scored = await stored.prompt(gen), await stored.prompt(score)
        carried = await stored.prompt(GenerateRequest(query_id="q2", question="Inline?", **GENERATE))
        gone = await stored.prompt(GenerateRequest(query_id="q3", question_stored=True, **GENERATE))
        return [first, again, scored, carried, gone]
    finally:
        await r.aclose()


def test_a_job_reads_its_question_and_own_prompt_from_the_stored_request(redis_url):
    first, again, scored, carried, gone = asyncio.run(read(redis_url))
    own = PromptFormat("Be terse.", "{{ x }}", "\n###\n")
    assert first == again == ("What is 2 + 3?", own)
    assert scored == ("What is 2 + 3?", PromptFormat("Be terse.", "", "\n###\n"))
    assert carried == ("Inline?", PromptFormat())
    assert gone is None
