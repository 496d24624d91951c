"""Small helpers of the service tests: polling, HTTP, metrics, dead letters, answers, the
state of a cluster's processes, requests and jobs built by hand."""

import asyncio
import json
import time
import urllib.error
import urllib.request

from spex.proto import AnswerResult, GenerateRequest, ScoreRequest, SubmitQuestionRequest, decode, encode
from spex.proto.names import (
    ANSWERS,
    DEFAULT_POOL,
    GENERATOR_GROUP,
    SINGLE,
    dead_letter,
    query_request,
    worker_jobs,
)
from spex.services.generator.service import Generator
from spex.shared.runtime.bus import Bus
from spex.shared.runtime.connect import redis_client
from spex.shared.runtime.settings import Settings


async def wait_for(predicate, timeout_s=20.0, every_s=0.05):
    """Poll `await predicate()` until it is truthy (returns True) or `timeout_s` passes."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        if await predicate():
            return True
        await asyncio.sleep(every_s)
    return False


def http(method, url, body=None, token=None, raw=None, timeout_s=5):
    """(status, decoded JSON body) of one real HTTP request."""
    status, reply, _headers = http_headed(method, url, body, token, raw, timeout_s)
    return status, reply


def http_headed(method, url, body=None, token=None, raw=None, timeout_s=5):
    """(status, decoded JSON body, headers) of one real HTTP request."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return resp.status, json.loads(resp.read()), resp.headers
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}"), exc.headers


def http_retry_after(method, url, body=None):
    """(status, Retry-After header, decoded JSON body) of one real HTTP request."""
    status, reply, headers = http_headed(method, url, body)
    return status, headers.get("Retry-After"), reply


def wait_http(url, timeout_s=15.0):
    """Wait until an HTTP server answers on `url` (any status)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            http("GET", url)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def scrape(port, timeout_s=10.0):
    """(status, text) of the Prometheus metrics a process serves on `port`, waiting up to
    `timeout_s` for it to listen."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as resp:
                return resp.status, resp.read().decode()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


async def reasons(r, stream):
    """The reasons of every entry dead-lettered from `stream`."""
    return [f[b"reason"].decode() for _, f in await r.xrange(dead_letter(stream))]


async def answers_by_query(r):
    """query id -> how many answers the answers stream holds for it."""
    counts: dict[str, int] = {}
    for _, fields in await r.xrange(ANSWERS):
        answer = decode(ANSWERS, fields[b"e"])
        assert isinstance(answer, AnswerResult)
        counts[answer.query_id] = counts.get(answer.query_id, 0) + 1
    return counts


def ask_math500(url, timeout_s=120.0, count=3):
    """Submit `count` MATH-500 questions (REBASE-2, SPEX) to the runtime on `url` and wait:
    their answers, and each query's inbox events, in submission order."""
    import redis.asyncio as aioredis

    from spex.proto.names import query_inbox
    from spex.shared.content.datasets import load_questions
    from spex.shared.runtime.client import IngressClient

    async def ask():
        client = IngressClient(aioredis.Redis.from_url(url), partitions=SINGLE)
        try:
            qids = [
                await client.submit(
                    q.text, algorithm="rebase", target=2, mode="spex", reference_answer=q.reference_answer
                )
                for q in load_questions("math500", limit=count)
            ]
            answers = [await client.result(qid, timeout_s=timeout_s) for qid in qids]
            inbox = {qid: await client.r.xrange(query_inbox(qid, SINGLE)) for qid in qids}
            return answers, [[decode(query_inbox(q, SINGLE), f[b"e"]) for _, f in inbox[q]] for q in qids]
        finally:
            await client.aclose()

    return asyncio.run(ask())


async def job_streams(r):
    """Every generation-job stream: the shared one and each worker's own (affinity routing)."""
    from spex.proto.names import gen_jobs

    return sorted({k.decode() async for k in r.scan_iter(match=gen_jobs.glob, _type="stream")})


async def jobs_pending(r):
    """Generation jobs delivered and not yet acknowledged, over every job stream."""
    from spex.proto.names import GENERATOR_GROUP

    total = 0
    for stream in await job_streams(r):
        total += (await r.xpending(stream, GENERATOR_GROUP))["pending"]
    return total


def alive(cluster, name):
    """Whether the cluster's process `name` still runs."""
    return cluster.procs[name].poll() is None


def restarts(cluster, name):
    """How many times the cluster's supervisor restarted `name`."""
    return cluster.supervisor.children[name].restarts


async def all_adopted(r, questions):
    """Whether the coordinators hold at least `questions` active queries."""
    return await r.zcard("coord:active") >= questions


async def known_query(r, qid="q"):
    """Store a request for `qid`, so that its jobs are run, not dropped as of an unknown query."""
    await r.set(
        query_request(qid, SINGLE), encode(SubmitQuestionRequest(msg_id="s", query_id=qid, question="?"))
    )


def score_job(path, **fields):
    """A score job of query "q" (unless `fields` say otherwise) on the node path `path`."""
    return ScoreRequest(
        **{"msg_id": "m", "query_id": "q", "job_id": "j", "node_id": "n", **fields},
        prompt_node_ids=path,
        prompt_tokens=[5] * len(path),
    )


async def generator_with_a_job(redis_url, time_scale):
    """Generator "gen-a" (not running; its engine on the simulated GPU at `time_scale`) and one
    job "j" of the known query "q" in its own job stream: (client, generator, stream)."""
    settings = Settings(redis_url=redis_url, consumer="gen-a", time_scale=time_scale)
    r = redis_client(settings)
    stream = worker_jobs(DEFAULT_POOL, "gen-a")
    producer = Bus(r, "producer", partitions=SINGLE)
    await producer.ensure_group(stream, GENERATOR_GROUP)
    await known_query(r)
    job = GenerateRequest(
        msg_id="q/j/gen", query_id="q", job_id="j", node_id="n", parent_id="root",
        child_index=0, action="expand", prompt_node_ids=["root"], prompt_tokens=[300], seed=0,
        max_new_tokens=64,
    )  # fmt: skip
    await producer.publish(stream, job)
    return r, Generator(r, settings), stream


HELD = "held"  # a long-lived request still open when looked at: a stream that sent its first chunk, or a wait


async def held_or_refused(request, wait_s=3.0):
    """HELD if `request` (an aiohttp request's context) is still open after `wait_s` (a stream
    that sent its first line, or a wait), else (status, body, Retry-After) of its reply."""
    try:
        async with asyncio.timeout(wait_s), request as resp:
            if resp.status == 200 and resp.content_type == "text/event-stream":
                if resp.url.path.endswith("completions"):  # the role's chunk: the stream is open
                    assert (await resp.content.readline()).startswith(b"data: ")
                await asyncio.sleep(3600)  # held open until the session closes
            return resp.status, json.loads(await resp.read()), resp.headers.get("Retry-After")
    except TimeoutError:
        return HELD
